// The panels of gpumem's HTML report (render_html.go), drawn from the
// page's data block (chartData, render_html_marks.go) at the window's width
// and over the stretch of time shown. No library; nothing is fetched.
//
// Each series is thinned to what a pixel column shows: of the points in a
// column its first, lowest, highest and last, in order (so a peak is drawn
// to its height and the DOM holds a few points per pixel at most). A drag
// across a panel zooms every panel's time axis to the stretch selected;
// "whole run" or a double click shows the whole run; the page opens on the
// peak's neighbourhood when the data says so (chartData.Focus).
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('gpumem-data').textContent);
  var H = 250, ML = 78, MR = 16, MT = 14, MB = 34, PH = H - MT - MB, LABEL_H = 12;

  // unpack reads a packed series (event, time, bytes ÷ unit, each the
  // difference from the point before); steps adds the corner points of a
  // level held until the next point.
  function unpack(a, steps) {
    var n = a.length / 3, m = steps && n ? 2 * n - 1 : n, e = new Float64Array(m), x = new Float64Array(m), v = new Float64Array(m);
    for (var i = 0, k = 0, E = 0, T = 0, V = 0; i < n; i++) {
      E += a[3 * i]; T += a[3 * i + 1]; V += a[3 * i + 2];
      var X = D.byEvents ? E : T;
      if (steps && i > 0) { e[k] = E; x[k] = X; v[k] = v[k - 1]; k++; }
      e[k] = E; x[k] = X; v[k] = V * D.u; k++;
    }
    return {e: e, x: x, v: v};
  }

  // lower is the first index whose x is ≥ t; upper the first > t.
  function lower(xs, t) {
    var lo = 0, hi = xs.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (xs[m] < t) lo = m + 1; else hi = m; }
    return lo;
  }
  function upper(xs, t) {
    var lo = 0, hi = xs.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (xs[m] <= t) lo = m + 1; else hi = m; }
    return lo;
  }

  // thin returns the indices of s to draw over [a, b] in w pixel columns:
  // per column the first, lowest, highest and last point, and the points
  // either side of the range, so the line runs on to the plot's edges.
  function thin(s, a, b, w) {
    var n = s.x.length, out = [];
    if (!n) return out;
    var lo = Math.max(lower(s.x, a) - 1, 0), hi = Math.min(upper(s.x, b), n - 1);
    var col = null, f = 0, mn = 0, mx = 0, l = 0;
    function flush() {
      var ids = [f, mn, mx, l].sort(function (p, q) { return p - q; });
      for (var j = 0; j < 4; j++) if (j === 0 || ids[j] !== ids[j - 1]) out.push(ids[j]);
    }
    for (var i = lo; i <= hi; i++) {
      var c = Math.floor((s.x[i] - a) / (b - a) * w);
      if (c !== col) {
        if (col !== null) flush();
        col = c; f = mn = mx = l = i;
      } else {
        l = i;
        if (s.v[i] < s.v[mn]) mn = i;
        if (s.v[i] > s.v[mx]) mx = i;
      }
    }
    if (col !== null) flush();
    return out;
  }

  // bytes is pool.Bytes's String: "1.50 GiB".
  function bytes(b) {
    if (b < 1024) return b + ' B';
    var d = 1024, e = 0;
    for (var n = Math.floor(b / 1024); n >= 1024 && e < 5; n = Math.floor(n / 1024)) { d *= 1024; e++; }
    return (b / d).toFixed(2) + ' ' + 'KMGTPE'[e] + 'iB';
  }
  // duration is a span of trace time (µs) with the decimals a step of
  // step µs needs.
  function duration(us, step) {
    if (us === 0) return '0';
    var div = 1, unit = 'µs';
    if (Math.abs(us) >= 1e6) { div = 1e6; unit = 's'; } else if (Math.abs(us) >= 1e3) { div = 1e3; unit = 'ms'; }
    var dec = Math.min(Math.max(0, Math.ceil(Math.log10(div / step) - 1e-9)), 6);
    return (us / div).toFixed(dec) + ' ' + unit;
  }
  // between is a stretch of trace time, both ends in the unit of the
  // later one, with the decimals that tell them apart.
  function between(a, b) {
    var div = b >= 1e6 ? 1e6 : b >= 1e3 ? 1e3 : 1, unit = div === 1e6 ? ' s' : div === 1e3 ? ' ms' : ' µs';
    var dec = Math.min(Math.max(0, Math.ceil(Math.log10(div / (niceStep(b - a, 6) / 10)) - 1e-9)), 6);
    return (a / div).toFixed(dec) + unit + ' to ' + (b / div).toFixed(dec) + unit;
  }
  function where(v, step) { return D.byEvents ? 'event ' + Math.round(v) : duration(Math.round(v - D.x0), step || 1); }
  function esc(s) { return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;'); }

  // niceStep is a tick step of 1, 2 or 5 × 10ᵏ giving fewer than most
  // ticks over span (niceDecimal in Go).
  function niceStep(span, most) {
    for (var p = 1; p < 1e18; p *= 10) {
      for (var m = 1; m <= 5; m += (m === 1 ? 1 : 3)) if (Math.floor(span / (m * p)) < most) return m * p;
    }
    return 1e18;
  }
  function xTicks(a, b, pw) {
    var step = niceStep(b - a, Math.max(6, Math.floor(pw / 140))), out = [];
    for (var v = Math.ceil((a - D.x0) / step) * step; D.x0 + v <= b; v += step) out.push({x: D.x0 + v, l: D.byEvents ? 'event ' + v : duration(v, step)});
    return out;
  }

  var shared = D.live ? unpack(D.live) : null, rec = D.recorded ? unpack(D.recorded, true) : null;
  var panels = D.panels.map(function (p, i) {
    var svg = document.getElementById('timeline-' + p.name);
    return {d: p, i: i, svg: svg, readout: svg && svg.nextElementSibling, live: p.live ? unpack(p.live) : shared, res: unpack(p.reserved, true)};
  }).filter(function (P) { return P.svg; });
  // The lines every panel shares: the live bytes, drawn for panels
  // sharedW wide, the recorded reserve for panels recW wide.
  var sharedLine = document.getElementById('gm-live'), sharedW = -1, recLine = document.getElementById('gm-rec'), recW = -1;
  var st = {a: D.x0, b: D.x1, yz: document.getElementById('zoom').checked};
  if (D.focus) { st.a = D.focus[0]; st.b = D.focus[1]; }

  // render draws a panel in a container w pixels wide (the panel's border
  // inside it), its labels where placeLabels puts them.
  function render(P, w) {
    var svg = P.svg, p = P.d, a = st.a, b = st.b, Y = st.yz ? D.yZoom : D.y;
    var W = Math.max(Math.floor(w) - 2, 320), PW = W - ML - MR;
    P.W = W; P.PW = PW;
    function X(v) { return ML + (v - a) / (b - a) * PW; }
    function Yp(v) { v = Math.max(v, Y.bottom); return MT + PH - (v - Y.bottom) / Math.max(Y.top - Y.bottom, 1) * PH; }
    function f(v) { return v.toFixed(2); }
    // points is a series as a polyline's points: the thinned points, the
    // ones either side of the range moved along their segment to the
    // plot's edge (so no clip is needed, which software rasterising pays
    // for), a point that repeats the one before or lies inside a level
    // run left out.
    function points(s) {
      var idx = thin(s, a, b, PW), n = idx.length, xs = [], ys = [];
      for (var k = 0; k < n; k++) {
        var i = idx[k], x = s.x[i], v = s.v[i], j = k === 0 ? (n > 1 ? idx[1] : -1) : k === n - 1 ? idx[n - 2] : -1;
        if (j >= 0 && (x < a || x > b) && s.x[j] !== x) {
          var e = x < a ? a : b;
          v = v + (s.v[j] - v) * (e - x) / (s.x[j] - x);
          x = e;
        }
        var px = f(X(x)), py = f(Yp(v)), m = xs.length;
        if (m && xs[m - 1] === px && ys[m - 1] === py) continue;
        if (m > 1 && ys[m - 1] === py && ys[m - 2] === py) { xs[m - 1] = px; continue; }
        xs.push(px); ys.push(py);
      }
      for (var q = 0; q < xs.length; q++) xs[q] += ',' + ys[q];
      return xs.join(' ');
    }
    function inRange(x) { return x >= a && x <= b; }
    svg.setAttribute('width', W);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('data-x0', a);
    svg.setAttribute('data-x1', b);
    var h = ['<rect class="plot" x="' + ML + '" y="' + MT + '" width="' + PW + '" height="' + PH + '"/><g class="y-ticks">'];
    Y.ticks.forEach(function (t) {
      var y = f(Yp(t.b));
      h.push('<g class="tick" data-bytes="' + t.b + '" data-y="' + y + '"><line class="grid" x1="' + ML + '" x2="' + (ML + PW) + '" y1="' + y + '" y2="' + y +
        '"/><text x="' + (ML - 6) + '" y="' + y + '" text-anchor="end" dominant-baseline="middle">' + esc(t.l) + '</text></g>');
    });
    h.push('</g><g class="x-ticks">');
    xTicks(a, b, PW).forEach(function (t) {
      var x = f(X(t.x));
      h.push('<g class="tick" data-x="' + t.x + '"><line class="axis" x1="' + x + '" x2="' + x + '" y1="' + (MT + PH) + '" y2="' + (MT + PH + 5) +
        '"/><text x="' + x + '" y="' + (MT + PH + 17) + '" text-anchor="middle">' + esc(t.l) + '</text></g>');
    });
    h.push('</g><line class="axis" x1="' + ML + '" x2="' + ML + '" y1="' + MT + '" y2="' + (MT + PH) + '"/><line class="axis" x1="' + ML + '" x2="' + (ML + PW) +
      '" y1="' + (MT + PH) + '" y2="' + (MT + PH) + '"/><text class="axis-label" x="' + (ML + PW) + '" y="' + (H - 3) + '" text-anchor="end">' +
      (D.byEvents ? 'event' : 'trace time') + '</text><g class="series">');
    // The recorded reserve and the live bytes every panel shares are drawn
    // once (in #gm-shared) and used here; a panel's own live bytes are
    // drawn in it.
    if (rec) {
      if (recW !== W) { recLine.setAttribute('points', points(rec)); recW = W; }
      h.push('<use class="recorded" href="#gm-rec"/>');
    }
    h.push('<polyline class="reserved" points="' + points(P.res) + '"/>');
    if (P.live === shared) {
      if (sharedW !== W) { sharedLine.setAttribute('points', points(shared)); sharedW = W; }
      h.push('<use class="live" href="#gm-live"/></g>');
    } else h.push('<polyline class="live" points="' + points(P.live) + '"/></g>');
    var want = [], lines = [];
    function level(cls, v, text, anchor, x) {
      var y = f(Yp(v));
      h.push('<g class="level" data-bytes="' + v + '"><line class="' + cls + '" x1="' + ML + '" x2="' + (ML + PW) + '" y1="' + y + '" y2="' + y + '"/></g>');
      want.push({cls: cls + '-label', text: text, anchor: anchor, x: x, y: Yp(v) - 3});
      lines.push({x0: ML, x1: ML + PW, y0: Yp(v) - 1.5, y1: Yp(v) + 1.5, own: cls + '-label'});
    }
    if (D.capacity) level('capacity', D.capacity, 'capacity ' + bytes(D.capacity), 'start', ML + 4);
    if (p.minCapacity) level('min-capacity', p.minCapacity, 'smallest capacity ' + bytes(p.minCapacity), 'end', ML + PW - 4);
    if (p.oom && inRange(p.oom.x)) {
      var ox = X(p.oom.x), oright = ox > ML + PW / 2;
      h.push('<line class="oom" data-event="' + p.oom.event + '" x1="' + f(ox) + '" x2="' + f(ox) + '" y1="' + MT + '" y2="' + (MT + PH) + '"/>');
      var oomLabel = {cls: 'oom-label', text: 'out of memory at ' + p.oom.place, anchor: oright ? 'end' : 'start', x: ox + (oright ? -4 : 4), y: MT + PH - 6};
    }
    if (inRange(p.peakX)) {
      var px = X(p.peakX), py = Yp(p.peak), pright = px > ML + PW / 2;
      h.push('<circle class="peak" data-bytes="' + p.peak + '" data-event="' + p.peakEvent + '" cx="' + f(px) + '" cy="' + f(py) + '" r="4"/>');
      want.push({cls: 'peak-label', text: 'peak ' + bytes(p.peak), anchor: pright ? 'end' : 'start', x: px + (pright ? -6 : 6), y: py + 14});
    }
    if (oomLabel) want.push(oomLabel);
    h.push('<g class="labels">');
    placeLabels(want, lines).forEach(function (l) {
      h.push('<text class="line-label ' + l.cls + '" x="' + f(l.x) + '" y="' + f(l.y) + '" text-anchor="' + l.anchor + '">' + esc(l.text) + '</text>');
    });
    h.push('</g><line class="cursor" visibility="hidden" y1="' + MT + '" y2="' + (MT + PH) + '"/>',
      '<rect class="selection" visibility="hidden" y="' + MT + '" height="' + PH + '"/><rect class="overlay" x="' + ML + '" y="' + MT + '" width="' + PW + '" height="' + PH + '"/>');
    svg.innerHTML = h.join('');
  }

  // Labels are measured on a canvas in the page's font (no layout of the
  // page for it), their boxes a little taller than the text.
  var measure = document.createElement('canvas').getContext('2d'), font = getComputedStyle(document.body).fontFamily;
  function labelBox(l) {
    measure.font = (l.cls === 'oom-label' ? '600 ' : '') + '11px ' + font;
    var w = measure.measureText(l.text).width, x0 = l.anchor === 'end' ? l.x - w : l.anchor === 'middle' ? l.x - w / 2 : l.x;
    return {x: x0, y: l.y - 11, width: w, height: 14};
  }

  // placeLabels returns the labels where none overlaps another or a level
  // line but its own: each at its own place, else moved a label's height
  // at a time, above then below, staying inside the plot; where no place
  // is free of lines, the first free of labels.
  function placeLabels(want, lines) {
    var placed = [];
    return want.map(function (l) {
      var bb = labelBox(l), dy = null, free = null;
      function hits(box) { return function (o) { return box.x0 < o.x1 && o.x0 < box.x1 && box.y0 < o.y1 && o.y0 < box.y1; }; }
      var others = lines.filter(function (o) { return o.own !== l.cls; });
      for (var k = 0; k < 24 && dy === null; k++) {
        var s = Math.floor((k + 1) / 2) * LABEL_H * (k % 2 ? -1 : 1);
        var box = {x0: bb.x, x1: bb.x + bb.width, y0: bb.y + s, y1: bb.y + bb.height + s};
        if (box.y0 < MT || box.y1 > MT + PH || placed.some(hits(box))) continue;
        if (free === null) free = s;
        if (!others.some(hits(box))) dy = s;
      }
      dy = dy !== null ? dy : free || 0;
      placed.push({x0: bb.x, x1: bb.x + bb.width, y0: bb.y + dy, y1: bb.y + bb.height + dy});
      return {cls: l.cls, text: l.text, anchor: l.anchor, x: l.x, y: l.y + dy};
    });
  }

  // renderAll draws every panel: the widths read at once, then the
  // panels written, so that the page is laid out once for it, not once a
  // panel.
  function renderAll() {
    var widths = panels.map(function (P) { return P.svg.parentNode.clientWidth; });
    sharedW = recW = -1;
    panels.forEach(function (P, i) { render(P, widths[i]); });
    var whole = st.a <= D.x0 && st.b >= D.x1, focus = D.focus && st.a === D.focus[0] && st.b === D.focus[1];
    var span = where(D.x1, niceStep(D.x1 - D.x0, 6) / 100);
    var text = whole ? 'the whole run: ' + (D.byEvents ? 'events 0 to ' + D.x1 : span + ' of trace time') :
      'shown: ' + (D.byEvents ? 'events ' + st.a + ' to ' + st.b + ' of ' + D.x1 : between(st.a - D.x0, st.b - D.x0) + ' of ' + span);
    if (focus) text += ' (' + D.focusNote + ')';
    document.getElementById('x-range').textContent = text;
    document.getElementById('zoom-reset').disabled = whole;
    var fb = document.getElementById('zoom-focus');
    fb.hidden = !D.focus;
    fb.disabled = !!focus;
  }

  function setRange(a, b) {
    a = Math.max(Math.floor(a), D.x0);
    b = Math.min(Math.ceil(b), D.x1);
    if (b - a < 1) { b = Math.min(a + 1, D.x1); a = b - 1; }
    st.a = a; st.b = b;
    renderAll();
  }

  // user converts a mouse event to the panel's coordinates.
  function user(P, ev) {
    var pt = P.svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    return pt.matrixTransform(P.svg.getScreenCTM().inverse());
  }
  function valueAt(P, x) { return st.a + (Math.min(Math.max(x, ML), ML + P.PW) - ML) / P.PW * (st.b - st.a); }

  // column is the highest value of s over [c0, c1] and the events there
  // (or the point before, when none is).
  function column(s, c0, c1) {
    if (!s || !s.x.length) return null;
    var i = lower(s.x, c0), j = upper(s.x, c1);
    if (i >= j) { i = Math.max(j - 1, 0); j = i + 1; }
    var m = i;
    for (var k = i; k < j; k++) if (s.v[k] > s.v[m]) m = k;
    return {v: s.v[m], e0: s.e[i], e1: s.e[j - 1]};
  }
  // hover says what the pixel column under the pointer holds (the column
  // thin draws there).
  function hover(P, u) {
    var per = (st.b - st.a) / P.PW, c0 = st.a + Math.floor(Math.min(u.x - ML, P.PW - 1)) * per, c1 = c0 + per * (1 - 1e-9), c = valueAt(P, u.x);
    var L = column(P.live, c0, c1), R = column(P.res, c0, c1), G = column(rec, c0, c1), step = Math.max(per, 1);
    var ev = L.e0 === L.e1 ? 'event ' + L.e0 : 'events ' + L.e0 + '–' + L.e1;
    P.readout.textContent = (D.byEvents ? '' : 't ' + where(c, step) + ', ') + ev + ': live up to ' + bytes(L.v) + ' (' + L.v + ' B), reserved up to ' + bytes(R.v) + ' (' + R.v + ' B)' +
      (G ? '; ' + D.recName + ' recorded ' + bytes(G.v) : '');
    var cur = P.svg.querySelector('.cursor');
    cur.setAttribute('x1', u.x.toFixed(2)); cur.setAttribute('x2', u.x.toFixed(2)); cur.setAttribute('visibility', 'visible');
  }

  var drag = null;
  function select(P, x0, x1) {
    var r = P.svg.querySelector('.selection'), l = Math.max(Math.min(x0, x1), ML), w = Math.min(Math.max(x0, x1), ML + P.PW) - l;
    r.setAttribute('x', l.toFixed(2)); r.setAttribute('width', Math.max(w, 0).toFixed(2)); r.setAttribute('visibility', 'visible');
  }
  panels.forEach(function (P) {
    var svg = P.svg;
    svg.addEventListener('mousedown', function (ev) {
      var u = user(P, ev);
      if (ev.button !== 0 || u.x < ML || u.x > ML + P.PW || u.y < MT || u.y > MT + PH) return;
      drag = {P: P, x: u.x};
      ev.preventDefault();
    });
    svg.addEventListener('mousemove', function (ev) {
      var u = user(P, ev);
      if (drag && drag.P === P) select(P, drag.x, u.x);
      if (u.x >= ML && u.x <= ML + P.PW && u.y >= MT && u.y <= MT + PH) hover(P, u);
    });
    svg.addEventListener('mouseleave', function () {
      P.svg.querySelector('.cursor').setAttribute('visibility', 'hidden');
    });
    svg.addEventListener('dblclick', function () { setRange(D.x0, D.x1); });
  });
  window.addEventListener('mouseup', function (ev) {
    if (!drag) return;
    var P = drag.P, x0 = drag.x, x1 = user(P, ev).x;
    drag = null;
    P.svg.querySelector('.selection').setAttribute('visibility', 'hidden');
    if (Math.abs(x1 - x0) >= 4) setRange(valueAt(P, Math.min(x0, x1)), valueAt(P, Math.max(x0, x1)));
  });
  document.getElementById('zoom-reset').addEventListener('click', function () { setRange(D.x0, D.x1); });
  document.getElementById('zoom-focus').addEventListener('click', function () { setRange(D.focus[0], D.focus[1]); });
  document.getElementById('zoom').addEventListener('change', function (ev) { st.yz = ev.target.checked; renderAll(); });
  var pending = false;
  // A resize draws the panels again when their width changed (a headless
  // screenshot resizes the window to its own height, too).
  window.addEventListener('resize', function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () {
      pending = false;
      if (panels.some(function (P) { return Math.max(Math.floor(P.svg.parentNode.clientWidth) - 2, 320) !== P.W; })) renderAll();
    });
  });
  renderAll();
})();
