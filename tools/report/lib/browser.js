// The page's own script (inlined into report.html / index.html after echarts.min.js
// and charts.js): builds the charts, the summary cards and the sortable tables from
// the JSON embedded in the page. Everything from report.json reaches the DOM through
// textContent or SeqtoCharts.escapeHtml, never as raw HTML.
(function () {
  'use strict';
  var C = window.SeqtoCharts;
  var DATA = JSON.parse(document.getElementById('seqto-data').textContent);
  var charts = {};

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'className') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }

  function mountChart(id, option) {
    var box = document.getElementById(id);
    if (!box) return null;
    if (!option) return null;
    var chart = echarts.init(box, null, { renderer: 'canvas' });
    chart.setOption(option);
    charts[id.replace(/^chart-/, '')] = chart;
    return chart;
  }

  // ---------------------------------------------------------------- sortable table

  // columns: [{key, label, title, num, cell(row) -> Node|string, value(row) -> sort key}]
  function sortableTable(container, columns, rows, rowClass) {
    var table = el('table', { className: 'data' });
    var thead = el('thead');
    var tbody = el('tbody');
    var headRow = el('tr');
    var state = { key: null, dir: 1 };
    columns.forEach(function (col) {
      var th = el('th', { scope: 'col', 'data-key': col.key, tabindex: '0', title: col.title || 'Sort by ' + col.label },
        [col.label]);
      if (col.num) th.className = 'num';
      function sort() {
        state.dir = state.key === col.key ? -state.dir : 1;
        state.key = col.key;
        render();
        Array.prototype.forEach.call(headRow.children, function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', state.dir > 0 ? 'ascending' : 'descending');
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sort(); } });
      headRow.appendChild(th);
    });
    thead.appendChild(headRow);
    function render() {
      var sorted = rows.slice();
      if (state.key) {
        var col = columns.filter(function (c) { return c.key === state.key; })[0];
        sorted.sort(function (a, b) {
          var va = col.value(a), vb = col.value(b);
          // Missing values sort last in either direction.
          var ma = va === null || va === undefined || (typeof va === 'number' && !isFinite(va));
          var mb = vb === null || vb === undefined || (typeof vb === 'number' && !isFinite(vb));
          if (ma || mb) return ma === mb ? 0 : ma ? 1 : -1;
          if (va < vb) return -state.dir;
          if (va > vb) return state.dir;
          return 0;
        });
      }
      tbody.textContent = '';
      sorted.forEach(function (r) {
        var tr = el('tr', { 'data-row': String(r.id) });
        var cls = rowClass && rowClass(r);
        if (cls) tr.className = cls;
        columns.forEach(function (col) {
          var v = col.cell(r);
          var td = el('td', col.num ? { className: 'num' } : {}, [typeof v === 'string' ? v : v]);
          tr.appendChild(td);
        });
        tbody.appendChild(tr);
      });
    }
    render();
    table.appendChild(thead);
    table.appendChild(tbody);
    container.appendChild(table);
    return table;
  }

  function flashRow(id) {
    var tr = document.querySelector('tr[data-row="' + id + '"]');
    if (!tr) return;
    tr.scrollIntoView({ block: 'center', behavior: 'smooth' });
    tr.classList.remove('flash');
    void tr.offsetWidth;  // restart the animation
    tr.classList.add('flash');
  }

  function fileLink(href, text) {
    return el('a', { href: href, title: 'Open ' + href }, [text || C.basename(href)]);
  }

  function card(title, lines, extraClass) {
    var c = el('div', { className: 'card' + (extraClass ? ' ' + extraClass : '') }, [el('h3', { text: title })]);
    lines.forEach(function (l) { if (l) c.appendChild(l); });
    return c;
  }

  function kv(label, value, strong) {
    return el('div', { className: 'kv' }, [el('span', { className: 'k', text: label }),
      el(strong ? 'strong' : 'span', { className: 'v', text: value })]);
  }

  // The unstable-latency mark (p95 over 1.5 x p50), or nothing.
  function unstableMark(lat) {
    if (!C.unstable(lat)) return null;
    return el('span', { className: 'unstable-mark', title: 'Unstable latency: p95 is ' + C.fmt(lat.p95 / lat.p50, 2) +
      ' × p50 (over 1.5); the runs were disturbed, compare with care', text: ' ⚠' });
  }

  // A latency cell: the median, marked when unstable, red when slower than float.
  function latencyCell(lat, slower) {
    var mark = unstableMark(lat);
    var attrs = slower ? { className: 'slower', title: 'Slower than the float model' } : {};
    return el('span', attrs, mark ? [C.fmt(C.latencyOf(lat), 3), mark] : [C.fmt(C.latencyOf(lat), 3)]);
  }

  function latencyKv(lat) {
    return el('div', { className: 'kv' }, [el('span', { className: 'k', text: 'Latency (p50)' }),
      el('span', { className: 'v' }, [latencyCell(lat), ' ms'])]);
  }

  // ---------------------------------------------------------------- one run

  function runPage() {
    var report = DATA.report;
    var view = C.prepareRun(report);
    var u = view.unit;
    var b = report.baseline;
    var pct = function (bytes) { return b.size_bytes > 0 ? (100 * bytes / b.size_bytes).toFixed(1) + ' %' : '—'; };

    // Summary cards: the reference, the fully quantized model, the top 3.
    var cards = document.getElementById('cards');
    var floatLines = [kv('Size', C.fmtSize(b.size_bytes, u), true),
      latencyKv(b.latency_ms)];
    if (b.accuracy) {
      Object.keys(b.accuracy).forEach(function (k) {
        floatLines.push(kv('Accuracy ' + k, C.fmt(b.accuracy[k], 2) + ' %'));  // percent, as seqto eval
      });
    }
    cards.appendChild(card('Float model', floatLines, 'reference'));
    var full = view.rows.filter(function (r) { return r.cycle.excluded.length === 0; })[0];
    if (full) {
      var fc = full.cycle;
      cards.appendChild(card('Fully quantized (candidate ' + fc.index + ')', [
        kv('Accuracy loss', C.fmt(fc.metrics.accuracy_loss, 2) + ' pts', true),
        kv('Size', C.fmtSize(fc.size_bytes, u) + ' (' + pct(fc.size_bytes) + ')'),
        latencyKv(fc.latency_ms),
      ]));
    }
    view.top3.forEach(function (p) {
      var c = view.byIndex[p.cycle];
      var ex = c.excluded.length;
      var lines = [
        kv('Accuracy loss', C.fmt(c.metrics.accuracy_loss, 2) + ' pts', true),
        kv('Size', C.fmtSize(c.size_bytes, u) + ' (' + pct(c.size_bytes) + ')'),
        latencyKv(c.latency_ms),
        kv('Float groups', String(ex)),
        ex ? el('div', { className: 'names', title: c.excluded.join('\n'), text: c.excluded.join(', ') }) : null,
        el('div', { className: 'kv' }, [fileLink(c.model_file)]),
      ];
      cards.appendChild(card('Pareto #' + p.rank + ' · candidate ' + c.index, lines, 'pick pick' + p.rank));
    });

    // Charts.
    mountChart('chart-objectives', C.objectivesOption(view));
    if (view.groups) {
      mountChart('chart-groups', C.groupsOption(view));
    } else {
      var box = document.getElementById('chart-groups');
      box.className = 'note';
      box.textContent = 'No per-group analysis in report.json ("groups" is absent), so this chart is omitted.';
    }
    var trade = mountChart('chart-tradeoff', C.tradeoffOption(view));
    if (trade) trade.on('click', function (p) { if (p.value && p.value[3] >= 0) flashRow(p.value[3]); });
    var latency = mountChart('chart-latency', C.latencyOption(view));
    if (latency) latency.on('click', function (p) { flashRow(view.rows[p.dataIndex].cycle.index); });
    if (charts.objectives) charts.objectives.on('click', function (p) { flashRow(view.rows[p.dataIndex].cycle.index); });

    // Candidates table.
    var rows = view.rows.map(function (r) { var c = r.cycle; return { id: c.index, c: c, rank: r.rank }; });
    var m = function (k) { return function (r) { return r.c.metrics[k]; }; };
    var num = function (get, d) { return function (r) { return C.fmt(get(r), d); }; };
    var ref = function (r) { return view.latencyRefs[r.c.index]; };
    sortableTable(document.getElementById('candidates'), [
      { key: 'index', label: 'Candidate', num: true, value: function (r) { return r.c.index; },
        cell: function (r) { return String(r.c.index); } },
      { key: 'excluded', label: 'Float groups', num: true, title: 'Groups given back to float (hover a cell for the list)',
        value: function (r) { return r.c.excluded.length; },
        cell: function (r) { return el('span', { title: r.c.excluded.join('\n') || 'none' }, [String(r.c.excluded.length)]); } },
      { key: 'newest', label: 'Newest float group', value: function (r) { return r.c.excluded[r.c.excluded.length - 1] || ''; },
        cell: function (r) { return r.c.excluded[r.c.excluded.length - 1] || '—'; } },
      { key: 'accuracy_loss', label: 'Acc. loss (pts)', num: true, value: m('accuracy_loss'), cell: num(m('accuracy_loss'), 2) },
      { key: 'top1_disagreement', label: 'Top-1 disagr. (%)', num: true, value: m('top1_disagreement'), cell: num(m('top1_disagreement'), 2) },
      { key: 'top5_overlap', label: 'Top-5 overlap', num: true, value: m('top5_overlap'), cell: num(m('top5_overlap'), 3) },
      { key: 'kendall_tau', label: 'Kendall τ', num: true, value: m('kendall_tau'), cell: num(m('kendall_tau'), 3) },
      { key: 'sqnr_db', label: 'Output SQNR (dB)', num: true, value: m('sqnr_db'), cell: num(m('sqnr_db'), 1) },
      { key: 'kl_divergence', label: 'KL (nats)', num: true, value: m('kl_divergence'), cell: num(m('kl_divergence'), 4) },
      { key: 'size_bytes', label: 'Size (' + u.name + ', % of float)', num: true, value: function (r) { return r.c.size_bytes; },
        cell: function (r) { return (r.c.size_bytes / u.div).toFixed(u.digits) + ' (' + pct(r.c.size_bytes) + ')'; } },
      { key: 'latency', label: 'Latency p50 (ms)', num: true, title: 'Median of the timed runs; ⚠: p95 over 1.5 × p50',
        value: function (r) { return C.latencyOf(r.c.latency_ms); },
        cell: function (r) { return latencyCell(r.c.latency_ms, ref(r).slowerThanFloat); } },
      { key: 'vs_float', label: '× float', num: true, title: 'Latency over the float model’s; red: slower than float',
        value: function (r) { return ref(r).vsFloat; }, cell: function (r) { return C.fmt(ref(r).vsFloat, 2); } },
      { key: 'vs_int8', label: '× int8', num: true, title: 'Latency over the fully quantized candidate’s (candidate 0)',
        value: function (r) { return ref(r).vsInt8; }, cell: function (r) { return C.fmt(ref(r).vsInt8, 2); } },
      { key: 'bound', label: 'Bound (ms)', num: true,
        title: 'int8 + (float − int8) × MAC share of the float groups + 0.1 × float',
        value: function (r) { return ref(r).bound; }, cell: function (r) { return C.fmt(ref(r).bound, 3); } },
      { key: 'vs_bound', label: '× bound', num: true, title: 'Latency over the bound (over 1: slower than it should be)',
        value: function (r) { return ref(r).vsBound; }, cell: function (r) { return C.fmt(ref(r).vsBound, 2); } },
      { key: 'mean', label: 'Mean (ms)', num: true, value: function (r) { return r.c.latency_ms.mean; },
        cell: function (r) { return C.fmt(r.c.latency_ms.mean, 3) + ' ± ' + C.fmt(r.c.latency_ms.stddev, 3); } },
      { key: 'p95', label: 'p95 (ms)', num: true, value: function (r) { return r.c.latency_ms.p95; },
        cell: function (r) { return C.fmt(r.c.latency_ms.p95, 3); } },
      { key: 'pareto', label: 'Pareto', num: true, title: 'Rank on the Pareto front (1 = best); empty: dominated',
        value: function (r) { return r.rank; }, cell: function (r) { return r.rank ? '#' + r.rank : ''; } },
      { key: 'model', label: 'Model file', value: function (r) { return r.c.model_file; },
        cell: function (r) { return fileLink(r.c.model_file); } },
    ], rows, function (r) { return r.rank && r.rank <= 3 ? 'pick pick' + r.rank : r.rank ? 'front' : ''; });

    // Settings.
    var st = el('table', { className: 'settings' });
    var settings = report.settings || {};
    Object.keys(settings).forEach(function (k) {
      var v = settings[k];
      st.appendChild(el('tr', {}, [el('th', { scope: 'row', text: k }),
        el('td', { text: typeof v === 'string' ? v : JSON.stringify(v) })]));
    });
    st.appendChild(el('tr', {}, [el('th', { scope: 'row', text: 'model' }), el('td', { text: report.model })]));
    document.getElementById('settings').appendChild(st);
    window.seqtoReport = { charts: charts, view: view };
  }

  // ---------------------------------------------------------------- several runs

  function indexPage() {
    var runs = DATA.runs.map(function (r) { return { name: r.name, href: r.href, view: C.prepareRun(r.report) }; });
    mountChart('chart-compare-tradeoff', C.compareTradeoffOption(runs));
    mountChart('chart-compare-cycles', C.compareCyclesOption(runs));
    var rows = runs.map(function (run, i) {
      var best = run.view.top3[0];
      return { id: i, run: run, best: best ? run.view.byIndex[best.cycle] : null };
    });
    var s = function (k) { return function (r) { var v = (r.run.view.report.settings || {})[k]; return v === undefined ? '—' : String(v); }; };
    var bestM = function (get, d) {
      return { value: function (r) { return r.best ? get(r.best, r) : null; },
        cell: function (r) { return r.best ? C.fmt(get(r.best, r), d) : '—'; } };
    };
    var col = function (key, label, extra) { var c = { key: key, label: label }; Object.keys(extra).forEach(function (k) { c[k] = extra[k]; }); return c; };
    sortableTable(document.getElementById('runs'), [
      col('run', 'Run', { value: function (r) { return r.run.name; }, cell: function (r) { return fileLink(r.run.href, r.run.name); } }),
      col('model', 'Model', { value: function (r) { return r.run.view.modelName; }, cell: function (r) { return r.run.view.modelName; } }),
      col('mode', 'Mode', { value: s('mode'), cell: s('mode') }),
      col('ranker', 'Ranker', { value: s('ranker'), cell: s('ranker') }),
      col('runner', 'Runner', { value: s('runner'), cell: s('runner') }),
      col('cycles', 'Candidates', { num: true, value: function (r) { return r.run.view.rows.length; },
        cell: function (r) { return String(r.run.view.rows.length); } }),
      col('best', 'Pareto #1', { num: true, value: function (r) { return r.best ? r.best.index : null; },
        cell: function (r) { return r.best ? 'candidate ' + r.best.index + ' (' + r.best.excluded.length + ' float)' : '—'; } }),
      col('accuracy_loss', '#1 acc. loss (pts)', merge1({ num: true }, bestM(function (c) { return c.metrics.accuracy_loss; }, 2))),
      col('size_pct', '#1 size (% of float)', merge1({ num: true }, bestM(function (c, r) {
        return 100 * c.size_bytes / r.run.view.report.baseline.size_bytes; }, 1))),
      col('latency', '#1 latency p50 (ms)', merge1({ num: true }, bestM(function (c) { return C.latencyOf(c.latency_ms); }, 3))),
      col('float_latency', 'Float latency (ms)', { num: true, value: function (r) { return r.run.view.floatLatency; },
        cell: function (r) { return C.fmt(r.run.view.floatLatency, 3); } }),
    ], rows);
    window.seqtoReport = { charts: charts, runs: runs };
  }

  function merge1(a, b) { Object.keys(b).forEach(function (k) { a[k] = b[k]; }); return a; }

  if (DATA.kind === 'index') indexPage();
  else runPage();
  window.addEventListener('resize', function () {
    Object.keys(charts).forEach(function (k) { charts[k].resize(); });
  });
})();
