// pgfence dashboard: the only script (served from /static, CSP script-src 'self').
// - [data-live]: refresh the element's HTML from its URL every data-every ms (the
//   server renders it, escaped, as it renders the page).
// - [data-select-all=NAME]: a checkbox that checks every input[name=NAME].
// - form[data-confirm]: ask before submitting.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = parseInt(el.getAttribute("data-every"), 10) || 5000;
    setInterval(function () {
      if (document.hidden) return;
      fetch(el.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) el.innerHTML = html; })
        .catch(function () {});
    }, every);
  });
  document.querySelectorAll("[data-select-all]").forEach(function (box) {
    box.addEventListener("change", function () {
      var name = box.getAttribute("data-select-all");
      document.querySelectorAll("input[type=checkbox][name='" + name + "']").forEach(function (c) {
        c.checked = box.checked;
      });
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (ev) {
      if (!window.confirm(f.getAttribute("data-confirm"))) ev.preventDefault();
    });
  });
});
