// A running run's page: follows the run's output as it is written. The
// page shows the output so far (without this script, a reload shows
// more); this script appends what is printed since, from the run's
// stream of server-sent events (/runs/ID/output), and counts the time the
// run has been running. Output is only ever set as text, never as markup,
// and a bidirectional control (U+202E…) in it is shown as its code point,
// as the server-rendered part of the page shows it, instead of reversing
// what follows.
function bidiVisible(text) {
  "use strict";
  return text.replace(/[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g, function (c) {
    var hex = c.charCodeAt(0).toString(16).toUpperCase();
    return "\u27E8U+" + "0000".slice(hex.length) + hex + "\u27E9";
  });
}

(function () {
  "use strict";
  var out = document.getElementById("output");
  if (!out || !out.dataset.running) {
    return;
  }
  // Without a stream, the page does what it does without a script.
  function reloadSoon(seconds) {
    setTimeout(function () {
      window.location.reload();
    }, seconds * 1000);
  }
  if (!out.dataset.stream) {
    reloadSoon(5);
    return;
  }
  var end = document.getElementById("end");
  var truncated = document.getElementById("truncated");
  var elapsed = document.getElementById("elapsed");
  var total = Number(out.dataset.offset || 0);
  var shownFrom = Number(out.dataset.from || 0);
  var limit = Number(out.dataset.limit || 0);
  var encoder = typeof TextEncoder === "function" ? new TextEncoder() : null;

  var reloadLink = document.getElementById("live-reload");
  if (reloadLink) {
    reloadLink.hidden = true;
  }
  var state = document.createElement("p");
  state.className = "muted";
  state.id = "live-state";
  state.setAttribute("role", "status");
  out.parentNode.parentNode.insertBefore(state, out.parentNode);

  function say(text) {
    state.textContent = text;
  }

  function span(seconds) {
    if (seconds < 60) {
      return seconds + " s";
    }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    }
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  if (elapsed) {
    var base = Number(elapsed.dataset.seconds || 0);
    var loaded = Date.now();
    setInterval(function () {
      elapsed.textContent = span(base + Math.floor((Date.now() - loaded) / 1000));
    }, 1000);
  }

  function bytesOf(text) {
    return encoder ? encoder.encode(text).length : text.length;
  }

  function markTruncation() {
    if (truncated && shownFrom > 0) {
      truncated.textContent =
        "Showing the last " + (total - shownFrom) + " of " + total + " bytes. ";
    }
  }

  // Keeps the box near the run's output_limit, as the replica does: the
  // oldest pieces go while at least the limit's worth stays shown.
  function trim() {
    while (limit > 0 && total - shownFrom > limit && out.firstChild && out.firstChild !== end) {
      var first = out.firstChild;
      var after = first.replicronEnd !== undefined
        ? first.replicronEnd
        : shownFrom + bytesOf(first.textContent);
      if (total - after < limit) {
        break;
      }
      out.removeChild(first);
      shownFrom = after;
    }
    markTruncation();
  }

  function append(stream, spans, until) {
    var holder = document.createElement("span");
    if (stream === "err") {
      holder.className = "stderr";
      holder.title = "stderr";
    }
    spans.forEach(function (piece) {
      if (piece[1]) {
        var coloured = document.createElement("span");
        coloured.className = piece[1];
        coloured.textContent = bidiVisible(piece[0]);
        holder.appendChild(coloured);
      } else {
        holder.appendChild(document.createTextNode(bidiVisible(piece[0])));
      }
    });
    holder.replicronEnd = until;
    out.insertBefore(holder, end);
  }

  function gap(from, to) {
    var note = document.createElement("span");
    note.className = "gap";
    note.textContent = "\n[" + (to - from) + " bytes not shown: the page fell behind]\n";
    note.replicronEnd = to;
    out.insertBefore(note, end);
  }

  if (typeof EventSource !== "function") {
    reloadSoon(5);
    return;
  }
  var source = new EventSource(out.dataset.stream + "?from=" + total);
  say("Following the output as it is written.");
  source.addEventListener("start", function (e) {
    var start = JSON.parse(e.data);
    limit = start.limit || limit;
    if (start.from > total) {
      gap(total, start.from);
      total = start.from;
    }
  });
  function onPiece(e) {
    var until = Number(e.lastEventId || total);
    append(e.type, JSON.parse(e.data), until);
    total = Math.max(total, until);
    trim();
  }
  source.addEventListener("out", onPiece);
  source.addEventListener("err", onPiece);
  source.addEventListener("skip", function (e) {
    var skip = JSON.parse(e.data);
    gap(skip.from, skip.to);
    total = Math.max(total, skip.to);
    trim();
  });
  source.addEventListener("end", function () {
    source.close();
    say("The run has ended; reloading the page.");
    reloadSoon(1);
  });
  source.addEventListener("gone", function (e) {
    source.close();
    say("Live output is unavailable: " + JSON.parse(e.data) + ". Reloading every 5 s.");
    reloadSoon(5);
  });
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) {
      say("The output stream closed; reloading every 5 s.");
      reloadSoon(5);
    }
  });
})();
