// The recipe editor, progressively enhanced: as the text is typed (debounced), post it as the
// form would with `op=preview` and put the server's card panel beside it. Without scripts the
// "Compile / preview" button does the same with a page load. Answers that arrive out of order
// are dropped: only the newest text's card is shown.
(function () {
  "use strict";
  var form = document.querySelector('form[data-live-preview="on"]');
  if (!form) return;
  var area = form.querySelector('textarea[name="text"]');
  var panel = document.getElementById("preview");
  if (!area || !panel) return;
  var timer = null;
  var sent = 0;
  var shown = 0;

  function send() {
    var n = ++sent;
    var body = new URLSearchParams(new FormData(form));
    body.set("op", "preview");
    panel.setAttribute("aria-busy", "true");
    fetch(form.getAttribute("action"), {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-Preview": "fragment" },
    })
      .then(function (response) {
        if (!response.ok) throw new Error("preview answered " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (n < shown) return;
        shown = n;
        panel.innerHTML = html;
        panel.dataset.shown = String(n);
        if (n === sent) panel.removeAttribute("aria-busy");
      })
      .catch(function () {
        if (n === sent) panel.removeAttribute("aria-busy");
      });
  }

  area.addEventListener("input", function () {
    window.clearTimeout(timer);
    timer = window.setTimeout(send, 250);
  });
})();
