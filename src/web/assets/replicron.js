// replicron's dashboard: keeps a page's live parts fresh without reloading
// the page. Every element with a data-live id is fetched again every
// data-refresh seconds (set on <main>) and replaced by its new version,
// unless the reader is using it: focus inside it, or a form in it that has
// been typed into. Updates stop while the tab is hidden, and the reader
// can pause them. Without this script the pages work the same; they are
// reloaded by hand.
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  if (!main || !window.fetch || !window.DOMParser) {
    return;
  }
  var seconds = Math.max(1, parseInt(main.getAttribute("data-refresh"), 10) || 5);
  var paused = false;
  var inFlight = false;
  var dirty = new WeakSet();
  var status = document.getElementById("updates");
  var button = null;

  document.addEventListener("input", function (event) {
    var form = event.target && event.target.form;
    if (form) {
      dirty.add(form);
    }
  });

  function busy(element) {
    if (element.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    var forms = element.querySelectorAll("form");
    for (var i = 0; i < forms.length; i++) {
      if (dirty.has(forms[i])) {
        return true;
      }
    }
    return false;
  }

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function refresh() {
    // One fetch at a time, each given until the next tick: a slow page
    // neither stacks requests nor lets an older answer replace a newer one.
    if (paused || document.hidden || inFlight) {
      return;
    }
    inFlight = true;
    var abort = window.AbortController ? new AbortController() : null;
    var timer = abort && window.setTimeout(function () { abort.abort(); }, seconds * 1000);
    fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
      signal: abort ? abort.signal : undefined
    })
      .then(function (response) {
        if (!response.ok || response.redirected) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        var parts = document.querySelectorAll("[data-live]");
        for (var i = 0; i < parts.length; i++) {
          var old = parts[i];
          var next = old.id && fresh.getElementById(old.id);
          if (!next) {
            // Another page now (the database is back, say): load it whole.
            window.location.reload();
            return;
          }
          if (!busy(old) && next.innerHTML !== old.innerHTML) {
            old.replaceWith(document.importNode(next, true));
          }
        }
        say("Updated " + new Date().toLocaleTimeString() + ", every " + seconds + " s.");
      })
      .catch(function (error) {
        say("Not updated (" + error.message + "); trying again in " + seconds + " s.");
      })
      .then(function () {
        inFlight = false;
        if (timer) {
          window.clearTimeout(timer);
        }
      });
  }

  if (status) {
    button = document.createElement("button");
    button.type = "button";
    button.className = "updates-toggle";
    button.textContent = "Pause updates";
    button.setAttribute("aria-pressed", "false");
    button.addEventListener("click", function () {
      paused = !paused;
      button.textContent = paused ? "Resume updates" : "Pause updates";
      button.setAttribute("aria-pressed", paused ? "true" : "false");
      say(paused ? "Updates paused." : "Updates every " + seconds + " s.");
      if (!paused) {
        refresh();
      }
    });
    status.parentNode.insertBefore(button, status.nextSibling);
    say("Updates every " + seconds + " s.");
    var reload = document.getElementById("reload");
    if (reload) {
      reload.hidden = true;
    }
  }
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
  window.setInterval(refresh, seconds * 1000);
})();
