// horae console: the only script of the pages (the CSP allows no other). Two jobs:
// ask before an action form is sent (data-confirm), and refresh a live part
// (data-refresh: its URL, data-every: milliseconds) while the tab is visible.
//
// A live part's answer is either its new content, or the part itself (an element with the
// part's id): then it replaces the part whole, and the refresh goes on only while the new part
// still carries data-refresh (a job page drops it once the job has ended). Refreshing pauses
// while the tab is hidden (and catches up when it is shown again), stops when the page is left,
// and waits while a field of the part is being edited; the part carries data-paused while the tab
// is hidden (its indicator says so). What was open, scrolled or focused in
// the part stays so.
//
// Screen readers hear the updates through the page's live region (#live-announce: role=status,
// aria-live=polite, outside the refreshed part): the part's data-announce (its key counts, or a
// job's state) when it differs from the last one, and when the updates pause, fail, resume or end;
// never the same words at every refresh.
"use strict";

document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

var FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
var live = [];  // one {id, timer, request, delay, said, state} per live part

// The summary a part carries for screen readers ("" when it has none).
function summary(part) {
  var holder = part.hasAttribute("data-announce") ? part : part.querySelector("[data-announce]");
  return holder ? holder.getAttribute("data-announce") || "" : "";
}

// Tell the live region `text` (a polite announcement); the same text twice is not said again.
function say(text) {
  var region = document.getElementById("live-announce");
  if (region && text && region.textContent !== text) { region.textContent = text; }
}

// The part's updates went from entry.state to `state` ("live", "paused", "stale", "ended"):
// announce the change (with the summary when it changed too).
function moved(entry, state, text) {
  var was = entry.state;
  entry.state = state;
  if (state === "live") {
    var changed = text !== entry.said;
    entry.said = text;
    if (was !== "live") { say("Live updates resumed. " + text); }
    else if (changed) { say(text); }
  } else if (state === "ended") {
    entry.said = text;
    say(text + ". Live updates ended.");
  } else if (was !== state) {
    say(text);
  }
}
var leaving = false;

function editing(part) {
  var fields = part.querySelectorAll("input, select, textarea");
  for (var i = 0; i < fields.length; i++) {
    var f = fields[i];
    if (f.type === "hidden") { continue; }
    if (f === document.activeElement || f.value !== f.defaultValue) { return true; }
  }
  return false;
}

// What the reader has open, scrolled or focused in `part`, to keep across a swap (matched by
// position: the new part has the same structure).
function remember(part) {
  var kept = { open: [], scrolled: [], focus: -1 };
  part.querySelectorAll("details").forEach(function (d, i) { if (d.open) { kept.open.push(i); } });
  part.querySelectorAll("pre, .scroll").forEach(function (box, i) {
    if (box.scrollTop || box.scrollLeft) { kept.scrolled.push([i, box.scrollTop, box.scrollLeft]); }
  });
  var focusables = Array.prototype.slice.call(part.querySelectorAll(FOCUSABLE));
  kept.focus = focusables.indexOf(document.activeElement);
  return kept;
}

function restore(part, kept) {
  var details = part.querySelectorAll("details");
  kept.open.forEach(function (i) { if (details[i]) { details[i].open = true; } });
  var boxes = part.querySelectorAll("pre, .scroll");
  kept.scrolled.forEach(function (s) {
    if (boxes[s[0]]) { boxes[s[0]].scrollTop = s[1]; boxes[s[0]].scrollLeft = s[2]; }
  });
  if (kept.focus >= 0) {
    var again = part.querySelectorAll(FOCUSABLE)[kept.focus];
    if (again) { again.focus({ preventScroll: true }); }
  }
}

function swap(entry, part, html) {
  var holder = document.createElement("template");
  holder.innerHTML = html; // the server's own escaped fragment
  var root = holder.content.firstElementChild;
  var kept = remember(part);
  if (part.id && root && root.id === part.id && holder.content.children.length === 1) {
    part.replaceWith(root);  // the part itself: its data-refresh says whether to go on
    part = root;
  } else {
    part.innerHTML = html;
  }
  part.removeAttribute("data-stale");
  restore(part, kept);
  return part;
}

