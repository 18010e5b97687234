/* jobq dashboard: refreshes the main content every few seconds, and asks before a
   destructive action. Plain JavaScript, no framework; served as a file because the
   Content-Security-Policy allows no inline script. */
(function () {
  "use strict";

  var main = document.getElementById("main");
  var seconds = Number(document.body.getAttribute("data-refresh") || 0);
  var toggle = document.getElementById("refresh-toggle");
  var paused = false;
  var inFlight = false;

  try {
    paused = window.sessionStorage.getItem("jobq-refresh") === "off";
  } catch (error) {
    paused = false;
  }

  /* Whether a refresh now would get in someone's way: typing in a field, selecting text,
     the page hidden, or refreshing switched off. */
  function held() {
    if (paused || document.hidden) {
      return true;
    }
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {
      return true;
    }
    /* Tasks ticked for a bulk action: a refresh would untick them. */
    if (main.querySelector("input[type=checkbox]:checked")) {
      return true;
    }
    var selection = window.getSelection ? String(window.getSelection()) : "";
    return selection.length > 0;
  }

  function refresh() {
    if (inFlight || held()) {
      return;
    }
    inFlight = true;
    window.fetch(window.location.href, {
      headers: { "X-Jobq-Fragment": "1", "Accept": "text/html" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      if (response.status === 401) {
        window.location.reload(); /* signed out: the full page goes to the sign-in form */
        return null;
      }
      document.body.classList.toggle("stale", !response.ok);
      return response.ok ? response.text() : null;
    }).then(function (html) {
      if (typeof html === "string" && !held()) {
        main.innerHTML = html;
      }
    }).catch(function () {
      document.body.classList.add("stale"); /* the server is away: tried again next tick */
    }).then(function () {
      inFlight = false;
    });
  }

  function showToggle() {
    toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
    toggle.setAttribute("aria-pressed", paused ? "true" : "false");
  }

  if (seconds > 0 && main) {
    window.setInterval(refresh, seconds * 1000);
    if (toggle) {
      toggle.hidden = false;
      showToggle();
      toggle.addEventListener("click", function () {
        paused = !paused;
        try {
          window.sessionStorage.setItem("jobq-refresh", paused ? "off" : "on");
        } catch (error) {
          /* private mode: the choice lasts for this page only */
        }
        showToggle();
      });
    }
  }

  /* A destructive action's form names its question in data-confirm: asked here, and the
     form says confirm=yes only when answered so. (Without this script, the server asks
     on a page of its own.) */
  document.addEventListener("submit", function (event) {
    var form = event.target;
    /* A form of several buttons (the task list's bulk actions) asks on the one pressed. */
    var button = event.submitter;
    var question = (button && button.getAttribute("data-confirm")) ||
      (form.getAttribute && form.getAttribute("data-confirm"));
    if (!question) {
      return;
    }
    if (!window.confirm(question)) {
      event.preventDefault();
      return;
    }
    var field = form.querySelector("input[name=confirm]");
    if (field) {
      field.value = "yes";
    }
  });
})();
