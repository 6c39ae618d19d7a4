// /api/docs: Swagger UI over this console's OpenAPI document. No validator badge (it would
// call a service on another host); requests made by "Try it out" go to this console only.
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-url"),
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: false, // (a deep link is an anchor inside each operation's toggle button: nested controls)
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
