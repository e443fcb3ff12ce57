// Draws every chart of a page with uPlot (vendored). A chart is an element
//   <div class="chart" data-chart-src="ID"></div>
// and its data a JSON block (not executed, so the page's CSP allows it):
//   <script type="application/json" id="ID">
//     {"x": [unix seconds, ...], "y_label": "USD/h",
//      "series": [{"label": "spot us-east-1a", "values": [number or null, ...], "step": true}]}
//   </script>
// Once drawn, the element gets data-drawn-points="N" (points with a value, all series).
(function () {
  "use strict";
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563",
                "#db2777"];

  function draw(el) {
    var block = document.getElementById(el.getAttribute("data-chart-src"));
    if (!block) { return; }
    var spec;
    try { spec = JSON.parse(block.textContent); } catch (e) { el.textContent = "bad chart data"; return; }
    var x = spec.x || [];
    var series = spec.series || [];
    var points = 0;
    series.forEach(function (s) {
      (s.values || []).forEach(function (v) { if (v !== null && v !== undefined) { points += 1; } });
    });
    el.textContent = "";
    if (x.length === 0 || points === 0) {
      el.textContent = spec.empty || "no data";
      el.setAttribute("data-drawn-points", "0");
      return;
    }
    var stepped = uPlot.paths.stepped({align: 1});
    var opts = {
      width: Math.max(el.clientWidth || 0, 320),
      height: parseInt(el.getAttribute("data-height") || "260", 10),
      scales: {x: {time: spec.time !== false}},
      axes: [{}, {label: spec.y_label || "", size: 70}],
      series: [{}].concat(series.map(function (s, i) {
        return {label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 2,
                paths: s.step ? stepped : undefined, spanGaps: false,
                points: {show: x.length < 60}};
      })),
    };
    var data = [x].concat(series.map(function (s) { return s.values; }));
    new uPlot(opts, data, el);
    el.setAttribute("data-drawn-points", String(points));
  }

  function drawAll() {
    Array.prototype.forEach.call(document.querySelectorAll(".chart[data-chart-src]"), draw);
  }

  window.GA = window.GA || {};
  window.GA.drawCharts = drawAll;
  window.GA.drawChart = draw;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
