// The portal's only script of its own. It lives here, not inline in a template, because the
// Content-Security-Policy runs scripts from the portal's static files only. Listeners sit on the
// document, so they also serve content htmx swaps in later.
"use strict";

// Request quota: "+ Add another flavor" shows the next hidden line and hides itself after the last.
document.addEventListener("click", function (event) {
  var button = event.target.closest("#add-line");
  if (!button) { return; }
  var next = document.querySelector(".lines .line[hidden]");
  if (next) { next.hidden = false; next.querySelector("select").focus(); }
  if (!document.querySelector(".lines .line[hidden]")) { button.hidden = true; }
});

// Request quota: another team means other numbers, so every filled-in line asks for its preview again.
document.addEventListener("change", function (event) {
  if (event.target.id !== "id_team") { return; }
  document.querySelectorAll(".lines .line:not([hidden]) input[name=units]").forEach(function (input) {
    if (input.value) { htmx.trigger(input, "refresh"); }
  });
});

// Narrow screens: the Menu button folds the navigation open and shut.
document.addEventListener("click", function (event) {
  var toggle = event.target.closest(".nav-toggle");
  if (!toggle) { return; }
  var nav = document.getElementById(toggle.getAttribute("aria-controls"));
  var open = toggle.getAttribute("aria-expanded") !== "true";
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
  nav.classList.toggle("open", open);
});

// "Copy" next to a secret shown once (a new API token): puts the text of its target on the clipboard.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button) { return; }
  var source = document.getElementById(button.getAttribute("data-copy"));
  navigator.clipboard.writeText(source.textContent.trim()).then(function () {
    button.textContent = "Copied";
  }, function () {
    button.textContent = "Select and copy by hand";
  });
});

// "3 minutes ago" stays true on a page left open: every half minute each <time data-ago> is
// reworded from its datetime (the server wrote the first words; portal_time.ago).
(function () {
  var units = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]];
  function words(seconds) {
    if (seconds < 60) { return "just now"; }
    for (var i = 0; i < units.length; i++) {
      var n = Math.floor(seconds / units[i][1]);
      if (n >= 1) { return n + "\u00a0" + units[i][0] + (n === 1 ? "" : "s") + " ago"; }
    }
    return "just now";
  }
  function reword() {
    document.querySelectorAll("time[data-ago]").forEach(function (element) {
      var at = Date.parse(element.getAttribute("datetime"));
      if (!isNaN(at)) { element.textContent = words((Date.now() - at) / 1000); }
    });
  }
  setInterval(reword, 30000);
})();
