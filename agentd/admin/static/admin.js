// agentd admin: small progressive enhancements; every page works without this file.
(function () {
  "use strict";

  document.addEventListener("click", function (ev) {
    var t = ev.target.closest("[data-toggle]");
    if (!t) return;
    var el = document.getElementById(t.getAttribute("data-toggle"));
    if (el) { el.hidden = !el.hidden; var f = el.querySelector("textarea, input:not([type=hidden])"); if (f && !el.hidden) f.focus(); }
  });

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var msg = form.getAttribute && form.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  // --- the loop page: live turns over SSE --------------------------------------------------
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var loopId = live.getAttribute("data-loop");
  var tab = live.getAttribute("data-tab") || "transcript";
  var note = document.getElementById("live-note");
  var busy = false, again = false;

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var stick = nearBottom();
    fetch("/admin/loops/" + loopId + "/live?tab=" + encodeURIComponent(tab), {
      credentials: "same-origin", headers: { "Accept": "text/html" }
    }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var open = {};
      live.querySelectorAll("details[open]").forEach(function (d, i) {
        var art = d.closest("[id]"); open[(art ? art.id : "") + ":" + i] = true;
      });
      var typing = document.activeElement && live.contains(document.activeElement) &&
        document.activeElement.tagName === "INPUT" && document.activeElement.value;
      if (typing) { again = true; return; }  // do not wipe a half-typed denial reason
      // The page carries each streaming answer's partial as the server last saved it; deltas
      // that arrived while this fetch was in flight are newer than it, so keep them.
      var streamed = {};
      live.querySelectorAll("[data-live-message]").forEach(function (art) {
        var t = art.querySelector(".live-text");
        if (t) streamed[art.getAttribute("data-live-message")] = t.textContent;
      });
      live.innerHTML = html;
      live.querySelectorAll("[data-live-message]").forEach(function (art) {
        var t = art.querySelector(".live-text"), seen = streamed[art.getAttribute("data-live-message")];
        if (t && seen) t.textContent = joined(t.textContent, seen);
      });
      live.querySelectorAll("details").forEach(function (d, i) {
        var art = d.closest("[id]"); if (open[(art ? art.id : "") + ":" + i]) d.open = true;
      });
      live.setAttribute("data-refreshed", String(Date.now()));
      if (stick) window.scrollTo(0, document.body.scrollHeight);
    }).catch(function () { /* the next event retries */ }).finally(function () {
      busy = false;
      if (again) { again = false; setTimeout(refresh, 250); }
    });
  }

  // `saved` (the server's partial) and `seen` (what the deltas showed here) are two views of
  // one growing text: `seen` may extend `saved`, overlap its end, or follow it.
  function joined(saved, seen) {
    if (seen.indexOf(saved) === 0) return seen;
    if (saved.indexOf(seen) === 0) return saved;
    for (var k = Math.min(saved.length, seen.length); k > 0; k--) {
      if (saved.slice(saved.length - k) === seen.slice(0, k)) return saved + seen.slice(k);
    }
    return saved + seen;
  }

  function liveBubble(id) {
    var el = live.querySelector('[data-live-message="' + id + '"] .live-text');
    if (el) return el;
    var box = document.getElementById("transcript");
    if (!box) return null;
    var art = document.createElement("article");
    art.className = "msg msg-assistant msg-live";
    art.setAttribute("data-live-message", id);
    art.innerHTML = '<header class="msg-head"><span class="role-tag">assistant</span>' +
      '<span class="pill pill-live">● streaming</span></header><div class="pre content live-text"></div>';
    var working = box.querySelector(".working");
    box.insertBefore(art, working);
    return art.querySelector(".live-text");
  }

  var es = new EventSource("/admin/loops/" + loopId + "/stream");
  var deltas = 0;
  es.addEventListener("delta", function (ev) {
    var d = JSON.parse(ev.data);
    live.setAttribute("data-deltas", String(++deltas));
    var el = liveBubble(d.message_id);
    if (!el) return;
    var stick = nearBottom();
    // `offset` counts code points before this delta: place it there, so text the page
    // already holds (a saved partial, an earlier delta) is never shown twice.
    var have = Array.from(el.textContent);
    if (typeof d.offset === "number" && d.offset <= have.length) {
      el.textContent = have.slice(0, d.offset).join("") + (d.delta || "");
    } else {
      el.appendChild(document.createTextNode(d.delta || ""));
    }
    if (stick) window.scrollTo(0, document.body.scrollHeight);
  });
  es.addEventListener("refresh", refresh);
  es.onopen = function () {
    if (note) { note.hidden = false; note.textContent = "● live"; note.className = "live-note on"; }
  };
  es.onerror = function () {
    if (note) { note.hidden = false; note.textContent = "reconnecting…"; note.className = "live-note off"; }
  };
  window.addEventListener("pagehide", function () { es.close(); });
})();
