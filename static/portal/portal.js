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

// What was typed into a form survives a send that did not arrive: the session had ended (the
// portal sends the person to sign in and back to this page: portal/htmx.py) or the page's CSRF
// token was stale (portal.views.csrf_failure). Each form sent is kept in this tab's
// sessionStorage until the answer shows it arrived; a page that says it did not (the login page,
// the CSRF page: [data-keeps-draft]) or an htmx answer with X-Portal-Keep-Draft keeps it, and the
// form's own page fills it back in once, with a note, without sending it. Nothing typed goes to
// the server until the person sends it again; passwords, files and hidden fields are never kept.
(function () {
  var KEY = "portal-draft";
  var SKIPPED = ["hidden", "password", "file", "submit", "button", "reset", "image"];

  function here() { return location.pathname + location.search; }
  function formKey(form) {
    if (form.id) { return "#" + form.id; }
    var action = form.getAttribute("action") || form.getAttribute("hx-post") || location.href;
    return new URL(action, location.href).pathname;
  }
  function read() {
    try { return JSON.parse(sessionStorage.getItem(KEY) || "null"); } catch (error) { return null; }
  }
  function write(draft) {
    try {
      if (draft) { sessionStorage.setItem(KEY, JSON.stringify(draft)); } else { sessionStorage.removeItem(KEY); }
    } catch (error) { /* storage full or refused: the form is sent all the same */ }
  }
  function fields(form) {
    var kept = [];
    Array.prototype.forEach.call(form.elements, function (element) {
      if (!element.name || element.disabled || SKIPPED.indexOf(element.type) !== -1) { return; }
      if (element.type === "checkbox" || element.type === "radio") {
        if (element.checked) { kept.push([element.name, element.value]); }
      } else if (element.type === "select-multiple") {
        Array.prototype.forEach.call(element.selectedOptions, function (option) { kept.push([element.name, option.value]); });
      } else {
        kept.push([element.name, element.value]);
      }
    });
    return kept;
  }
  function keep(form) {
    if (!form || form.querySelector("input[type=password]")) { return; }
    var kept = fields(form);
    if (kept.length) { write({page: here(), form: formKey(form), fields: kept, stopped: false}); }
  }
  function fill(form, kept) {
    var values = {};
    kept.forEach(function (pair) { (values[pair[0]] = values[pair[0]] || []).push(pair[1]); });
    var seen = {};
    Array.prototype.forEach.call(form.elements, function (element) {
      var wanted = values[element.name];
      if (!wanted || element.disabled || SKIPPED.indexOf(element.type) !== -1) { return; }
      if (element.type === "checkbox" || element.type === "radio") {
        element.checked = wanted.indexOf(element.value) !== -1;
      } else if (element.type === "select-multiple") {
        Array.prototype.forEach.call(element.options, function (option) { option.selected = wanted.indexOf(option.value) !== -1; });
      } else {
        // Names a form repeats (a quota request's lines) take their values in order.
        var index = seen[element.name] || 0;
        seen[element.name] = index + 1;
        if (index < wanted.length) { element.value = wanted[index]; }
      }
    });
  }

  document.addEventListener("submit", function (event) {
    if ((event.target.method || "").toLowerCase() === "post") { keep(event.target); }
  }, true);
  document.body.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb === "get") { return; }
    var element = event.detail.elt;
    keep(element.tagName === "FORM" ? element : element.form || element.closest("form"));
  });
  // A form to send holding something typed that its page did not come with: what a background request
  // (the launch hint, a list's refresh) that finds the session ended must not throw away.
  function edited(form) {
    if ((form.method || "").toLowerCase() !== "post") { return false; }  // a filter is not a draft
    return Array.prototype.some.call(form.elements, function (element) {
      if (!element.name || element.disabled || SKIPPED.indexOf(element.type) !== -1) { return false; }
      if (element.type === "checkbox" || element.type === "radio") { return element.checked !== element.defaultChecked; }
      if (element.options) {
        return Array.prototype.some.call(element.options, function (option) { return option.selected !== option.defaultSelected; });
      }
      return element.value !== element.defaultValue;
    });
  }
  document.body.addEventListener("htmx:beforeOnLoad", function (event) {
    var leaving = event.detail.xhr.getResponseHeader("X-Portal-Keep-Draft");
    if (event.detail.requestConfig.verb === "get") {
      // Nothing was sent, but the answer leads to the login page: the form being typed into
      // comes back filled in after sign-in, as one that was sent would.
      var typed = leaving && !read() && Array.prototype.find.call(document.forms, edited);
      if (typed) { keep(typed); }
      var kept = typed && read();  // keep() passes over a form with a password in it
      if (kept) { kept.stopped = true; write(kept); }
      return;
    }
    var draft = read();
    if (!draft) { return; }
    if (leaving) {
      draft.stopped = true;
      write(draft);
    } else {
      write(null);  // it arrived
    }
  });

  var draft = read();
  if (!draft) { return; }
  if (document.querySelector("[data-keeps-draft]")) {
    draft.stopped = true;
    write(draft);
    var note = document.querySelector("[data-draft-note]");
    if (note) { note.hidden = false; }
    return;
  }
  write(null);  // a plain form's answer: it arrived, or a page that did not take it back
  if (!draft.stopped || draft.page !== here()) { return; }
  var form = Array.prototype.find.call(document.forms, function (candidate) { return formKey(candidate) === draft.form; });
  if (!form) { return; }
  fill(form, draft.fields);
  var message = document.createElement("div");
  message.className = "flash warning";
  message.setAttribute("role", "status");
  message.setAttribute("data-testid", "draft-restored");
  message.textContent = "This form was not sent. What you typed is back in it: check it and send it again.";
  form.parentNode.insertBefore(message, form);
})();

// A form that asks each kind for different things (a team credential's) shows the chosen kind's
// inputs only: each <fieldset data-for-kind> beside its form's <select data-kind-select>. The
// others are disabled too, so what was typed into them is not sent. Without scripts all show.
(function () {
  function show(select) {
    select.form.querySelectorAll("fieldset[data-for-kind]").forEach(function (set) {
      var other = set.getAttribute("data-for-kind") !== select.value;
      set.hidden = other;
      set.disabled = other;
    });
  }
  function showAll() { document.querySelectorAll("select[data-kind-select]").forEach(show); }
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("select[data-kind-select]")) { show(event.target); }
  });
  document.addEventListener("DOMContentLoaded", showAll);
  document.addEventListener("htmx:afterSettle", showAll);
})();
