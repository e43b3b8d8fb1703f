// pgqueue dashboard: local times, the selection of the jobs page, and the live updates.
// No inline script anywhere (the pages' Content-Security-Policy allows only files of 'self').
(function () {
  "use strict";

  // Times: <time datetime="...Z"> holds UTC; show it in the browser's time zone.
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.local) return;
      var moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment.getTime())) return;
      el.textContent = format.format(moment);
      el.dataset.local = "1";
    });
  }

  // The jobs page: count the selected jobs, enable the buttons that act on them.
  function selection(root) {
    var all = root.querySelector("[data-select-all]");
    if (all && !all.dataset.wired) {
      all.dataset.wired = "1";
      all.addEventListener("change", function () {
        document.querySelectorAll("input[name=ids]").forEach(function (box) { box.checked = all.checked; });
        update();
      });
    }
    root.querySelectorAll("input[name=ids]").forEach(function (box) {
      if (box.dataset.wired) return;
      box.dataset.wired = "1";
      box.addEventListener("change", update);
    });
    update();
  }
  function update() {
    var n = document.querySelectorAll("input[name=ids]:checked").length;
    document.querySelectorAll("[data-selected-count]").forEach(function (el) { el.textContent = n + " selected"; });
    document.querySelectorAll("[data-needs-selection]").forEach(function (el) { el.disabled = n === 0; });
    if (n === 0) {
      document.querySelectorAll("[data-live].stale").forEach(function (el) {
        el.classList.remove("stale");
        refresh(el);
      });
    }
  }

  // Live updates: each "change" event refreshes the page's live parts (htmx GETs the page and
  // swaps them in), except a part where jobs are selected or a field has the focus.
  function refresh(el) {
    if (el.querySelector("input[name=ids]:checked")) { el.classList.add("stale"); return; }
    var focus = document.activeElement;
    if (focus && el.contains(focus) && focus.matches("input[type=text], select, textarea")) return;
    if (window.htmx) window.htmx.trigger(el, "pgqueue:live");
  }
  var pending = null;
  function changed() {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      document.querySelectorAll("[data-live]").forEach(refresh);
    }, 150);
  }
  function live() {
    var url = document.body.dataset.events;
    var badge = document.getElementById("live");
    if (!url || !badge || !window.EventSource) return;
    var source = new EventSource(url);
    source.addEventListener("hello", function (event) {
      badge.dataset.state = "live";
      try { badge.title = "Live updates (" + JSON.parse(event.data).mode + ")"; } catch (e) { /* keep */ }
    });
    source.addEventListener("change", changed);
    source.addEventListener("error", function () { badge.dataset.state = "down"; badge.title = "Live updates: reconnecting"; });
  }

  function setup(root) { localize(root); selection(root); }
  document.addEventListener("DOMContentLoaded", function () {
    setup(document);
    live();
    document.body.addEventListener("htmx:load", function (event) { setup(event.target); });
  });
})();
