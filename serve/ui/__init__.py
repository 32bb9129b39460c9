"""The console's package data: ``templates/`` (Jinja2) and ``static/`` (its CSS and JavaScript, and
the vendored uPlot, Swagger UI and ReDoc with their licences); :mod:`serve.ui.data` reads the store
for the pages (:mod:`serve.routers.ui`)."""
