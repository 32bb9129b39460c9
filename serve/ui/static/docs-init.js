// Starts Swagger UI on /docs or ReDoc on /redoc from the vendored bundles (no CDN, no inline script).
"use strict";
(function () {
  var sw = document.getElementById("swagger-ui");
  if (sw && window.SwaggerUIBundle) {
    window.ui = window.SwaggerUIBundle({
      url: sw.getAttribute("data-openapi"), dom_id: "#swagger-ui", deepLinking: true,
      validatorUrl: null, presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout"
    });
  }
  var rd = document.getElementById("redoc");
  if (rd && window.Redoc) {
    window.Redoc.init(rd.getAttribute("data-openapi"), {}, rd);
  }
})();
