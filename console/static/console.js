// horae console: the only script of the pages (the CSP allows no other). Two jobs:
// ask before an action form is sent (data-confirm), and refresh a live part
// (data-refresh: its URL, data-every: milliseconds) while the tab is visible.
"use strict";

document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

function refresh(part) {
  var url = part.getAttribute("data-refresh");
  fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
    .then(function (response) {
      if (!response.ok) { throw new Error(response.status); }
      return response.text();
    })
    .then(function (html) {
      part.innerHTML = html; // the server's own escaped fragment
      part.removeAttribute("data-stale");
    })
    .catch(function () { part.setAttribute("data-stale", "true"); });
}

document.querySelectorAll("[data-refresh]").forEach(function (part) {
  var every = parseInt(part.getAttribute("data-every") || "5000", 10);
  window.setInterval(function () {
    if (document.visibilityState === "visible") { refresh(part); }
  }, every);
});
