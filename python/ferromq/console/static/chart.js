// The cluster page's throughput chart: polls /api/cluster every few seconds and draws in/out TPS
// of the last samples on the canvas (no library: a few lines of canvas drawing).
(function () {
  "use strict";
  var canvas = document.getElementById("chart");
  var status = document.getElementById("chart-status");
  var samples = [];
  var MAX = 120, EVERY_MS = 5000;

  function draw() {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 30;
    ctx.clearRect(0, 0, w, h);
    var top = 1;
    samples.forEach(function (s) { top = Math.max(top, s.in, s.out); });
    ctx.strokeStyle = "#e3e6eb"; ctx.fillStyle = "#6b7280"; ctx.font = "11px sans-serif";
    for (var i = 0; i <= 4; i++) {
      var y = pad + (h - 2 * pad) * i / 4;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 10, y); ctx.stroke();
      ctx.fillText((top * (4 - i) / 4).toFixed(1), 2, y + 4);
    }
    [["in", "#2e6fdb"], ["out", "#12a150"]].forEach(function (line) {
      ctx.strokeStyle = line[1]; ctx.lineWidth = 2; ctx.beginPath();
      samples.forEach(function (s, i) {
        var x = pad + (w - pad - 10) * (samples.length === 1 ? 1 : i / (samples.length - 1));
        var y = h - pad - (h - 2 * pad) * s[line[0]] / top;
        if (i === 0) { ctx.moveTo(x, y); } else { ctx.lineTo(x, y); }
      });
      ctx.stroke();
    });
  }

  function poll() {
    fetch("/api/cluster").then(function (r) { return r.json(); }).then(function (d) {
      samples.push({ in: d.in, out: d.out });
      if (samples.length > MAX) { samples.shift(); }
      canvas.dataset.samples = String(samples.length);
      status.textContent = samples.length + " sample(s); now in " + d.in.toFixed(2) + "/s, out " + d.out.toFixed(2) + "/s";
      draw();
    }).catch(function (e) {
      status.textContent = "cannot reach the console: " + e;
    });
  }

  poll();
  setInterval(poll, EVERY_MS);
})();
