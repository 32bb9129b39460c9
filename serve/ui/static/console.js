// agent-triage console: charts (the vendored uPlot) and small page helpers. No inline script:
// every page's data comes in data-* attributes (autoescaped JSON) or from its ?format=json twin.
"use strict";
(function () {
  var PALETTE = ["#c0392b", "#2457a6", "#1e824c", "#b07c12", "#7d5ba6", "#16a085", "#d35400", "#34495e",
    "#e84393", "#6c5ce7", "#00838f", "#8d6e63", "#9e9d24", "#5d4037", "#546e7a", "#ad1457", "#283593"];

  function width(el) { return Math.max(320, el.clientWidth || 800); }

  function stacked(el, d) {
    var kinds = Object.keys(d.kinds);
    var xs = d.days.map(function (day) { return Date.parse(day + "T00:00:00Z") / 1000; });
    var cum = xs.map(function () { return 0; });
    var layers = kinds.map(function (k) {
      cum = cum.map(function (c, i) { return c + d.kinds[k][i]; });
      return cum.slice();
    });
    // uPlot draws series in order: the tallest (cumulative) layer first, each lower one over it
    var series = [{}], data = [xs];
    for (var i = kinds.length - 1; i >= 0; i--) {
      var col = PALETTE[i % PALETTE.length];
      series.push({ label: kinds[i], stroke: col, fill: col, width: 0,
        paths: uPlot.paths.bars({ size: [0.8, 40] }), points: { show: false },
        value: (function (idx) { return function (u, v, s, j) { return j == null ? "" : d.kinds[kinds[idx]][j]; }; })(i) });
      data.push(layers[i]);
    }
    // the x axis spans the window's days, half a day either side, so that each day's bar sits on its
    // day (one day of data included) and never on the axis's edge
    // (UTC days, one tick a day or every few days, whatever the browser's time zone)
    var half = 43200, every = Math.ceil(xs.length / 12);
    function day(s) { var t = new Date(s * 1000); return (t.getUTCMonth() + 1) + "/" + t.getUTCDate(); }
    el.uplot = new uPlot({ width: width(el), height: 300, series: series, legend: { live: false },
      scales: { x: { time: false, range: function () { return [xs[0] - half, xs[xs.length - 1] + half]; } } },
      axes: [{ splits: function () { return xs.filter(function (x, i) { return (xs.length - 1 - i) % every === 0; }); },
               values: function (u, splits) { return splits.map(day); } },
             { label: "failed runs" }] }, data, el);
  }

  function stream(el, d) {
    var xs = d.seq, alarmSet = {}, seg = xs.map(function () { return null; });
    d.alarms.forEach(function (a) { alarmSet[a] = true; });
    (d.segments || []).forEach(function (s) {
      xs.forEach(function (x, i) { if (x >= s.start && x < s.end) { seg[i] = s.mean; } });
    });
    var alarms = xs.map(function (x, i) { return alarmSet[x] ? d.values[i] : null; });
    var cps = d.changepoints || [];
    new uPlot({
      // the page's own legend, below the chart, explains each mark (its names carry titles)
      width: width(el), height: 320, scales: { x: { time: false } }, legend: { show: false },
      series: [{ label: "observation" },
        { label: "value", stroke: "#2457a6", width: 1 },
        { label: "CUSUM alarm", stroke: "#c0392b", paths: function () { return null; }, points: { show: true, size: 9, fill: "#c0392b" } },
        { label: "segment mean", stroke: "#1e824c", width: 2 }],
      hooks: { draw: [function (u) {
        var ctx = u.ctx; ctx.save(); ctx.strokeStyle = "#7d5ba6"; ctx.lineWidth = 2; ctx.setLineDash([6, 4]);
        cps.forEach(function (c) {
          var x = Math.round(u.valToPos(c, "x", true));
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        });
        ctx.restore();
      }] }
    }, [xs, d.values, alarms, seg], el);
  }

  document.querySelectorAll(".chart[data-chart]").forEach(function (el) {
    var d = JSON.parse(el.getAttribute("data-chart"));
    if (typeof uPlot === "undefined") { el.textContent = "chart library not loaded"; return; }
    if (el.getAttribute("data-kind") === "stacked") { stacked(el, d); } else { stream(el, d); }
  });

  var pick = document.getElementById("stream-pick");
  if (pick) {
    pick.addEventListener("change", function () {
      var parts = pick.value.split("|");
      location.href = "/ui/streams?stream=" + encodeURIComponent(parts[0]) + "&agent=" + encodeURIComponent(parts.slice(1).join("|"));
    });
  }
  // auto-submit filter selects
  document.querySelectorAll("form.filters select").forEach(function (s) {
    if (s.id !== "stream-pick") { s.addEventListener("change", function () { s.form.submit(); }); }
  });
})();
