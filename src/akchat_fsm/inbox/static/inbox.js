// The inbox works without this file: it only keeps countdowns ticking and refreshes the
// pending list when the server says it changed (GET /events). No inline script anywhere:
// the page's Content-Security-Policy allows this file and nothing else (ADR-0130).
"use strict";

(function () {
  var loaded = performance.now();

  function format(ms) {
    if (ms <= 0) return "expired";
    var s = Math.ceil(ms / 1000);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    s = s % 60;
    var parts = h ? [h + "h", m + "m"] : m ? [m + "m"] : [];
    parts.push(s + "s");
    return "expires in " + parts.join(" ");
  }

  function tick() {
    var elapsed = performance.now() - loaded;
    document.querySelectorAll(".countdown[data-remaining-ms]").forEach(function (el) {
      var text = format(Number(el.dataset.remainingMs) - elapsed);
      if (el.textContent !== text) el.textContent = text;
    });
  }

  function refresh(section) {
    // Same-origin HTML rendered by the server (escaped there); parsed, never executed.
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("pending");
        if (!fresh) return;
        section.replaceChildren.apply(section, Array.from(fresh.childNodes, function (n) {
          return document.importNode(n, true);
        }));
        loaded = performance.now();
        tick();
        section.dataset.refreshed = String(Number(section.dataset.refreshed || 0) + 1);
      })
      .catch(function () { /* the next event or a reload will do */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    window.setInterval(tick, 1000);
    var section = document.getElementById("pending");
    if (section && section.dataset.events && window.EventSource) {
      var source = new EventSource(section.dataset.events);
      source.addEventListener("pending", function () { refresh(section); });
      document.documentElement.dataset.live = "on";
    }
  });
})();
