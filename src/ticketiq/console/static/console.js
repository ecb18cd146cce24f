// The console's one script: live updates on top of pages that work without it. The run list refreshes
// from GET /v1/runs (the session's cookie authenticates it, reads only) and the counts; a run's page
// follows GET /v1/runs/{id}/events and re-reads itself from the server when something changed. Text from
// the server is only ever set as textContent or taken from our own escaped pages: never as markup.
"use strict";

(function () {
  var REFRESH_MS = 2000;
  var TONES = {
    succeeded: "ok", answered: "ok", ok: "ok", done: "ok", finished: "ok", approved: "ok",
    running: "live", queued: "idle", pending: "idle", waiting: "wait", held: "wait", in_doubt: "wait",
    failed: "bad", error: "bad", rejected: "bad", lost: "bad", interrupted: "bad", unknown: "bad",
    stopped: "off", cancelled: "off", withdrawn: "off"
  };
  var TERMINAL = ["succeeded", "failed", "interrupted", "stopped"];

  function tone(status) { return TONES[status] || "idle"; }

  function badge(status) {
    var span = document.createElement("span");
    span.className = "badge " + tone(status);
    span.dataset.status = status || "";
    span.textContent = status || "—";
    return span;
  }

  function clock(iso) {
    var t = document.createElement("time");
    t.setAttribute("datetime", iso || "");
    t.title = iso || "";
    if (!iso) { t.textContent = "—"; return t; }
    var d = new Date(iso);
    var pad = function (n, w) { return String(n).padStart(w || 2, "0"); };
    // The server's table shows UTC times as sent; the same here.
    t.textContent = d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + "." + pad(d.getUTCMilliseconds(), 3);
    return t;
  }

  function cell(content, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (content instanceof Node) { td.appendChild(content); } else { td.textContent = content; }
    return td;
  }

  function showLive() {
    var note = document.getElementById("live-note");
    if (note) { note.hidden = false; }
  }

  // ----- the run list -----------------------------------------------------------------------------------

  function waitingText(w) {
    if (!w) { return ""; }
    return w.kind + " " + (w.kind === "approval" ? (w.tool || "") : (w.question || "").slice(0, 60));
  }

  function runRow(r) {
    var tr = document.createElement("tr");
    tr.dataset.run = r.id;
    var link = document.createElement("a");
    link.href = "/console/runs/" + encodeURIComponent(r.id);
    link.className = "mono";
    link.textContent = r.id.slice(0, 8);
    tr.appendChild(cell(link));
    tr.appendChild(cell(badge(r.status), "st"));
    tr.appendChild(cell(r.agent));
    tr.appendChild(cell(r.channel));
    tr.appendChild(cell(r.created_by || "—"));
    tr.appendChild(cell(clock(r.created_at)));
    tr.appendChild(cell(clock(r.updated_at), "up"));
    tr.appendChild(cell(String(r.steps), "num steps"));
    tr.appendChild(cell(String(r.attempt), "num attempt"));
    tr.appendChild(cell(String(r.losses), "num losses"));
    tr.appendChild(cell(waitingText(r.waiting_for), "wf"));
    return tr;
  }

  function updateRow(tr, r) {
    var st = tr.querySelector("td.st");
    var shown = st && st.querySelector(".badge");
    if (shown && shown.dataset.status !== r.status) { st.replaceChildren(badge(r.status)); }
    var up = tr.querySelector("td.up");
    if (up) { up.replaceChildren(clock(r.updated_at)); }
    [["steps", r.steps], ["attempt", r.attempt], ["losses", r.losses]].forEach(function (pair) {
      var td = tr.querySelector("td." + pair[0]);
      if (td && td.textContent !== String(pair[1])) { td.textContent = String(pair[1]); }
    });
    var wf = tr.querySelector("td.wf");
    if (wf) { wf.textContent = waitingText(r.waiting_for); }
  }

  function refreshList(table) {
    var query = table.dataset.query || "";
    var body = table.tBodies[0];
    fetch("/v1/runs" + (query ? "?" + query : ""), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (res) { return res.ok ? res.json() : null; })
      .then(function (page) {
        if (!page) { return; }
        var first = !new URLSearchParams(location.search).get("cursor");
        var seen = {};
        page.runs.forEach(function (r) { seen[r.id] = r; });
        Array.prototype.forEach.call(body.querySelectorAll("tr[data-run]"), function (tr) {
          var r = seen[tr.dataset.run];
          if (r) { updateRow(tr, r); delete seen[tr.dataset.run]; }
        });
        if (first) {
          // Runs made since the page was read: newest first, above the others.
          var fresh = page.runs.filter(function (r) { return seen[r.id]; });
          var empty = body.querySelector("tr.empty");
          if (fresh.length && empty) { empty.remove(); }
          for (var i = fresh.length - 1; i >= 0; i--) { body.insertBefore(runRow(fresh[i]), body.firstChild); }
        }
        showLive();
      })
      .catch(function () { /* the next refresh tries again */ });
    fetch("/console/runs/counts", { credentials: "same-origin" })
      .then(function (res) { return res.ok ? res.json() : null; })
      .then(function (got) {
        if (!got) { return; }
        document.querySelectorAll("#counts .count[data-status]").forEach(function (a) {
          var b = a.querySelector("b");
          if (b) { b.textContent = String(got.counts[a.dataset.status] || 0); }
        });
      })
      .catch(function () {});
  }

  // ----- a run ----------------------------------------------------------------------------------------

  function reread(done) {
    fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html");
        ["run-status", "run-steps", "run-attempt", "run-losses", "outcome", "waterfall", "ledger", "recovery", "waiting"]
          .forEach(function (id) {
            var now = document.getElementById(id);
            var then = fresh.getElementById(id);
            if (!now || !then) { return; }
            // A form someone is filling in is left as it is.
            if (now.contains(document.activeElement) && document.activeElement !== document.body) { return; }
            now.replaceWith(document.adoptNode(then));
          });
        var run = fresh.getElementById("run");
        var here = document.getElementById("run");
        if (run && here) { here.dataset.status = run.dataset.status; here.dataset.terminal = run.dataset.terminal; }
        var stop = document.getElementById("stop");
        if (stop && run && run.dataset.terminal === "yes") { stop.closest("form").remove(); }
        showLive();
        if (done) { done(run ? run.dataset.terminal === "yes" : false); }
      })
      .catch(function () {});
  }

  function followRun(root) {
    if (root.dataset.terminal === "yes") { return; }
    var pending = null;
    var soon = function () {
      if (pending) { return; }
      pending = setTimeout(function () { pending = null; reread(); }, 250);
    };
    var poll = function () {
      reread(function (ended) { if (!ended) { setTimeout(poll, REFRESH_MS); } });
    };
    if (!window.EventSource) { setTimeout(poll, REFRESH_MS); return; }
    var source = new EventSource("/v1/runs/" + encodeURIComponent(root.dataset.run) + "/events");
    showLive();
    source.addEventListener("status", function (ev) {
      try {
        var data = JSON.parse(ev.data);
        var holder = document.getElementById("run-status");
        if (holder && data.status) { holder.replaceChildren(badge(data.status)); }
      } catch (e) { /* a malformed event changes nothing */ }
      soon();
    });
    source.addEventListener("step", soon);
    source.addEventListener("attempt", soon);
    source.addEventListener("end", function () { source.close(); reread(); });
    source.onerror = function () {
      // A stream that ended before its run (each lasts a few minutes) or was cut: the browser follows it on
      // by itself, sending the last event's id, and is told only what changed since. One it may not follow
      // (refused: signed out, too many streams): fall back to reading the page now and then.
      if (source.readyState === EventSource.CONNECTING) { return; }
      source.close();
      setTimeout(poll, REFRESH_MS);
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("runs");
    if (table) {
      setInterval(function () { if (!document.hidden) { refreshList(table); } }, REFRESH_MS);
    }
    var run = document.getElementById("run");
    if (run) { followRun(run); }
  });
})();
