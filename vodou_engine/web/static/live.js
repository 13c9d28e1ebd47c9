/* The inbox's one script: a page that follows a run. Optional: every page works without it.
 *
 * A page whose <main> has data-live listens to that stream of server-sent events; on each
 * "change" it fetches itself again and puts the new <main> in place, keeping what the person
 * is doing there: open toggles, typed text, the focused control. No inline script, no eval,
 * nothing from another origin (the content security policy allows neither).
 */
"use strict";
(function () {
  var main = document.getElementById("main");
  var src = main && main.getAttribute("data-live");
  if (!src || !window.EventSource || !window.fetch || !window.DOMParser) return;
  var busy = false;
  var again = false;

  function keep() {
    var open = {}, typed = {}, ticked = {};
    main.querySelectorAll("details[id]").forEach(function (d) { open[d.id] = d.open; });
    main.querySelectorAll("textarea[id], input[id]").forEach(function (t) {
      if (t.type === "checkbox") ticked[t.id] = t.checked; else typed[t.id] = t.value;
    });
    var active = document.activeElement;
    return { open: open, typed: typed, ticked: ticked, focus: active && main.contains(active) ? active.id : null };
  }

  function restore(kept) {
    Object.keys(kept.open).forEach(function (id) {
      var d = document.getElementById(id);
      if (d && d.tagName === "DETAILS") d.open = kept.open[id];
    });
    Object.keys(kept.typed).forEach(function (id) {
      var t = document.getElementById(id);
      if (t && t.type !== "hidden" && kept.typed[id]) t.value = kept.typed[id];
    });
    Object.keys(kept.ticked).forEach(function (id) {
      var t = document.getElementById(id);
      if (t && t.type === "checkbox") t.checked = kept.ticked[id];
    });
    if (kept.focus) {
      var f = document.getElementById(kept.focus);
      if (f) f.focus({ preventScroll: true });
    }
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { accept: "text/html" } })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        if (!fresh) return;
        var kept = keep();
        main.innerHTML = fresh.innerHTML;
        restore(kept);
        document.title = doc.title;
        main.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () { /* the page stays as it was; the next change tries again */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var stream = new EventSource(src);
  stream.addEventListener("change", refresh);
  stream.addEventListener("end", function () { stream.close(); });  /* the run ended: nothing more to follow */
  window.addEventListener("pagehide", function () { stream.close(); });
})();
