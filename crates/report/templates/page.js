// servebench's page script: draws the interactive charts and the per-request timeline from
// the JSON the page carries (#sb-data). No network, no library. When every chart is drawn it
// sets <body data-charts-drawn="N"> and the #sb-ready marker, which the browser tests read.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"];
  var data = JSON.parse(document.getElementById("sb-data").textContent);
  var tip = document.createElement("div");
  tip.className = "sb-tip";
  document.body.appendChild(tip);

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined || !isFinite(x)) return "—";
    var a = Math.abs(x);
    if (a >= 1000) return x.toFixed(0);
    if (a >= 100) return x.toFixed(1);
    if (a >= 1) return x.toFixed(2);
    return x.toPrecision(3);
  }
  function show(evt, html) {
    tip.innerHTML = html;
    tip.style.display = "block";
    tip.style.left = (evt.pageX + 12) + "px";
    tip.style.top = (evt.pageY + 12) + "px";
  }
  function hide() { tip.style.display = "none"; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;" }[c];
    });
  }

  // A line chart: x numeric (log2 when asked), one toggled series per line, hover values.
  function lineChart(host, spec) {
    var W = 760, H = 380, L = 70, R = 20, T = 30, B = 50;
    var box = document.createElement("div");
    box.className = "sb-chart";
    var h = document.createElement("h4");
    h.textContent = spec.title;
    box.appendChild(h);
    host.appendChild(box);
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" }, box);
    var legend = document.createElement("div");
    legend.className = "sb-legend";
    box.appendChild(legend);
    var hidden = {};
    function tx(x) { return spec.x_log ? Math.log2(x) : x; }
    function draw() {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var xs = [], ys = [];
      spec.series.forEach(function (s, i) {
        if (hidden[i]) return;
        s.points.forEach(function (p) {
          xs.push(tx(p.x));
          ys.push(p.hi !== null && p.hi !== undefined ? Math.max(p.hi, p.y) : p.y);
        });
      });
      if (!xs.length) { xs = [0, 1]; ys = [1]; }
      var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
      if (x1 === x0) { x0 -= 0.5; x1 += 0.5; }
      var pad = (x1 - x0) * 0.05; x0 -= pad; x1 += pad;
      // Round y ticks (1, 2, 2.5 or 5 times a power of ten), four or five of them, from 0.
      var top = Math.max.apply(null, ys) * 1.05 || 1;
      var raw = top / 4, mag = Math.pow(10, Math.floor(Math.log10(raw)));
      var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * mag; })
        .filter(function (v) { return v >= raw; })[0];
      var y1 = Math.ceil(top / step) * step;
      function sx(x) { return L + (tx(x) - x0) / (x1 - x0) * (W - L - R); }
      // Inside the plot: an interval reaching below 0 or above the top is cut at the edge.
      function sy(y) { return H - B - Math.min(Math.max(y, 0), y1) / y1 * (H - T - B); }
      for (var k = 0; k * step <= y1 + step / 1e6; k++) {
        var yv = k * step, yy = sy(yv);
        el("line", { x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#e5e5e5" }, svg);
        el("text", { x: L - 6, y: yy + 4, "text-anchor": "end", "font-size": 12 }, svg).textContent = fmt(Number(yv.toPrecision(6)));
      }
      // x labels thinned to what fits side by side (every n-th, the last always shown).
      var ticks = spec.x_ticks || [];
      var widest = Math.max.apply(null, ticks.map(function (t) { return String(t.label).length; }).concat([1]));
      var every = Math.max(1, Math.ceil(ticks.length * (widest * 7 + 10) / (W - L - R)));
      ticks.forEach(function (t, i) {
        if (i % every !== 0 && i !== ticks.length - 1) return;
        if (i === ticks.length - 1 && i % every !== 0 && (i % every) < every / 2) return;
        var xx = sx(t.x);
        el("text", { x: xx, y: H - B + 18, "text-anchor": "middle", "font-size": 12 }, svg).textContent = t.label;
      });
      el("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", "font-size": 13 }, svg).textContent = spec.x_label;
      el("text", { x: 16, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 13, transform: "rotate(-90 16 " + (T + H - B) / 2 + ")" }, svg).textContent = spec.y_label;
      el("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#555" }, svg);
      el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#555" }, svg);
      spec.series.forEach(function (s, i) {
        if (hidden[i]) return;
        var c = COLORS[i % COLORS.length];
        var d = s.points.map(function (p, j) { return (j ? "L" : "M") + sx(p.x) + " " + sy(p.y); }).join(" ");
        el("path", { d: d, fill: "none", stroke: c, "stroke-width": 2 }, svg);
        s.points.forEach(function (p) {
          if (p.lo !== null && p.lo !== undefined) {
            el("line", { x1: sx(p.x), x2: sx(p.x), y1: sy(p.lo), y2: sy(p.hi), stroke: c }, svg);
          }
          if (p.mark) {
            el("circle", { cx: sx(p.x), cy: sy(p.y), r: 9, fill: "none", stroke: "#c80000", "stroke-width": 2 }, svg);
          }
          var dot = el("circle", { cx: sx(p.x), cy: sy(p.y), r: p.flagged ? 5 : 4, fill: p.flagged ? "#fff" : c, stroke: c, "stroke-width": 2, "class": "sb-dot" }, svg);
          dot.addEventListener("mousemove", function (e) {
            var interval = (p.lo !== null && p.lo !== undefined) ? " [" + fmt(p.lo) + ", " + fmt(p.hi) + "]" : "";
            show(e, "<b>" + esc(s.name) + "</b><br>" + esc(p.label) + "<br>" + esc(spec.y_label) + ": " + fmt(p.y) + interval + (p.note ? "<br>" + esc(p.note) : ""));
          });
          dot.addEventListener("mouseleave", hide);
        });
      });
    }
    spec.series.forEach(function (s, i) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "sb-key";
      b.innerHTML = "<span style=\"background:" + COLORS[i % COLORS.length] + "\"></span>" + esc(s.name);
      b.addEventListener("click", function () {
        hidden[i] = !hidden[i];
        b.classList.toggle("sb-off", !!hidden[i]);
        draw();
      });
      legend.appendChild(b);
    });
    draw();
  }

  // The per-request timeline of one point: a row per request, queueing (scheduled to sent)
  // grey, waiting for the first token orange, the stream blue with a tick per chunk; a gap
  // between chunks longer than 4x the median gap is red (a stall).
  function timeline(host, point) {
    var reqs = point.requests, dens = point.density;
    // Above the rows, every request of the point: how many were queued, waiting and
    // streaming over its whole span (the rows are its first few hundred).
    var DH = dens ? 90 : 0;
    var W = 900, L = 60, R = 20, T = 20 + DH, rowH = Math.max(3, Math.min(14, Math.floor(420 / Math.max(1, reqs.length))));
    var H = T + reqs.length * rowH + 40;
    var t0 = Infinity, t1 = -Infinity;
    reqs.forEach(function (r) {
      t0 = Math.min(t0, r.scheduled !== null ? r.scheduled : r.sent);
      t1 = Math.max(t1, r.end !== null ? r.end : (r.chunks.length ? r.chunks[r.chunks.length - 1] : r.sent));
    });
    if (dens) { t0 = Math.min(t0, dens.t0); t1 = Math.max(t1, dens.t1); }
    if (!isFinite(t0)) { t0 = 0; t1 = 1; }
    if (t1 <= t0) t1 = t0 + 1e-3;
    function sx(t) { return L + (t - t0) / (t1 - t0) * (W - L - R); }
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" }, host);
    if (dens) {
      var n = dens.streaming.length, w = (dens.t1 - dens.t0) / n, peak = 0;
      for (var q = 0; q < n; q++) peak = Math.max(peak, dens.queued[q] + dens.waiting[q] + dens.streaming[q]);
      peak = peak || 1;
      var dg = el("g", { "class": "sb-density" }, svg), base = 14 + DH - 16, scale = (DH - 24) / peak;
      for (var q2 = 0; q2 < n; q2++) {
        var xa = sx(dens.t0 + q2 * w), xw = Math.max(0.5, sx(dens.t0 + (q2 + 1) * w) - xa), y = base;
        [["streaming", "#0072b2"], ["waiting", "#e69f00"], ["queued", "#bbbbbb"]].forEach(function (ph) {
          var hgt = dens[ph[0]][q2] * scale;
          if (hgt > 0) el("rect", { x: xa, y: y - hgt, width: xw, height: hgt, fill: ph[1] }, dg);
          y -= hgt;
        });
      }
      el("text", { x: L, y: 12, "font-size": 11 }, svg).textContent = "all " + dens.requests + " requests in flight (at most " + fmt(peak) + "): queued grey, waiting for the first token orange, streaming blue";
    }
    var gaps = [];
    reqs.forEach(function (r) { for (var j = 1; j < r.chunks.length; j++) gaps.push(r.chunks[j] - r.chunks[j - 1]); });
    gaps.sort(function (a, b) { return a - b; });
    var stall = gaps.length ? gaps[Math.floor(gaps.length / 2)] * 4 : Infinity;
    reqs.forEach(function (r, i) {
      var y = T + i * rowH, h = Math.max(2, rowH - 1);
      var g = el("g", { "class": "sb-req" }, svg);
      if (r.scheduled !== null && r.sent > r.scheduled) {
        el("rect", { x: sx(r.scheduled), y: y, width: Math.max(1, sx(r.sent) - sx(r.scheduled)), height: h, fill: "#bbbbbb" }, g);
      }
      var first = r.first !== null ? r.first : (r.end !== null ? r.end : r.sent);
      el("rect", { x: sx(r.sent), y: y, width: Math.max(1, sx(first) - sx(r.sent)), height: h, fill: r.error ? "#c80000" : "#e69f00" }, g);
      if (r.first !== null && r.end !== null) {
        el("rect", { x: sx(r.first), y: y, width: Math.max(1, sx(r.end) - sx(r.first)), height: h, fill: "#0072b2", opacity: 0.55 }, g);
      }
      for (var j = 0; j < r.chunks.length; j++) {
        var c = r.chunks[j];
        if (j > 0 && c - r.chunks[j - 1] > stall) {
          el("rect", { x: sx(r.chunks[j - 1]), y: y, width: Math.max(1, sx(c) - sx(r.chunks[j - 1])), height: h, fill: "#c80000" }, g);
        }
        if (rowH >= 6) el("line", { x1: sx(c), x2: sx(c), y1: y, y2: y + h, stroke: "#003f63", "stroke-width": 0.6 }, g);
      }
      g.addEventListener("mousemove", function (e) {
        var ms = function (t) { return t === null ? "—" : fmt((t - t0) * 1000) + " ms"; };
        var lines = ["<b>request " + r.i + "</b> (round " + r.round + ")",
          "scheduled " + ms(r.scheduled), "sent " + ms(r.sent), "first token " + ms(r.first), "end " + ms(r.end),
          "chunks " + r.chunks.length + (r.chunks_cut ? " (first " + r.chunks.length + " of " + r.chunks_cut + ")" : "")];
        if (r.worker) lines.push("worker " + esc(r.worker));
        if (r.prefill_worker) lines.push("prefill worker " + esc(r.prefill_worker));
        if (r.error) lines.push("error: " + esc(r.error));
        show(e, lines.join("<br>"));
      });
      g.addEventListener("mouseleave", hide);
    });
    for (var k = 0; k <= 5; k++) {
      var t = t0 + (t1 - t0) * k / 5;
      // The last label ends at the plot's edge instead of running past it.
      el("text", { x: sx(t), y: H - 20, "text-anchor": k === 5 ? "end" : (k === 0 ? "start" : "middle"), "font-size": 12 }, svg).textContent = fmt((t - t0) * 1000) + " ms";
    }
    el("text", { x: 4, y: T + 10, "font-size": 11 }, svg).textContent = "req";
  }

  var drawn = 0;
  var charts = document.getElementById("sb-charts");
  (data.charts || []).forEach(function (spec) { lineChart(charts, spec); drawn++; });
  var tl = document.getElementById("sb-timeline");
  if (tl && data.timeline && data.timeline.length) {
    var pick = document.createElement("select");
    data.timeline.forEach(function (p, i) {
      var o = document.createElement("option");
      o.value = i;
      o.textContent = p.label + " (" + p.requests.length + " requests" + (p.cut ? ", first " + p.requests.length + " of " + p.cut : "") + ")";
      pick.appendChild(o);
    });
    var area = document.createElement("div");
    tl.appendChild(pick);
    tl.appendChild(area);
    var render = function () {
      while (area.firstChild) area.removeChild(area.firstChild);
      timeline(area, data.timeline[pick.value]);
    };
    pick.addEventListener("change", render);
    render();
    drawn++;
  }
  document.body.setAttribute("data-charts-drawn", String(drawn));
  var ready = document.getElementById("sb-ready");
  ready.textContent = "charts drawn: " + drawn;
})();
