// The Jobs table and the job page: small conveniences over forms that work without script.
// - The filter form's selects submit it when changed (the button stays for keyboards).
// - A form with data-confirm asks before it is sent (the job page's Cancel button).
// - The log tail opens scrolled to its newest line.
(function () {
  "use strict";

  function start() {
    var filters = document.getElementById("job-filters");
    if (filters) {
      Array.prototype.forEach.call(filters.querySelectorAll("select"), function (select) {
        select.addEventListener("change", function () { filters.submit(); });
      });
    }
    Array.prototype.forEach.call(document.querySelectorAll("form[data-confirm]"), function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
    var log = document.getElementById("log-tail");
    if (log) { log.scrollTop = log.scrollHeight; }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
