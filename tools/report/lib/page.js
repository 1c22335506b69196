// The HTML pages: one self-contained file each. ECharts (echarts.min.js from npm),
// the chart code, the page script, the style and the data are all inlined; a
// Content-Security-Policy that allows no source at all makes sure the page never
// loads anything from anywhere (file:// or network), so it opens offline.
'use strict';

const fs = require('fs');
const path = require('path');
const C = require('./charts');

const ECHARTS_DIR = path.dirname(require.resolve('echarts/package.json'));
const ECHARTS_VERSION = require('echarts/package.json').version;

let cachedAssets = null;
function assets() {
  if (cachedAssets) return cachedAssets;
  const read = (f) => fs.readFileSync(f, 'utf8');
  cachedAssets = {
    echarts: read(path.join(ECHARTS_DIR, 'dist', 'echarts.min.js')),
    charts: read(path.join(__dirname, 'charts.js')),
    browser: read(path.join(__dirname, 'browser.js')),
    css: read(path.join(__dirname, 'page.css')),
  };
  for (const [name, text] of Object.entries(cachedAssets)) {
    // A literal "</script" or "</style" would end the inline element early.
    if (/<\/(script|style)/i.test(text)) throw new Error(`internal: ${name} contains a closing </script> or </style> tag`);
  }
  return cachedAssets;
}

