// tock dashboard: live updates (Server-Sent Events, polling as the fallback), bulk
// actions with progress, confirmations and charts. No inline scripts: the pages'
// Content-Security-Policy allows this file and the vendored uPlot only.
(function () {
  "use strict";

  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.content : "";
  }

  // Confirmation for dangerous buttons (data-confirm).
  document.addEventListener("click", function (e) {
    var b = e.target.closest("button[data-confirm]");
    if (b && !window.confirm(b.getAttribute("data-confirm"))) {
      e.preventDefault();
    }
  });

  // A job's or a workflow's actions without a reload: the form is posted with fetch, and the page's live
  // updates show what changed (a delete goes back to the search, as the server's redirect
  // says). Without this script the form posts and the page reloads. acting counts the
  // actions under way (and one whose redirect is being followed): the live stream does
  // not reload the page meanwhile, should it find the job or workflow gone (a delete).
  var acting = 0, reloadAfter = false;
  // reload loads the page again (its session ended, its job or workflow is gone, or it
  // is another session's), once no action is under way: then, if the action did not
  // lead elsewhere.
  function reload() {
    if (acting) { reloadAfter = true; return; }
    location.reload();
  }
  document.addEventListener("submit", function (e) {
    var form = e.target;
    // getAttribute: the form's controls named "id" and "action" shadow form.id and
    // form.action.
    var fid = form.getAttribute("id");
    if ((fid !== "job-actions" && fid !== "wf-actions") || !e.submitter || !window.fetch) return;
    e.preventDefault();
    var data = new FormData(form);
    data.append(e.submitter.name, e.submitter.value);
    var status = document.getElementById("action-status");
    if (!status) {
      status = document.createElement("p");
      status.id = "action-status";
      form.after(status);
    }
    status.textContent = e.submitter.value + "…";
    acting++;
    var settled = false;
    function settle() {
      if (settled) return;
      settled = true;
      if (--acting === 0 && reloadAfter) location.reload();
    }
    fetch(form.getAttribute("action"), { method: "POST", body: new URLSearchParams(data), credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) {
          settle();
          // The error page says why (the API's message).
          return r.text().then(function (html) {
            var m = new DOMParser().parseFromString(html, "text/html").getElementById("error-message");
            status.textContent = e.submitter.value + " failed: " + (m && m.textContent ? m.textContent : "HTTP " + r.status);
          });
        }
        if (new URL(r.url).pathname !== window.location.pathname) {
          window.location.assign(r.url);
          return;
        }
        settle();
        status.textContent = e.submitter.value + ": done";
      })
      .catch(function (err) { settle(); status.textContent = e.submitter.value + " failed: " + err.message; });
  });

  // Select all rows of a table.
  document.addEventListener("change", function (e) {
    if (!e.target.classList.contains("select-all")) return;
    var table = e.target.closest("table");
    table.querySelectorAll("input.select").forEach(function (c) { c.checked = e.target.checked; });
  });

  // Bulk actions: on the selected rows (one call), or on everything the filter matches
  // (one bounded call per page, following the cursor, with a progress bar).
  function postBulk(kind, request) {
    return fetch("/ui/actions/bulk", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify({ kind: kind, request: request })
    }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(r.status + ": " + ((body.error && body.error.message) || r.statusText));
        return body;
      });
    });
  }

  // After a bulk action the rows show what it did: the page's tables are read again (the
  // search pages have no live stream of their own).
  function refreshTables() {
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("main table[id]").forEach(function (t) {
          var fresh = doc.getElementById(t.getAttribute("id"));
          if (fresh) t.replaceWith(document.importNode(fresh, true));
        });
      });
  }

  function bulk(box, all) {
    var kind = box.getAttribute("data-kind");
    var action = box.querySelector(".bulk-action").value;
    var status = box.querySelector(".bulk-status");
    var bar = box.querySelector(".bulk-progress");
    var req = { action: action };
    if (all) {
      if (!window.confirm(action + " everything that matches the filter?")) return;
      req.filter = JSON.parse(box.getAttribute("data-filter") || "{}");
    } else {
      var ids = Array.prototype.map.call(document.querySelectorAll("input.select:checked"), function (c) { return c.value; });
      if (ids.length === 0) { status.textContent = "Select rows first."; return; }
      if (action === "delete" && !window.confirm("delete the " + ids.length + " selected? This cannot be undone.")) return;
      req.ids = ids;
    }
    var sum = { matched: 0, changed: 0, failed: 0, errors: [] };
    bar.hidden = false; bar.removeAttribute("value");
    box.setAttribute("data-busy", "1");
    function step() {
      return postBulk(kind, req).then(function (r) {
        sum.matched += r.matched; sum.changed += r.changed; sum.failed += r.failed;
        (r.errors || []).forEach(function (e) { if (sum.errors.length < 5) sum.errors.push(e.id + ": " + e.error.message); });
        var p = r.progress;
        if (p && p.total) { bar.max = p.total; bar.value = p.done; }
        status.textContent = (r.next_cursor ? "Working… " : "Done: ") + sum.matched + " matched, " + sum.changed + " changed, " + sum.failed + " failed" +
          (p ? " (searched " + p.done + " of " + p.total + ")" : "") + (sum.errors.length ? ". " + sum.errors.join("; ") : "");
        if (r.next_cursor && all) { req.cursor = r.next_cursor; return step(); }
        bar.max = 1; bar.value = 1;
        box.removeAttribute("data-busy");
        box.setAttribute("data-done", "1");
        refreshTables();
      });
    }
    step().catch(function (err) {
      status.textContent = "Failed: " + err.message;
      box.removeAttribute("data-busy");
      box.setAttribute("data-done", "1");
    });
  }

  document.addEventListener("click", function (e) {
    var b = e.target.closest(".bulk button");
    if (!b) return;
    var box = b.closest(".bulk");
    if (b.classList.contains("bulk-selected")) bulk(box, false);
    if (b.classList.contains("bulk-all")) bulk(box, true);
  });

  // Charts (overview): fires per second and lateness, per queue and minute.
  var charts = [];
  var palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  function drawCharts() {
    var el = document.getElementById("figures");
    if (!el || typeof uPlot === "undefined") return;
    var d = JSON.parse(el.getAttribute("data-figures") || "{}");
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    var mins = d.minutes || [];
    var series = d.series || [];
    function mk(id, sets) {
      var target = document.getElementById(id);
      if (!target) return;
      var opts = { width: Math.max(300, target.clientWidth || 600), height: 220, series: [{}], scales: { x: { time: true } }, axes: [{}, {}] };
      var data = [mins];
      sets.forEach(function (s, i) {
        opts.series.push({ label: s.label, stroke: palette[i % palette.length], width: 1.5, dash: s.dash, spanGaps: false });
        data.push(s.values);
      });
      charts.push(new uPlot(opts, data, target));
    }
    mk("chart-fires", series.map(function (s) { return { label: s.queue, values: s.fires }; }));
    var lat = [];
    series.forEach(function (s) {
      lat.push({ label: s.queue + " p50", values: s.p50 });
      lat.push({ label: s.queue + " p99", values: s.p99, dash: [5, 5] });
    });
    mk("chart-lateness", lat);
  }

  // Live updates: one event stream per page, closed while the tab is hidden; polling
  // every 5 s when streams fail. version is that of what the page shows (the server's
  // hash of what it read for it): the server sends nothing until the page's version
  // changes, and then what changed.
  // url is the stream's, as the server wrote it: the page's URL (page) and the tag of
  // the session it was rendered for (as), whose stream, opened by another session (this
  // tab was hidden while it logged out and in again), has the page reloaded.
  var url = document.body.getAttribute("data-live");
  if (url && url.indexOf("/ui/events?") !== 0) url = null;
  var version = document.body.getAttribute("data-live-version") || "";
  var es = null, poll = null, failures = 0, updates = 0;
  var light = document.getElementById("live-status");
  function setStatus(s) { if (light) { light.textContent = s; light.setAttribute("data-state", s); } }
  // byNode indexes the elements sel finds by their data-node.
  function byNode(sel) {
    var m = new Map();
    document.querySelectorAll(sel).forEach(function (e) { m.set(e.getAttribute("data-node"), e); });
    return m;
  }
  // patchNodes puts a workflow's changed nodes in place of theirs: the table's row and
  // the drawing's node. False when the page has no such node: it is out of step.
  function patchNodes(nodes) {
    var rows = byNode("#wf-nodes tr[data-node]"), drawn = byNode("#wf-graph .node[data-node]");
    for (var i = 0; i < nodes.length; i++) {
      var n = nodes[i], row = rows.get(n.id), g = drawn.get(n.id);
      if (!row || (n.drawn && !g)) return false;
      row.outerHTML = n.row;
      if (n.drawn) g.outerHTML = n.drawn; // parsed in the SVG: its parent's namespace
    }
    return true;
  }
  function apply(json) {
    var u = JSON.parse(json);
    var frags = u.fragments || {};
    // An action's status sits after its form, in a fragment: it is kept across the
    // fragment's update, which would drop what the action said.
    var status = document.getElementById("action-status");
    Object.keys(frags).forEach(function (k) {
      var el = document.querySelector('[data-fragment="' + k + '"]');
      if (el) el.innerHTML = frags[k];
    });
    if (status && !status.isConnected) {
      var form = document.getElementById("job-actions") || document.getElementById("wf-actions");
      if (form) form.after(status);
    }
    if (u.nodes && !patchNodes(u.nodes)) {
      // Out of step: the whole of the page's live parts, from a stream opened afresh.
      version = "";
      if (es) { close(); open(); }
      return;
    }
    version = u.version || "";
    updates++;
    document.body.setAttribute("data-updates", String(updates));
    drawCharts();
  }
  // startPolling polls 5 s after the last poll's answer came (or failed), never while
  // one is under way: answers slower than that (a large page on a slow link) would
  // pile up, and an older one would put the page back to an older state.
  function startPolling() {
    if (poll) return;
    setStatus("polling");
    poll = true;
    function later() { setTimeout(once, 5000); }
    function once() {
      if (document.hidden) { later(); return; }
      fetch(url + "&once=1&since=" + encodeURIComponent(version), { credentials: "same-origin", headers: { "Accept": "application/json" } })
        // 401: the session ended; 404: the page's job or workflow is gone; 205: the page
        // is another session's. The page, loaded again, says so or is this session's.
        .then(function (r) { if (r.status === 401 || r.status === 404 || r.status === 205) { reload(); } return r.status === 200 ? r.text() : null; })
        .then(function (t) { if (t) apply(t); })
        .catch(function () {})
        .then(later);
    }
    later();
  }
  function open() {
    if (!url || es || poll) return;
    if (typeof EventSource === "undefined") { startPolling(); return; }
    // A stream the browser opens again by itself sends the last update's id (its
    // version) as Last-Event-ID, which the server prefers to since.
    es = new EventSource(url + "&since=" + encodeURIComponent(version));
    es.addEventListener("open", function () { failures = 0; setStatus("live"); });
    es.addEventListener("update", function (e) { apply(e.data); });
    // The session ended, the page is another session's, or its job or workflow is gone:
    // the page, loaded again, says so or is this session's.
    es.addEventListener("ended", function () { close(); reload(); });
    es.addEventListener("error", function () {
      if (++failures >= 3 || es.readyState === EventSource.CLOSED) { close(); startPolling(); }
    });
  }
  function close() { if (es) { es.close(); es = null; setStatus("paused"); } }
  if (url) {
    document.addEventListener("visibilitychange", function () { if (document.hidden) close(); else open(); });
    if (!document.hidden) open();
  }
  window.addEventListener("load", drawCharts);
})();
