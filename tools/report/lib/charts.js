// Chart options for the seqto report, shared by the page (inlined into report.html,
// run by the browser) and the static figures (run by Node with ECharts' server-side
// SVG renderer), so the interactive and the static charts are the same charts.
//
// Input is report.json as docs/report-format.md describes it, already validated by
// `seqto report`. Nothing here recomputes a tuner result: the Pareto front and its
// ranks come from report.json's "pareto"; the only arithmetic is for display (the
// 0-100 min-max scaling of chart (a), the same rule as src/eval/pareto.h, and units).
//
// Plain ES2017 without modules: this file is inlined into a <script> as it is.
(function (root, factory) {
  if (typeof module === 'object' && module.exports) module.exports = factory();
  else root.SeqtoCharts = factory();
})(typeof self !== 'undefined' ? self : this, function () {
  'use strict';

  // ------------------------------------------------------------------ formatting

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }

  function isNum(v) {
    return typeof v === 'number' && isFinite(v);
  }

  // Fixed decimals, "—" for a missing value.
  function fmt(v, digits) {
    return isNum(v) ? v.toFixed(digits === undefined ? 2 : digits) : '—';
  }

  // One SI unit for every size of a run, picked from the largest one.
  function sizeUnit(maxBytes) {
    if (maxBytes >= 1e9) return { name: 'GB', div: 1e9, digits: 3 };
    if (maxBytes >= 1e6) return { name: 'MB', div: 1e6, digits: 3 };
    if (maxBytes >= 1e3) return { name: 'kB', div: 1e3, digits: 1 };
    return { name: 'B', div: 1, digits: 0 };
  }

  function fmtSize(bytes, unit) {
    return isNum(bytes) ? (bytes / unit.div).toFixed(unit.digits) + ' ' + unit.name : '—';
  }

  function basename(p) {
    var parts = String(p).split(/[\\/]/);
    return parts[parts.length - 1] || String(p);
  }

  // ------------------------------------------------------------------ the view

  // The latency a candidate is compared by: the median, as the tuner's objective
  // (the mean where an older report.json has no p50).
  function latencyOf(lat) { return isNum(lat.p50) ? lat.p50 : lat.mean; }
  // A latency whose p95 exceeded 1.5 x p50 (the tuner's latency_ms.unstable).
  function unstable(lat) { return lat.unstable === true; }

  var OBJECTIVES = {
    accuracy_loss: {
      label: 'Accuracy loss', color: '#d62728',
      get: function (c) { return c.metrics.accuracy_loss; },
    },
    size_bytes: {
      label: 'Model size', color: '#1f77b4',
      get: function (c) { return c.size_bytes; },
    },
    latency_ms: {
      label: 'Latency (p50)', color: '#2ca02c',
      get: function (c) { return latencyOf(c.latency_ms); },
    },
  };
  var DEFAULT_OBJECTIVES = ['accuracy_loss', 'size_bytes', 'latency_ms'];
  var PARETO_COLORS = ['#4a148c', '#8e44ad', '#c39bd3'];
  var LATENCY_COLORS = ['#2c7bb6', '#abd9e9', '#fdae61', '#d7191c'];
  var RUN_COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
    '#bcbd22', '#17becf'];

  // Min-max scaling to [0, 100]; a constant column scales to 0 (as src/eval/pareto.h).
  function scaler(values) {
    var lo = Infinity, hi = -Infinity;
    values.forEach(function (v) { if (v < lo) lo = v; if (v > hi) hi = v; });
    return function (v) { return hi > lo ? (100 * (v - lo)) / (hi - lo) : 0; };
  }

  // Each candidate's latency against the float model, the fully quantized one (the
  // candidate that excludes nothing) and the bound a selective model should stay
  // under: int8 + (float - int8) x (MAC share of its excluded groups) + 0.1 x float.
  // The MAC share needs report.json's `macs` and every excluded group's `macs`; a
  // ratio or bound whose inputs are missing is null.
  function latencyRefs(report, cycles, floatMs) {
    var int8 = null;
    cycles.forEach(function (c) { if (c.excluded.length === 0) int8 = latencyOf(c.latency_ms); });
    var macsOf = {};
    (Array.isArray(report.groups) ? report.groups : []).forEach(function (g) { macsOf[g.name] = g.macs; });
    var total = report.macs;
    var ratio = function (a, b) { return isNum(a) && isNum(b) && b > 0 ? a / b : null; };
    var byIndex = {};
    cycles.forEach(function (c) {
      var share = null;
      if (isNum(total) && total > 0) {
        var sum = 0;
        for (var i = 0; i < c.excluded.length && sum !== null; i++) {
          var m = macsOf[c.excluded[i]];
          sum = isNum(m) ? sum + m : null;
        }
        if (sum !== null) share = sum / total;
      }
      var ms = latencyOf(c.latency_ms);
      var bound = isNum(int8) && isNum(floatMs) && share !== null ? int8 + (floatMs - int8) * share + 0.1 * floatMs : null;
      byIndex[c.index] = {
        macShare: share, bound: bound,
        vsFloat: ratio(ms, floatMs), vsInt8: ratio(ms, int8), vsBound: ratio(ms, bound),
        slowerThanFloat: isNum(ms) && isNum(floatMs) && ms > floatMs,
      };
    });
    return { int8: int8, byIndex: byIndex };
  }

  // Everything the charts and the page need from one report.json.
  function prepareRun(report) {
    var objectives = (report.settings && Array.isArray(report.settings.objectives) &&
      report.settings.objectives.length ? report.settings.objectives : DEFAULT_OBJECTIVES)
      .filter(function (o) { return OBJECTIVES[o]; });
    if (!objectives.length) objectives = DEFAULT_OBJECTIVES.slice();
    var cycles = report.cycles.slice().sort(function (a, b) { return a.index - b.index; });
    var byIndex = {};
    cycles.forEach(function (c) { byIndex[c.index] = c; });

    var pareto = report.pareto.slice().sort(function (a, b) { return a.rank - b.rank; });
    var rankOf = {};
    pareto.forEach(function (p) { if (!(p.cycle in rankOf)) rankOf[p.cycle] = p.rank; });
    var top3 = pareto.filter(function (p) { return p.rank <= 3 && byIndex[p.cycle]; }).slice(0, 3);

    var scalers = {};
    Object.keys(OBJECTIVES).forEach(function (o) {
      scalers[o] = scaler(cycles.map(OBJECTIVES[o].get));
    });
    var rows = cycles.map(function (c) {
      var norm = {};
      Object.keys(OBJECTIVES).forEach(function (o) { norm[o] = scalers[o](OBJECTIVES[o].get(c)); });
      return { cycle: c, norm: norm, rank: c.index in rankOf ? rankOf[c.index] : null };
    });

    var groups = Array.isArray(report.groups) ? report.groups.slice().sort(function (a, b) {
      return a.order - b.order;
    }) : null;
    // The first cycle that gives each group back to float.
    var excludedAt = {};
    cycles.forEach(function (c) {
      c.excluded.forEach(function (g) { if (!(g in excludedAt)) excludedAt[g] = c.index; });
    });

    var maxSize = report.baseline.size_bytes;
    cycles.forEach(function (c) { if (c.size_bytes > maxSize) maxSize = c.size_bytes; });
    var floatLatency = latencyOf(report.baseline.latency_ms);
    var refs = latencyRefs(report, cycles, floatLatency);
    return {
      report: report,
      model: report.model,
      modelName: basename(report.model),
      objectives: objectives,
      rows: rows,
      byIndex: byIndex,
      rankOf: rankOf,
      pareto: pareto,
      top3: top3,
      groups: groups,
      excludedAt: excludedAt,
      unit: sizeUnit(maxSize),
      floatLatency: floatLatency,
      int8Latency: refs.int8,        // the candidate that excludes nothing; null without one
      latencyRefs: refs.byIndex,     // per candidate index: vsFloat, vsInt8, bound, vsBound, ...
      // On the latency scale of chart (a): may fall outside 0-100, the axis stretches.
      floatLatencyNorm: scalers.latency_ms(floatLatency),
    };
  }

  // ------------------------------------------------------------------ shared style

  function baseOption(view, opts, title, subtitle) {
    // Static figures: Liberation Sans has Arial's metrics, which ECharts' server-side
    // renderer assumes when it measures text without a canvas, so labels fit.
    var font = opts.static ? "'Liberation Sans', Arial, Helvetica, sans-serif"
      : 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';
    return {
      animation: !opts.static,
      backgroundColor: '#ffffff',
      textStyle: { fontFamily: font, color: '#222' },
      title: {
        text: title, subtext: subtitle, left: 'center', top: 8,
        textStyle: { fontSize: 16, fontWeight: 'bold', color: '#111' },
        subtextStyle: { fontSize: 12, color: '#555' },
      },
      tooltip: {
        confine: true, className: 'seqto-tooltip', backgroundColor: 'rgba(255,255,255,0.97)',
        borderColor: '#999', textStyle: { fontSize: 12, color: '#222' },
        extraCssText: 'max-width: 420px; white-space: normal; box-shadow: 0 2px 8px rgba(0,0,0,.2);',
      },
    };
  }

  function axisName(text) {
    return { name: text, nameLocation: 'middle', nameTextStyle: { fontSize: 13, color: '#333' } };
  }

  function merge(target, extra) {
    Object.keys(extra).forEach(function (k) { target[k] = extra[k]; });
    return target;
  }

  // Tooltip body for one candidate: its excluded groups and its metrics.
  function candidateTooltip(view, c) {
    var rank = view.rankOf[c.index];
    var m = c.metrics, lat = c.latency_ms, u = view.unit;
    var head = '<b>Candidate ' + c.index + '</b>' +
      (rank ? ' &middot; <span style="color:#4a148c">Pareto #' + rank + '</span>' : '');
    var ex = c.excluded;
    var shown = ex.slice(0, 12).map(escapeHtml).join(', ');
    if (ex.length > 12) shown += ', &hellip; +' + (ex.length - 12) + ' more';
    var exLine = ex.length ? 'Excluded (' + ex.length + '): ' + shown : 'Excluded: none (fully quantized)';
    var sizePct = view.report.baseline.size_bytes > 0 ? ' (' + (100 * c.size_bytes / view.report.baseline.size_bytes)
      .toFixed(1) + '% of float)' : '';
    var lines = [
      head,
      '<span style="color:#555">' + exLine + '</span>',
      'Accuracy loss: <b>' + fmt(m.accuracy_loss, 2) + '</b> points',
      'Top-1 disagreement: ' + fmt(m.top1_disagreement, 2) + ' % &middot; top-5 overlap: ' +
        fmt(m.top5_overlap, 3) + ' &middot; Kendall &tau;: ' + fmt(m.kendall_tau, 3),
      'Output SQNR: ' + fmt(m.sqnr_db, 1) + ' dB &middot; KL: ' + fmt(m.kl_divergence, 4),
      'Size: <b>' + fmtSize(c.size_bytes, u) + '</b>' + sizePct,
      'Latency: <b>' + fmt(latencyOf(lat), 3) + ' ms</b> p50 (mean ' + fmt(lat.mean, 3) + ' &plusmn; ' +
        fmt(lat.stddev, 3) + ', p95 ' + fmt(lat.p95, 3) + ')',
    ];
    var ref = view.latencyRefs[c.index];
    if (ref) {
      lines.push((ref.slowerThanFloat ? '<span style="color:#c62828">&#9650; slower than the float model</span> &middot; ' : '') +
        '&times; float ' + fmt(ref.vsFloat, 2) + ' &middot; &times; int8 ' + fmt(ref.vsInt8, 2) +
        ' &middot; bound ' + fmt(ref.bound, 3) + ' ms (&times; ' + fmt(ref.vsBound, 2) + ', MAC share ' +
        (ref.macShare === null ? '—' : fmt(100 * ref.macShare, 1) + ' %') + ')');
    }
    if (unstable(lat)) {
      lines.push('<span style="color:#b35900">&#9888; Unstable latency: p95 is ' + fmt(lat.p95 / lat.p50, 2) +
        ' &times; p50 (over 1.5), the runs were disturbed</span>');
    }
    return lines.join('<br>');
  }

  // ------------------------------------------------------------------ chart (a)

  // SeQTO's figure: every objective, normalized 0-100, against the candidate index;
  // the top-3 Pareto picks as dashed vertical lines, the float model's latency as a
  // horizontal line.
  function objectivesOption(view, opts) {
    opts = opts || {};
    var o = baseOption(view, opts, 'Objectives per candidate',
      'min-max normalized to 0–100 over all candidates (lower is better) · dashed: top-3 Pareto picks');
    var xs = view.rows.map(function (r) { return String(r.cycle.index); });
    var series = view.objectives.map(function (name) {
      var meta = OBJECTIVES[name];
      return {
        id: 'obj:' + name, name: meta.label, type: 'line',
        data: view.rows.map(function (r) { return +r.norm[name].toFixed(4); }),
        symbol: 'circle', symbolSize: 6, showSymbol: true,
        lineStyle: { width: 2.5, color: meta.color }, itemStyle: { color: meta.color },
        emphasis: { focus: 'none' }, z: 3,
      };
    });
    view.top3.forEach(function (p) {
      var color = PARETO_COLORS[p.rank - 1];
      series.push({
        id: 'pareto:' + p.rank, name: 'Pareto #' + p.rank, type: 'line', data: [],
        itemStyle: { color: color }, lineStyle: { color: color, type: 'dashed', width: 2 },
        markLine: {
          symbol: 'none', silent: true, animation: false,
          lineStyle: { color: color, type: 'dashed', width: 2 },
          // Stacked by rank: adjacent picks keep readable labels.
          label: { formatter: '#' + p.rank, position: 'end', distance: 4 + 14 * (p.rank - 1), color: color, fontWeight: 'bold' },
          data: [{ xAxis: String(p.cycle) }],
        },
      });
    });
    var withLatency = view.objectives.indexOf('latency_ms') >= 0 && isNum(view.floatLatency);
    var yMin = 0, yMax = 100;
    if (withLatency) {
      // Far off the candidates' range, the line is pinned just outside 0-100 (labelled
      // as off scale) rather than squashing every curve into a sliver of the axis.
      var fl = view.floatLatencyNorm;
      var offScale = fl > 130 ? ' (off scale, higher)' : fl < -30 ? ' (off scale, lower)' : '';
      fl = Math.max(-30, Math.min(130, fl));
      var tens = +(fl / 10).toFixed(6);  // 120.0000001 is 120 here, not 130
      yMin = Math.min(0, Math.floor(tens) * 10);
      yMax = Math.max(100, Math.ceil(tens) * 10);
      series.push({
        id: 'float-latency', name: 'Float model latency', type: 'line', data: [],
        itemStyle: { color: '#111' }, lineStyle: { color: '#111', type: [8, 4, 2, 4], width: 1.5 },
        markLine: {
          symbol: 'none', silent: true, animation: false,
          lineStyle: { color: '#111', type: [8, 4, 2, 4], width: 1.5 },
          label: { formatter: 'float model: ' + fmt(view.floatLatency, 2) + ' ms' + offScale, position: 'insideStartTop', color: '#111' },
          data: [{ yAxis: +fl.toFixed(4) }],
        },
      });
    }
    var legendNames = series.map(function (s) { return s.name; });
    merge(o, {
      legend: { top: 56, data: legendNames, itemWidth: 26, itemGap: 16, textStyle: { fontSize: 12 } },
      grid: { left: 70, right: 40, top: 128, bottom: 62 },
      xAxis: merge(axisName('Candidate (cycle index = number of groups given back to float)'), {
        type: 'category', data: xs, boundaryGap: false, nameGap: 32,
        axisLabel: { hideOverlap: true },
      }),
      yAxis: merge(axisName('Normalized objective (0–100)'), {
        type: 'value', min: yMin, max: yMax, nameGap: 42, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      series: series,
    });
    o.tooltip = merge(o.tooltip, {
      trigger: 'axis', axisPointer: { type: 'line' },
      formatter: function (params) {
        var list = Array.isArray(params) ? params : [params];
        if (!list.length) return '';
        var row = view.rows[list[0].dataIndex];
        if (!row) return '';
        var norms = view.objectives.map(function (name) {
          return '<span style="color:' + OBJECTIVES[name].color + '">&#9679;</span> ' + OBJECTIVES[name].label +
            ': ' + fmt(row.norm[name], 1) + ' / 100';
        });
        return candidateTooltip(view, row.cycle) + '<br><span style="color:#555">Normalized:</span><br>' +
          norms.join('<br>');
      },
    });
    if (!opts.static && xs.length > 60) {
      o.dataZoom = [{ type: 'inside' }, { type: 'slider', height: 16, bottom: 4 }];
      o.grid.bottom = 80;
    }
    return o;
  }

  // ------------------------------------------------------------------ chart (b)

  var GROUP_SERIES = [
    { key: 'xmodel_sqnr_db', id: 'group:xmodel', name: 'XModel SQNR', color: '#d62728', symbol: 'circle' },
    { key: 'qdq_sqnr_db', id: 'group:qdq', name: 'QDQ SQNR', color: '#1f77b4', symbol: 'rect' },
    { key: 'weight_sqnr_db', id: 'group:weight', name: 'Weight SQNR', color: '#ff7f0e', symbol: 'triangle' },
  ];

  // Per-group errors in execution order, like the SeQTO paper's Figure 2 (in dB here:
  // the report shows what the analysis measured, not a rescaling of it).
  function groupsOption(view, opts) {
    opts = opts || {};
    if (!view.groups) return null;
    var o = baseOption(view, opts, 'Per-group quantization error',
      'SQNR in dB per quantization group, in execution order (higher is better; dips are the damaged groups)');
    var names = view.groups.map(function (g) { return g.name; });
    var series = GROUP_SERIES.map(function (s) {
      return {
        id: s.id, name: s.name, type: 'line', connectNulls: false,
        data: view.groups.map(function (g) { return isNum(g[s.key]) ? +g[s.key].toFixed(4) : null; }),
        symbol: s.symbol, symbolSize: 6, lineStyle: { width: 2, color: s.color }, itemStyle: { color: s.color },
      };
    });
    var many = names.length > 40;
    merge(o, {
      legend: { top: 58, data: GROUP_SERIES.map(function (s) { return s.name; }), textStyle: { fontSize: 12 } },
      grid: { left: 70, right: 40, top: 100, bottom: 120 },
      xAxis: merge(axisName('Quantization group (execution order)'), {
        type: 'category', data: names, nameGap: 100,
        axisLabel: {
          rotate: 40, fontSize: 11, interval: many ? 'auto' : 0, hideOverlap: many,
          formatter: function (v) { return v.length > 22 ? v.slice(0, 10) + '…' + v.slice(-10) : v; },
        },
      }),
      yAxis: merge(axisName('SQNR (dB)'), {
        type: 'value', scale: true, nameGap: 42, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      series: series,
    });
    o.tooltip = merge(o.tooltip, {
      trigger: 'axis',
      formatter: function (params) {
        var list = Array.isArray(params) ? params : [params];
        if (!list.length) return '';
        var g = view.groups[list[0].dataIndex];
        if (!g) return '';
        var at = view.excludedAt[g.name];
        return [
          '<b>' + escapeHtml(g.name) + '</b> (' + escapeHtml(g.op_type) + ', #' + g.order + ' in execution order)',
          'XModel SQNR: ' + fmt(g.xmodel_sqnr_db, 2) + ' dB',
          'QDQ SQNR: ' + fmt(g.qdq_sqnr_db, 2) + ' dB',
          'Weight SQNR: ' + (isNum(g.weight_sqnr_db) ? fmt(g.weight_sqnr_db, 2) + ' dB' : '— (no weight)'),
          'SeQTO score: ' + fmt(g.seqto_score, 3),
          at === undefined ? '<span style="color:#555">quantized in every candidate</span>'
            : '<span style="color:#555">back to float from candidate ' + at + ' on</span>',
        ].join('<br>');
      },
    });
    if (!opts.static && many) {
      o.dataZoom = [{ type: 'inside' }, { type: 'slider', height: 16, bottom: 4 }];
    }
    return o;
  }

  // ------------------------------------------------------------------ chart (c)

  // Accuracy loss against size, colored by latency; the Pareto front ringed and the
  // top 3 labelled. Point value: [size in unit, accuracy loss, latency, cycle index].
  function tradeoffOption(view, opts) {
    opts = opts || {};
    var u = view.unit;
    var o = baseOption(view, opts, 'Accuracy loss vs. model size',
      'color = latency (p50) · ringed = Pareto front · labelled = top-3 picks · triangle = float model');
    function point(c) {
      return [+(c.size_bytes / u.div).toFixed(6), c.metrics.accuracy_loss, latencyOf(c.latency_ms), c.index];
    }
    var lats = view.rows.map(function (r) { return latencyOf(r.cycle.latency_ms); });
    var latMin = Math.min.apply(null, lats), latMax = Math.max.apply(null, lats);
    if (!(latMax > latMin)) latMax = latMin + 1e-6;
    var front = view.pareto.filter(function (p) { return view.byIndex[p.cycle]; });
    var series = [
      {
        id: 'candidates', name: 'Candidates', type: 'scatter', z: 2,
        data: view.rows.map(function (r) { return point(r.cycle); }),
        // Gray in the legend: the latency color scale paints the points themselves.
        symbolSize: 11, itemStyle: { color: '#9e9e9e', borderColor: '#333', borderWidth: 0.6, opacity: 0.95 },
      },
      {
        id: 'front', name: 'Pareto front', type: 'scatter', z: 3,
        data: front.map(function (p) { return point(view.byIndex[p.cycle]); }),
        symbol: 'circle', symbolSize: 19,
        itemStyle: { color: 'rgba(0,0,0,0)', borderColor: '#222', borderWidth: 1.4 },
      },
      {
        id: 'top3', name: 'Top-3 picks', type: 'scatter', z: 4,
        data: view.top3.map(function (p) { return point(view.byIndex[p.cycle]).concat([p.rank]); }),
        symbol: 'circle', symbolSize: 27,
        itemStyle: { color: 'rgba(0,0,0,0)', borderColor: '#4a148c', borderWidth: 2.6 },
        label: {
          show: true, position: 'top', distance: 4, fontWeight: 'bold', color: '#4a148c', fontSize: 12,
          formatter: function (p) { return '#' + p.value[4]; },
        },
      },
    ];
    var b = view.report.baseline;
    var floatLoss = 0;  // the float model is the reference: no accuracy lost
    series.push({
      id: 'float', name: 'Float model', type: 'scatter', z: 2,
      data: [[+(b.size_bytes / u.div).toFixed(6), floatLoss, latencyOf(b.latency_ms), -1]],
      symbol: 'triangle', symbolSize: 14, itemStyle: { color: '#555', borderColor: '#111', borderWidth: 0.8 },
      label: { show: true, position: 'left', formatter: 'float', color: '#333', fontSize: 11 },
    });
    merge(o, {
      legend: { top: 58, data: ['Candidates', 'Pareto front', 'Top-3 picks', 'Float model'], textStyle: { fontSize: 12 } },
      grid: { left: 72, right: 120, top: 100, bottom: 62 },
      xAxis: merge(axisName('Model size (' + u.name + ')'), {
        type: 'value', scale: true, nameGap: 32, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      yAxis: merge(axisName('Accuracy loss (points)'), {
        type: 'value', scale: true, nameGap: 46, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      visualMap: {
        type: 'continuous', dimension: 2, seriesIndex: 0, min: latMin, max: latMax, precision: 2,
        calculable: !opts.static, right: 24, top: 150, itemHeight: 200, itemWidth: 14,
        // Interactive: the drag handles show their values; static: the ends are labelled.
        text: opts.static ? [fmt(latMax, 2) + ' ms', fmt(latMin, 2) + ' ms'] : null, textGap: 8,
        textStyle: { fontSize: 11, color: '#333' },
        inRange: { color: LATENCY_COLORS },
        formatter: function (v) { return fmt(v, 2) + ' ms'; },
      },
      series: series,
    });
    // The latency bar needs a title of its own (the visualMap has none).
    o.graphic = [{
      type: 'text', right: 10, top: 104,
      style: { text: 'Latency (p50)', fontSize: 12, fontWeight: 'bold', fill: '#333', fontFamily: o.textStyle.fontFamily },
    }];
    o.tooltip = merge(o.tooltip, {
      trigger: 'item',
      formatter: function (p) {
        var idx = p.value[3];
        if (idx === -1) {
          return '<b>Float model</b> (reference, nothing quantized)<br>Size: ' + fmtSize(b.size_bytes, u) +
            '<br>Latency: ' + fmt(latencyOf(b.latency_ms), 3) + ' ms p50 (mean ' + fmt(b.latency_ms.mean, 3) + ')';
        }
        var c = view.byIndex[idx];
        return c ? candidateTooltip(view, c) : '';
      },
    });
    return o;
  }

  // ------------------------------------------------------------------ chart (d)

  var SLOWER_COLOR = '#d62728';

  // The next of 1, 2, 2.5, 5 x a power of ten at or above v (a round axis end).
  function niceCeil(v) {
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v - 1e-12) return steps[i] * p;
    return 10 * p;
  }

  // Each candidate's latency (p50) against the float and the fully quantized model and
  // against its bound; candidates slower than the float model in red.
  function latencyOption(view, opts) {
    opts = opts || {};
    var o = baseOption(view, opts, 'Latency per candidate',
      'p50 · red = slower than the float model · bound = int8 + (float − int8) × MAC share of the float groups + 0.1 × float');
    var xs = view.rows.map(function (r) { return String(r.cycle.index); });
    var series = [{
      id: 'latency', name: 'Candidate latency', type: 'bar', barMaxWidth: 28, z: 2,
      data: view.rows.map(function (r) {
        var ref = view.latencyRefs[r.cycle.index];
        return {
          value: +latencyOf(r.cycle.latency_ms).toFixed(6),
          itemStyle: { color: ref.slowerThanFloat ? SLOWER_COLOR : '#4e79a7' },
        };
      }),
      itemStyle: { color: '#4e79a7' },
    }, {
      id: 'slower', name: 'Slower than float', type: 'bar', data: [], itemStyle: { color: SLOWER_COLOR },
    }, {
      id: 'bound', name: 'Bound', type: 'line', z: 3, connectNulls: false, symbol: 'diamond', symbolSize: 8,
      data: view.rows.map(function (r) {
        var b = view.latencyRefs[r.cycle.index].bound;
        return isNum(b) ? +b.toFixed(6) : null;
      }),
      lineStyle: { color: '#f28e2b', width: 2, type: 'dashed' }, itemStyle: { color: '#f28e2b' },
    }];
    function refLine(id, name, value, color, type) {
      series.push({
        id: id, name: name, type: 'line', data: [], itemStyle: { color: color }, lineStyle: { color: color, type: type, width: 1.5 },
        markLine: {
          symbol: 'none', silent: true, animation: false, lineStyle: { color: color, type: type, width: 1.5 },
          label: { formatter: name + ': ' + fmt(value, 3) + ' ms', position: 'insideEndTop', color: color },
          data: [{ yAxis: +value.toFixed(6) }],
        },
      });
    }
    // The axis reaches the reference lines too (ECharts scales to the series only).
    var top = 0;
    series.forEach(function (s) {
      s.data.forEach(function (d) { var v = d && typeof d === 'object' ? d.value : d; if (isNum(v) && v > top) top = v; });
    });
    [view.floatLatency, view.int8Latency].forEach(function (v) { if (isNum(v) && v > top) top = v; });
    if (isNum(view.floatLatency)) refLine('float-ref', 'Float model', view.floatLatency, '#111', [8, 4, 2, 4]);
    if (isNum(view.int8Latency)) refLine('int8-ref', 'Fully quantized', view.int8Latency, '#59a14f', 'dashed');
    merge(o, {
      legend: { top: 56, data: series.map(function (s) { return s.name; }), textStyle: { fontSize: 12 } },
      grid: { left: 70, right: 40, top: 110, bottom: 62 },
      xAxis: merge(axisName('Candidate (cycle index)'), { type: 'category', data: xs, nameGap: 32, axisLabel: { hideOverlap: true } }),
      yAxis: merge(axisName('Latency p50 (ms)'), {
        type: 'value', min: 0, max: top > 0 ? niceCeil(1.08 * top) : null, nameGap: 46,
        splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      series: series,
    });
    o.tooltip = merge(o.tooltip, {
      trigger: 'axis', axisPointer: { type: 'shadow' },
      formatter: function (params) {
        var list = Array.isArray(params) ? params : [params];
        var row = list.length ? view.rows[list[0].dataIndex] : null;
        return row ? candidateTooltip(view, row.cycle) : '';
      },
    });
    if (!opts.static && xs.length > 60) {
      o.dataZoom = [{ type: 'inside' }, { type: 'slider', height: 16, bottom: 4 }];
      o.grid.bottom = 80;
    }
    return o;
  }

  // ------------------------------------------------------------------ several runs

  // Runs side by side: accuracy loss against size as a percentage of each run's float
  // model (comparable across models); the top 3 of each run ringed in its color. The
  // candidates and the top 3 of a run share a legend name, so one click hides both.
  function compareTradeoffOption(runs, opts) {
    opts = opts || {};
    var o = baseOption(null, opts, 'Accuracy loss vs. size, all runs',
      'size as % of each run’s float model · large rings = each run’s top-3 picks');
    var series = [];
    runs.forEach(function (run, i) {
      var color = RUN_COLORS[i % RUN_COLORS.length];
      var fsz = run.view.report.baseline.size_bytes;
      function point(c) {
        return [+(100 * c.size_bytes / fsz).toFixed(4), c.metrics.accuracy_loss, i, c.index];
      }
      series.push({
        id: 'run:' + i, name: run.name, type: 'scatter', symbolSize: 9,
        data: run.view.rows.map(function (r) { return point(r.cycle); }),
        itemStyle: { color: color, opacity: 0.8 },
      });
      series.push({
        id: 'run-top3:' + i, name: run.name, type: 'scatter', symbolSize: 20, z: 3,
        data: run.view.top3.map(function (p) { return point(run.view.byIndex[p.cycle]).concat([p.rank]); }),
        itemStyle: { color: 'rgba(0,0,0,0)', borderColor: color, borderWidth: 2.4 },
        label: {
          show: true, position: 'right', fontSize: 11, color: color, fontWeight: 'bold',
          formatter: function (p) { return '#' + p.value[4]; },
        },
      });
    });
    merge(o, {
      legend: { top: 58, type: opts.static ? 'plain' : 'scroll', data: runs.map(function (r) { return r.name; }) },
      grid: { left: 72, right: 40, top: 100, bottom: 62 },
      xAxis: merge(axisName('Model size (% of the float model)'), {
        type: 'value', scale: true, nameGap: 32, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      yAxis: merge(axisName('Accuracy loss (points)'), {
        type: 'value', scale: true, nameGap: 46, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      series: series,
    });
    o.tooltip = merge(o.tooltip, {
      trigger: 'item',
      formatter: function (p) {
        var run = runs[p.value[2]];
        var c = run && run.view.byIndex[p.value[3]];
        return c ? '<b>' + escapeHtml(run.name) + '</b><br>' + candidateTooltip(run.view, c) : '';
      },
    });
    return o;
  }

  // Accuracy loss per cycle, one line per run: how fast each setting (ranker, mode,
  // ...) wins accuracy back as groups go back to float.
  function compareCyclesOption(runs, opts) {
    opts = opts || {};
    var o = baseOption(null, opts, 'Accuracy loss per cycle, all runs',
      'each cycle gives one more group back to float · diamonds = each run’s Pareto #1');
    var series = runs.map(function (run, i) {
      var color = RUN_COLORS[i % RUN_COLORS.length];
      var best = run.view.top3[0];
      return {
        id: 'run-cycles:' + i, name: run.name, type: 'line', symbolSize: 5, showSymbol: true,
        data: run.view.rows.map(function (r) { return [r.cycle.index, r.cycle.metrics.accuracy_loss, i]; }),
        lineStyle: { width: 2, color: color }, itemStyle: { color: color },
        markPoint: best ? {
          symbol: 'diamond', symbolSize: 16, silent: true, itemStyle: { color: color, borderColor: '#111' },
          label: { show: false },
          data: [{ coord: [best.cycle, run.view.byIndex[best.cycle].metrics.accuracy_loss] }],
        } : undefined,
      };
    });
    merge(o, {
      legend: { top: 58, type: opts.static ? 'plain' : 'scroll', data: runs.map(function (r) { return r.name; }) },
      grid: { left: 72, right: 40, top: 100, bottom: 62 },
      xAxis: merge(axisName('Candidate (cycle index)'), {
        type: 'value', minInterval: 1, min: 0, max: 'dataMax', nameGap: 32, splitLine: { show: false },
      }),
      yAxis: merge(axisName('Accuracy loss (points)'), {
        type: 'value', scale: true, nameGap: 46, splitLine: { lineStyle: { color: '#e6e6e6' } },
      }),
      series: series,
    });
    o.tooltip = merge(o.tooltip, {
      trigger: 'item',
      formatter: function (p) {
        var run = runs[p.value[2]];
        var c = run && run.view.byIndex[p.value[0]];
        return c ? '<b>' + escapeHtml(run.name) + '</b><br>' + candidateTooltip(run.view, c) : '';
      },
    });
    return o;
  }

  return {
    OBJECTIVES: OBJECTIVES,
    prepareRun: prepareRun,
    objectivesOption: objectivesOption,
    groupsOption: groupsOption,
    tradeoffOption: tradeoffOption,
    latencyOption: latencyOption,
    compareTradeoffOption: compareTradeoffOption,
    compareCyclesOption: compareCyclesOption,
    latencyOf: latencyOf,
    unstable: unstable,
    escapeHtml: escapeHtml,
    fmt: fmt,
    fmtSize: fmtSize,
    sizeUnit: sizeUnit,
    basename: basename,
  };
});
