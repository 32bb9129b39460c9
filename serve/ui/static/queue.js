// The label queue's keys, as in `triage label review --from-store` (serve/cli/label_review.py over serve/services/label_queue.py), plus u (undo):
// f failed, o ok, a agree with the diagnosis, k kind (then its key), s step, n skip, q quit, u undo.
// Labels go to /ui/api/labels/<trace>, which calls the same service method as POST /v1/traces/<id>/labels.
"use strict";
(function () {
  var csrf = document.body.getAttribute("data-csrf");
  var item = document.getElementById("queue-item");
  var statusEl = document.getElementById("queue-status");
  var pendingEl = document.getElementById("pending");
  var legend = document.getElementById("kindlegend");
  var stepAsk = document.getElementById("stepask");
  var stepInput = document.getElementById("step-input");
  var kinds = item ? JSON.parse(item.getAttribute("data-kinds")) : {};
  var agree = item ? JSON.parse(item.getAttribute("data-agree")) : null;
  var at = item ? parseInt(item.getAttribute("data-at"), 10) : 0;
  var order = "&order=" + encodeURIComponent(document.getElementById("queue-order").getAttribute("data-order"));
  var mode = "main", kind = null, step = null, busy = false;

  function say(msg) { statusEl.textContent = msg; }
  function showPending() {
    if (kind === null && step === null) { pendingEl.hidden = true; return; }
    pendingEl.hidden = false;
    pendingEl.textContent = "pending: failed, kind " + (kind || "-") + ", step " + (step === null ? "-" : step) + " ([f] saves it)";
  }
  function post(url, body) {
    busy = true;
    return fetch(url, { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf }, body: JSON.stringify(body || {}) })
      .then(function (r) {
        return r.json().then(function (j) { return { ok: r.ok, status: r.status, body: j }; });
      })
      .then(function (res) {
        busy = false;
        if (!res.ok) {
          var d = res.body && res.body.detail && res.body.detail[0];
          say("not saved: " + (d ? d.msg : res.status));
          return null;
        }
        return res.body;
      }, function (err) { busy = false; say("not saved: " + err); return null; });
  }
  function save(body) {
    if (!item) { return; }
    say("saving…");
    post("/ui/api/labels/" + encodeURIComponent(item.getAttribute("data-trace")), body).then(function (got) {
      if (got) { say("saved"); location.replace("/ui/queue?at=" + at + order); }
    });
  }
  function undo() {
    say("undoing your last label…");
    post("/ui/api/labels/undo", {}).then(function (got) {
      if (got) { say("withdrawn: " + got.trace_id); location.replace("/ui/queue?at=0" + order); }
    });
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || busy) { return; }
    if (mode === "step") {
      if (ev.key === "Enter") {
        var v = stepInput.value.trim();
        var n = parseInt(v, 10);
        var max = item ? parseInt(item.getAttribute("data-n-steps"), 10) - 1 : 0;
        if (v === "") { mode = "main"; stepAsk.hidden = true; }
        else if (!/^\d+$/.test(v) || n > max) { say("not a step: " + v + "; a number in 0.." + max); }
        else { step = n; mode = "main"; stepAsk.hidden = true; stepInput.blur(); showPending(); }
        ev.preventDefault();
      } else if (ev.key === "Escape") { mode = "main"; stepAsk.hidden = true; stepInput.blur(); }
      return;
    }
    var k = ev.key;
    if (mode === "kind") {
      ev.preventDefault();
      if (k === "Enter" || k === "Escape") { mode = "main"; legend.hidden = true; return; }
      if (kinds[k]) { kind = kinds[k]; mode = "main"; legend.hidden = true; showPending(); }
      else { say("not a kind key: " + k); }
      return;
    }
    if (k === "u") { ev.preventDefault(); undo(); return; }
    if (k === "q") { location.href = "/ui/overview"; return; }
    if (!item) { return; }
    if (k === "f") { ev.preventDefault(); save({ failed: true, kind: kind, step: step }); }
    else if (k === "o") { ev.preventDefault(); save({ failed: false }); }
    else if (k === "a") {
      ev.preventDefault();
      if (typeof agree === "string") { say(agree); } else { save(agree); }
    }
    else if (k === "k") { ev.preventDefault(); mode = "kind"; legend.hidden = false; }
    else if (k === "s") { ev.preventDefault(); mode = "step"; stepAsk.hidden = false; stepInput.value = ""; stepInput.focus(); }
    else if (k === "n") { ev.preventDefault(); location.href = "/ui/queue?at=" + (at + 1) + order; }
  });
})();
