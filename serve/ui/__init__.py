"""The console's package data: ``templates/`` (Jinja2) and ``static/`` (its CSS and JavaScript, and
the vendored uPlot, Swagger UI and ReDoc with their licences), and its glossary (:mod:`serve.ui.terms`).
The pages are :mod:`serve.routers.ui` and its page modules; what they show comes from
:class:`serve.services.console.ConsoleService`."""