function schedule(entry, delay) {
  window.clearTimeout(entry.timer);
  entry.timer = window.setTimeout(function () { tick(entry); }, delay);
}

function tick(entry) {
  entry.timer = null;
  var part = document.getElementById(entry.id);
  if (leaving || !part || !part.hasAttribute("data-refresh")) { return; }  // ended: no more
  if (document.visibilityState !== "visible") { return; }  // resumed by visibilitychange
  var every = parseInt(part.getAttribute("data-every") || "5000", 10);
  if (editing(part)) { schedule(entry, every); return; }
  var controller = window.AbortController ? new AbortController() : null;
  entry.request = controller;
  fetch(part.getAttribute("data-refresh"), {
    credentials: "same-origin",
    headers: { "Accept": "text/html" },
    signal: controller ? controller.signal : undefined,
  })
    .then(function (response) {
      if (!response.ok) {
        var gone = response.status === 404 || response.status === 401 || response.status === 403;
        throw { status: response.status, final: gone };
      }
      return response.text();
    })
    .then(function (html) {
      entry.request = null;
      var now = document.getElementById(entry.id);
      if (!now || leaving) { return; }
      if (editing(now)) { schedule(entry, every); return; }  // (began while the answer came)
      var swapped = swap(entry, now, html);
      entry.delay = 0;
      if (swapped.hasAttribute("data-refresh")) {
        moved(entry, document.visibilityState === "visible" ? "live" : entry.state, summary(swapped));
        schedule(entry, parseInt(swapped.getAttribute("data-every") || "5000", 10));
      } else {
        moved(entry, "ended", summary(swapped));
      }
    })
    .catch(function (problem) {
      entry.request = null;
      if (leaving || (problem && problem.name === "AbortError")) { return; }
      var now = document.getElementById(entry.id);
      if (!now) { return; }
      now.setAttribute("data-stale", "true");
      if (problem && problem.final) {  // gone, or no longer allowed: stop
        moved(entry, "stopped", "Live updates stopped: the console answered " + problem.status
          + "; reload the page.");
        return;
      }
      moved(entry, "stale", "Live updates failing: the console cannot be reached; retrying.");
      entry.delay = Math.min(Math.max(entry.delay * 2, every), 60000);  // back off while down
      schedule(entry, entry.delay);
    });
}

document.querySelectorAll("[data-refresh]").forEach(function (part, i) {
  if (!part.id) { part.id = "live-part-" + i; }
  var entry = { id: part.id, timer: null, request: null, delay: 0, said: summary(part),
                state: "live" };
  live.push(entry);
  schedule(entry, parseInt(part.getAttribute("data-every") || "5000", 10));
});

document.addEventListener("visibilitychange", function () {
  live.forEach(function (entry) {
    var part = document.getElementById(entry.id);
    if (part && part.hasAttribute("data-refresh")) {  // (console.css: [data-paused])
      if (document.visibilityState === "visible") { part.removeAttribute("data-paused"); }
      else {
        part.setAttribute("data-paused", "true");
        if (entry.state === "live") {
          moved(entry, "paused", "Live updates paused while the tab is hidden.");
        }
      }
    }
    if (document.visibilityState === "visible") {
      if (!entry.timer && !entry.request) { tick(entry); }  // catch up at once
    } else {
      window.clearTimeout(entry.timer);
      entry.timer = null;
    }
  });
});

// Leaving the page (closed, reloaded, navigated away): no timer left, no request in flight.
window.addEventListener("pagehide", function () {
  leaving = true;
  live.forEach(function (entry) {
    window.clearTimeout(entry.timer);
    entry.timer = null;
    if (entry.request) { entry.request.abort(); }
  });
});
// Back to a page kept in the back/forward cache: refresh again.
window.addEventListener("pageshow", function (event) {
  if (!event.persisted) { return; }
  leaving = false;
  live.forEach(function (entry) { if (!entry.timer && !entry.request) { tick(entry); } });
});