// JSON that is safe inside <script type="application/json">: no "<" at all.
function scriptJson(value) {
  return JSON.stringify(value).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

const esc = C.escapeHtml;

function shell({ title, body, data }) {
  const a = assets();
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; font-src 'none'; connect-src 'none'">
<meta name="generator" content="seqto report">
<title>${esc(title)}</title>
<style>
${a.css}
</style>
</head>
<body>
<main>
${body}
</main>
<script type="application/json" id="seqto-data">${scriptJson(data)}</script>
<!-- Apache ECharts ${esc(ECHARTS_VERSION)} (Apache License 2.0), bundled from npm -->
<script>
${a.echarts}
</script>
<script>
${a.charts}
</script>
<script>
${a.browser}
</script>
</body>
</html>
`;
}

function chartSection(id, caption) {
  return `<section class="chart">
<div class="chart-box" id="chart-${id}" role="img" aria-label="${esc(caption.replace(/<[^>]+>/g, ''))}"></div>
<p class="caption">${caption}</p>
</section>`;
}

function figureLinks(figures) {
  if (!figures.length) return '';
  return ' · static figures: ' + figures.map((f) => `<a href="${esc(f)}">${esc(path.basename(f))}</a>`).join(', ');
}

// The tuner's one-line warning that the machine looked busy while it measured
// latencies (report.json's machine_busy), as a banner; nothing when it did not.
// The recipes stage (report.recipes): the accuracy-recovery techniques the full
// quantization was tried with, before the sweep, and the one the sweep built on.
function recipesSection(report) {
  const recipes = Array.isArray(report.recipes) ? report.recipes : [];
  const chosen = report.recipe && report.recipe.name;
  const techniques = report.recipe && Array.isArray(report.recipe.techniques) ? report.recipe.techniques : [];
  if (!recipes.length && !techniques.length) return '';
  const num = (v, d) => (typeof v === 'number' && isFinite(v) ? v.toFixed(d) : '—');
  const rows = recipes.map((r) => {
    const m = r.metrics || {};
    const lat = r.latency_ms || {};
    const mark = r.name === chosen ? ' class="pick pick1"' : '';
    return `<tr${mark}><td>${esc(r.name)}${r.name === chosen ? ' (chosen)' : ''}</td>` +
      `<td class="num">${num(m.accuracy_loss, 2)}</td><td class="num">${num(m.top1_disagreement, 2)}</td>` +
      `<td class="num">${num(m.sqnr_db, 1)}</td><td class="num">${num(r.size_bytes / 1e6, 3)}</td>` +
      `<td class="num">${num(lat.p50, 3)}</td><td class="num">${num(r.seconds, 1)}</td></tr>`;
  });
  const table = recipes.length ? `<div class="table-wrap"><table class="data"><thead><tr><th>Recipe</th>` +
    `<th class="num">Acc. loss (pts)</th><th class="num">Top-1 disagr. (%)</th><th class="num">Output SQNR (dB)</th>` +
    `<th class="num">Size (MB)</th><th class="num">Latency p50 (ms)</th><th class="num">Time (s)</th></tr></thead>` +
    `<tbody>${rows.join('')}</tbody></table></div>` : '';
  // plan_int16_activations: the plan stage again, for the groups the sweep gives
  // 16-bit activations (search.fallback int16_activations).
  const stageName = (s) => (s === 'plan_int16_activations' ? 'plan stage, for 16-bit-activation groups' : `${s || ''} stage`);
  const used = techniques.map((t) => `<li><b>${esc(t.name)}</b> (${esc(stageName(t.stage))}): ` +
    `<code>${esc(JSON.stringify(t.result || {}))}</code></li>`).join('');
  return `<h2>Recipes</h2>
<p class="caption">Before the sweep, the full quantization was measured under each recipe (a set of accuracy-recovery techniques) on the ranking samples, against the float model; the sweep below starts from the chosen one${chosen ? ` (<b>${esc(chosen)}</b>)` : ''}. What its techniques did:</p>
${used ? `<ul>${used}</ul>` : ''}${table}`;
}

function busyWarning(report) {
  const busy = report.machine_busy;
  if (!busy || typeof busy.warning !== 'string') return '';
  return `<p class="warning" id="busy-warning" role="alert">&#9888; ${esc(busy.warning)}</p>`;
}

// report.html of one run. runName: the run folder's name; figures: relative paths.
function runPage(report, { runName, figures, generatedAt }) {
  const view = C.prepareRun(report);
  const s = report.settings || {};
  const chipKeys = ['mode', 'per_channel', 'activation_type', 'weight_type', 'calibration', 'ranker', 'strategy',
    'runner', 'threshold'];
  const chips = chipKeys.filter((k) => s[k] !== undefined && s[k] !== null && typeof s[k] !== 'object')
    .map((k) => `<span class="chip">${esc(k.replace(/_/g, ' '))}: <b>${esc(String(s[k]))}</b></span>`);
  chips.push(`<span class="chip">objectives: <b>${esc(view.objectives.join(', '))}</b></span>`);
  const groupsNote = view.groups ? `${view.groups.length} quantization groups · ` : '';
  const body = `<header class="top">
<h1><span class="tool">seqto</span> report · ${esc(view.modelName)}</h1>
<p class="meta">Model <code>${esc(report.model)}</code> · run <code>${esc(runName)}</code></p>
<p class="meta">${view.rows.length} candidates · ${groupsNote}${report.pareto.length} on the Pareto front · generated ${esc(generatedAt)}</p>
<div class="chips">${chips.join('')}</div>
</header>
${busyWarning(report)}
<h2>Summary</h2>
<div class="cards" id="cards"></div>
<h2>Objectives</h2>
${chartSection('objectives', 'Each objective min-max normalized to 0–100 over all candidates (lower is better), against the candidate index: candidate <i>k</i> gives the first <i>k</i> ranked groups back to float. Dashed vertical lines: the top-3 Pareto picks; dash-dot line: the float model’s latency on the latency scale. Hover for a candidate’s metrics, click to find it in the table.')}
<h2>Per-group errors</h2>
${chartSection('groups', 'Quantization error of each group in execution order (as in the SeQTO paper’s Figure 2): XModel SQNR compares a tensor in the quantized model with the float model, QDQ SQNR its value before and after Q/DQ, weight SQNR the dequantized weight with the float one. Lower SQNR = more damage.')}
<h2>Trade-off</h2>
${chartSection('tradeoff', 'Accuracy loss against model size, one point per candidate, colored by median (p50) latency. Ringed points are on the Pareto front; the labelled rings are the top-3 picks (closest to the ideal point). Click a point to find it in the table.')}
<h2>Latency</h2>
${chartSection('latency', 'Each candidate’s median (p50) latency against the float model and the fully quantized one (candidate 0), and against its bound: int8 + (float − int8) × (share of the model’s multiply-accumulates in the groups it leaves float) + 0.1 × float, what a runtime that executes float islands between int8 regions well should stay under. Red bars: slower than the float model.')}
${recipesSection(report)}
<h2>Candidates</h2>
<p class="caption">Click a column heading to sort. Shaded rows: the top-3 Pareto picks; a gray edge marks the rest of the front. Latency is the median (p50) of the timed runs; <span class="unstable-mark">&#9888;</span> marks an unstable latency (p95 over 1.5 &times; p50: the runs were disturbed, compare it with care). Model files are relative to this report.</p>
<div class="table-wrap" id="candidates"></div>
<h2>Settings</h2>
<div id="settings"></div>
<footer>Generated by <b>seqto report</b> from <a href="report.json">report.json</a>${figureLinks(figures)} · charts: Apache ECharts ${esc(ECHARTS_VERSION)}, embedded (works offline).</footer>`;
  return shell({
    title: `seqto report · ${view.modelName} · ${runName}`,
    body,
    data: { kind: 'run', runName, report, generatedAt },
  });
}

// index.html comparing runs: runs = [{name, href, report}].
function indexPage(runs, { dirName, figures, generatedAt }) {
  const body = `<header class="top">
<h1><span class="tool">seqto</span> runs · ${esc(dirName)}</h1>
<p class="meta">${runs.length} runs · generated ${esc(generatedAt)} · machine-readable: <a href="summary.json">summary.json</a></p>
</header>
<h2>Runs</h2>
<p class="caption">One row per run with its Pareto #1 pick; click a run for its full report, a column heading to sort.</p>
<div class="table-wrap" id="runs"></div>
<h2>Trade-off</h2>
${chartSection('compare-tradeoff', 'Every candidate of every run: accuracy loss against size as a percentage of that run’s float model. Large rings: each run’s top-3 Pareto picks. Click a legend entry to hide a run.')}
<h2>Accuracy recovery</h2>
${chartSection('compare-cycles', 'Accuracy loss per candidate for each run: how quickly each setting wins accuracy back as groups go back to float. Diamonds: each run’s Pareto #1.')}
<footer>Generated by <b>seqto report</b>${figureLinks(figures)} · charts: Apache ECharts ${esc(ECHARTS_VERSION)}, embedded (works offline).</footer>`;
  return shell({
    title: `seqto runs · ${dirName}`,
    body,
    data: { kind: 'index', runs, generatedAt },
  });
}

module.exports = { runPage, indexPage, ECHARTS_VERSION };
