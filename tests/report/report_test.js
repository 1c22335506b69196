// End-to-end tests of `seqto report` (run by CTest through Node's test runner):
// realistic run directories (sample_runs.js) -> the seqto binary -> report.html,
// figures, summary.json and index.html, checked on disk and in headless Chromium
// (tools/report/test/browser_test.js); and bad input, which must give exit 1 and one
// error line naming the file and the key.
//
// Environment: SEQTO_EXE (the seqto binary), SEQTO_REPORT_ARTIFACTS (a folder for the
// screenshots and the generated runs, kept after the test for a person to look at).
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { makeRun } = require('./sample_runs');

const SOURCE_DIR = path.resolve(__dirname, '..', '..');
const TOOL_DIR = path.join(SOURCE_DIR, 'tools', 'report');
const SEQTO = process.env.SEQTO_EXE || path.join(SOURCE_DIR, 'build', 'seqto');
const ARTIFACTS = process.env.SEQTO_REPORT_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), 'seqto-report-'));
const WORK = path.join(ARTIFACTS, 'runs');
fs.rmSync(WORK, { recursive: true, force: true });
fs.mkdirSync(WORK, { recursive: true });

function seqto(args, env = {}) {
  const r = spawnSync(SEQTO, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120000 });
  if (r.error) throw r.error;
  return r;
}

// Exit 1 and exactly one stderr line, "seqto report: error: ..." containing each of `parts`.
function expectUserError(args, parts, env) {
  const r = seqto(['report', ...args], env);
  assert.equal(r.status, 1, `exit status for ${args.join(' ')}: ${r.status}, stderr: ${r.stderr}`);
  const lines = r.stderr.split('\n').filter((l) => l.length);
  assert.equal(lines.length, 1, `expected one error line, got: ${r.stderr}`);
  assert.match(lines[0], /^seqto report: error: /);
  for (const p of parts) assert.ok(lines[0].includes(p), `error line "${lines[0]}" should contain "${p}"`);
  return lines[0];
}

function browserTest(args) {
  const r = spawnSync(process.execPath, [path.join(TOOL_DIR, 'test', 'browser_test.js'), ...args],
    { encoding: 'utf8', timeout: 120000, cwd: TOOL_DIR });
  if (r.error) throw r.error;
  process.stdout.write(r.stdout);
  assert.equal(r.status, 0, `browser test failed:\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

function pngSize(file) {
  const b = fs.readFileSync(file);
  assert.equal(b.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', `${file} is not a PNG`);
  assert.equal(b.subarray(12, 16).toString('latin1'), 'IHDR');
  return [b.readUInt32BE(16), b.readUInt32BE(20)];
}

function editReport(dir, edit) {
  const file = path.join(dir, 'report.json');
  const r = JSON.parse(fs.readFileSync(file, 'utf8'));
  edit(r);
  fs.writeFileSync(file, JSON.stringify(r));
}

test('prerequisites: seqto, chromium and the npm packages are installed', () => {
  assert.ok(fs.existsSync(SEQTO), `${SEQTO} not found (set SEQTO_EXE)`);
  assert.ok(fs.existsSync(path.join(TOOL_DIR, 'node_modules', 'echarts')),
    'tools/report/node_modules is missing: npm ci --ignore-scripts --prefix tools/report');
  assert.ok(fs.existsSync(path.join(TOOL_DIR, 'node_modules', 'playwright-core')),
    'playwright-core is missing: npm ci --ignore-scripts --prefix tools/report');
  assert.ok(fs.existsSync(process.env.SEQTO_CHROMIUM || '/usr/bin/chromium'), 'chromium is missing (Debian package chromium)');
});

test('the recipes stage shows as a table with the chosen recipe marked, names escaped', () => {
  const dir = path.join(WORK, 'recipes');
  makeRun(dir, { cycles: 4, groups: 5, seed: 9 });
  const recipe = (name, loss, sqnr) => ({
    name, recovery: [], model_file: `recipes/${name}.onnx`, size_bytes: 3600000, seconds: 4.5,
    metrics: { accuracy_loss: loss, top1_disagreement: loss + 1, sqnr_db: sqnr }, latency_ms: { p50: 2.5 },
    techniques: [],
  });
  editReport(dir, (r) => {
    r.recipes = [recipe('none', 4, 10.79), recipe('cle<b>x</b>', 6, 11.79), recipe('cle+bias_correction', 0, 15.07)];
    r.recipe = { name: 'cle+bias_correction', mode: 'auto',
      techniques: [{ name: 'cle', stage: 'float', result: { pairs: 29 } },
        { name: 'bias_correction', stage: 'plan', result: { corrected: 52 } },
        { name: 'bias_correction', stage: 'plan_int16_activations', result: { corrected: 51 } }] };
  });
  const r = seqto(['report', dir]);
  assert.equal(r.status, 0, r.stderr);
  const html = fs.readFileSync(path.join(dir, 'report.html'), 'utf8');
  assert.ok(html.includes('<h2>Recipes</h2>'), 'a Recipes section');
  assert.ok(html.includes('cle+bias_correction (chosen)'), 'the chosen recipe is marked');
  assert.ok(html.includes('15.1'), 'its output SQNR is shown');
  assert.ok(html.includes('{&quot;pairs&quot;:29}'), 'what the chosen techniques did');
  assert.ok(html.includes('<b>bias_correction</b> (plan stage): '), 'the stage each ran in');
  assert.ok(html.includes('<b>bias_correction</b> (plan stage, for 16-bit-activation groups): ' +
    '<code>{&quot;corrected&quot;:51}'), 'the refinement for 16-bit-activation groups');
  assert.ok(!html.includes('cle<b>x</b>'), 'recipe names are escaped');
  // Without the stage, no section.
  const plain = path.join(WORK, 'no-recipes');
  makeRun(plain, { cycles: 4, groups: 5, seed: 9 });
  assert.equal(seqto(['report', plain]).status, 0);
  assert.ok(!fs.readFileSync(path.join(plain, 'report.html'), 'utf8').includes('<h2>Recipes</h2>'));
});

test('a run directory: report.html, figures, and the page works in Chromium', () => {
  const dir = path.join(WORK, 'mobilenetv2-static');
  const report = makeRun(dir, { cycles: 20, groups: 24, seed: 7, busy: true });
  const r = seqto(['report', dir]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '', 'no warnings expected');
  assert.match(r.stdout, /report: .*report\.html/);

  // Self-contained: everything inline, a policy that forbids loading anything.
  const html = fs.readFileSync(path.join(dir, 'report.html'), 'utf8');
  assert.ok(!/<script[^>]*\ssrc=/i.test(html), 'no external scripts');
  assert.ok(!/<link[^>]*stylesheet/i.test(html), 'no external stylesheets');
  assert.match(html, /Content-Security-Policy" content="default-src 'none'/);
  assert.ok(html.includes('echarts'), 'ECharts is inlined');
  for (const c of report.cycles) {
    assert.ok(fs.existsSync(path.join(dir, c.model_file)), `${c.model_file} exists (the link target)`);
  }

  // Static figures: SVG from ECharts, PNG from rsvg-convert at 2x.
  for (const name of ['objectives', 'group_errors', 'tradeoff', 'latency']) {
    const svg = fs.readFileSync(path.join(dir, 'figures', name + '.svg'), 'utf8');
    assert.match(svg, /^<svg[^>]*width="1100" height="560"/);
    assert.deepEqual(pngSize(path.join(dir, 'figures', name + '.png')), [2200, 1120]);
  }
  const tradeoff = fs.readFileSync(path.join(dir, 'figures', 'tradeoff.svg'), 'utf8');
  assert.ok(tradeoff.includes('Accuracy loss vs. model size') && tradeoff.includes('Model size (kB)'));
  const objectives = fs.readFileSync(path.join(dir, 'figures', 'objectives.svg'), 'utf8');
  for (const t of ['#1', '#2', '#3', 'Float model latency', 'Accuracy loss']) assert.ok(objectives.includes(t), `objectives.svg lacks "${t}"`);
  const latencySvg = fs.readFileSync(path.join(dir, 'figures', 'latency.svg'), 'utf8');
  for (const t of ['Latency per candidate', 'Float model', 'Fully quantized', 'Bound', 'Slower than float']) {
    assert.ok(latencySvg.includes(t), `latency.svg lacks "${t}"`);
  }
  assert.ok(report.cycles.some((c) => c.latency_ms.p50 > report.baseline.latency_ms.p50), 'the sample has slower candidates');
  const groupsSvg = fs.readFileSync(path.join(dir, 'figures', 'group_errors.svg'), 'utf8');
  for (const g of report.groups) assert.ok(groupsSvg.includes(g.name), `group_errors.svg lacks the label ${g.name}`);

  browserTest(['--page', path.join(dir, 'report.html'), '--cycles', '20', '--groups', '24',
    '--front', String(report.pareto.length), '--screenshot', path.join(ARTIFACTS, 'report.png')]);
  assert.ok(fs.existsSync(path.join(ARTIFACTS, 'report.png')));
});

test('chart (a) scales objectives like the tuner: the top 3 sit at their stored normalized values', () => {
  const C = require(path.join(TOOL_DIR, 'lib', 'charts.js'));
  const report = makeRun(path.join(WORK, 'scaling'), { cycles: 15, groups: 16, seed: 3 });
  const view = C.prepareRun(report);
  for (const p of report.pareto) {
    const row = view.rows.find((r) => r.cycle.index === p.cycle);
    for (const [k, v] of Object.entries(p.objectives)) assert.ok(Math.abs(row.norm[k] - v) < 1e-9, `${k} of ${p.cycle}`);
  }
  const opt = C.objectivesOption(view, { static: true });
  assert.deepEqual(opt.series.filter((s) => s.id.startsWith('pareto:')).map((s) => s.markLine.data[0].xAxis),
    report.pareto.slice(0, 3).map((p) => String(p.cycle)));
});

test('chart (d): latency against float, int8 and the bound; slower than float in red', () => {
  const C = require(path.join(TOOL_DIR, 'lib', 'charts.js'));
  const report = makeRun(path.join(WORK, 'bound'), { cycles: 20, groups: 24, seed: 7 });
  const view = C.prepareRun(report);
  const floatMs = report.baseline.latency_ms.p50;
  const int8Ms = report.cycles.find((c) => c.excluded.length === 0).latency_ms.p50;
  assert.equal(view.int8Latency, int8Ms);
  const macsOf = Object.fromEntries(report.groups.map((g) => [g.name, g.macs]));
  for (const c of report.cycles) {
    const ref = view.latencyRefs[c.index];
    const share = c.excluded.reduce((s, g) => s + macsOf[g], 0) / report.macs;
    const bound = int8Ms + (floatMs - int8Ms) * share + 0.1 * floatMs;
    assert.ok(Math.abs(ref.macShare - share) < 1e-12 && Math.abs(ref.bound - bound) < 1e-12, `bound of ${c.index}`);
    assert.ok(Math.abs(ref.vsFloat - c.latency_ms.p50 / floatMs) < 1e-12, `x float of ${c.index}`);
    assert.ok(Math.abs(ref.vsInt8 - c.latency_ms.p50 / int8Ms) < 1e-12, `x int8 of ${c.index}`);
    assert.ok(Math.abs(ref.vsBound - c.latency_ms.p50 / bound) < 1e-12, `x bound of ${c.index}`);
    assert.equal(ref.slowerThanFloat, c.latency_ms.p50 > floatMs, `slower flag of ${c.index}`);
  }
  // The bars: red exactly where the candidate is slower than float.
  const opt = C.latencyOption(view, { static: true });
  const bars = opt.series.find((s) => s.id === 'latency').data;
  const red = view.rows.filter((r, i) => bars[i].itemStyle.color === '#d62728').map((r) => r.cycle.index);
  const slower = report.cycles.filter((c) => c.latency_ms.p50 > floatMs).map((c) => c.index);
  assert.ok(slower.length > 0 && slower.length < report.cycles.length, `a mix of faster and slower: ${slower}`);
  assert.deepEqual(red, slower);
  assert.deepEqual(opt.series.find((s) => s.id === 'float-ref').markLine.data, [{ yAxis: floatMs }]);
  assert.deepEqual(opt.series.find((s) => s.id === 'int8-ref').markLine.data, [{ yAxis: int8Ms }]);
  // The axis shows the float line even when every candidate is much faster.
  report.baseline.latency_ms.p50 = 9;
  const far = C.latencyOption(C.prepareRun(report), { static: true });
  assert.ok(far.yAxis.max === 10, `axis max ${far.yAxis.max}`);
  report.baseline.latency_ms.p50 = floatMs;
  // A group whose MACs are unknown leaves the bound of the candidates excluding it
  // unknown (and only theirs); without candidate 0 there is no int8 reference.
  const unknown = report.cycles[3].excluded[2];
  report.groups.find((g) => g.name === unknown).macs = null;
  const v2 = C.prepareRun(report);
  for (const c of report.cycles) assert.equal(v2.latencyRefs[c.index].bound === null, c.excluded.includes(unknown), `${c.index}`);
  report.cycles = report.cycles.filter((c) => c.index !== 0);
  const v3 = C.prepareRun(report);
  assert.equal(v3.int8Latency, null);
  assert.ok(report.cycles.every((c) => v3.latencyRefs[c.index].bound === null && v3.latencyRefs[c.index].vsInt8 === null));
  assert.ok(!C.latencyOption(v3, { static: true }).series.some((s) => s.id === 'int8-ref'));
});

test('the example in docs/report-format.md is a valid report.json', () => {
  const doc = fs.readFileSync(path.join(SOURCE_DIR, 'docs', 'report-format.md'), 'utf8');
  const example = JSON.parse(doc.match(/```json\n([\s\S]*?)```/)[1]);
  const dir = path.join(WORK, 'doc-example');
  for (const c of example.cycles) {
    fs.mkdirSync(path.dirname(path.join(dir, c.model_file)), { recursive: true });
    fs.writeFileSync(path.join(dir, c.model_file), 'x');
  }
  fs.writeFileSync(path.join(dir, 'report.json'), JSON.stringify(example));
  const r = seqto(['report', dir]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  // Its Pareto entries are what the tuner computes (sample_runs.js, like src/eval/pareto.h).
  const { paretoFront } = require('./sample_runs');
  const computed = paretoFront(example.cycles, example.settings.objectives);
  assert.deepEqual(example.pareto.map((p) => p.cycle), computed.map((p) => p.cycle));
  example.pareto.forEach((p, i) => assert.ok(Math.abs(p.distance - computed[i].distance) < 0.01));
});

test('names with markup stay text: in the page data, the SVG figures and the tooltip', () => {
  const dir = path.join(WORK, 'markup-names');
  makeRun(dir, { cycles: 6, groups: 5, seed: 8 });
  const evil = '<img src=x onerror=alert(1)>&"\'</script>';
  editReport(dir, (r) => {
    const old = r.groups[4].name;
    r.groups[4].name = evil;
    r.cycles.forEach((c) => { c.excluded = c.excluded.map((g) => (g === old ? evil : g)); });
    r.model = 'models/</script><b>m.onnx';
  });
  const r = seqto(['report', dir]);
  assert.equal(r.status, 0, r.stderr);
  const html = fs.readFileSync(path.join(dir, 'report.html'), 'utf8');
  assert.ok(!html.includes('<img src=x'), 'raw markup must not reach the HTML');
  assert.equal(html.split('</script>').length - 1, 4, 'only the page\'s own four </script> tags');
  const svg = fs.readFileSync(path.join(dir, 'figures', 'group_errors.svg'), 'utf8');
  assert.ok(!svg.includes('<img'), 'group names are escaped in the SVG');
  // The PNG was rasterized, so the SVG is well-formed XML.
  pngSize(path.join(dir, 'figures', 'group_errors.png'));
  browserTest(['--page', path.join(dir, 'report.html'), '--cycles', '6', '--groups', '5']);
});

test('chart (a): the float latency line stretches the axis, or is pinned off scale', () => {
  const C = require(path.join(TOOL_DIR, 'lib', 'charts.js'));
  const report = makeRun(path.join(WORK, 'latency-line'), { cycles: 10, groups: 10, seed: 6 });
  const lats = report.cycles.map((c) => c.latency_ms.p50);  // chart (a) scales the median
  const lo = Math.min(...lats), hi = Math.max(...lats);
  const line = (floatMs) => {
    report.baseline.latency_ms.p50 = floatMs;
    const o = C.objectivesOption(C.prepareRun(report), { static: true });
    const s = o.series.find((x) => x.id === 'float-latency');
    return { y: s.markLine.data[0].yAxis, label: s.markLine.label.formatter, min: o.yAxis.min, max: o.yAxis.max };
  };
  const mid = line((lo + hi) / 2);
  assert.ok(Math.abs(mid.y - 50) < 1e-3 && mid.min === 0 && mid.max === 100, JSON.stringify(mid));
  const above = line(hi + 0.2 * (hi - lo));  // 120 on the scale: the axis stretches to 120
  assert.ok(Math.abs(above.y - 120) < 1e-3 && above.max === 120 && !/off scale/.test(above.label), JSON.stringify(above));
  const far = line(hi + 10 * (hi - lo));
  assert.ok(far.y === 130 && far.max === 130 && /off scale, higher/.test(far.label), JSON.stringify(far));
  const below = line(lo - 10 * (hi - lo));
  assert.ok(below.y === -30 && below.min === -30 && /off scale, lower/.test(below.label), JSON.stringify(below));
});

test('--open hands the page to xdg-open', async () => {
  const dir = path.join(WORK, 'open');
  makeRun(dir, { cycles: 4, groups: 4, seed: 12 });
  const bin = path.join(WORK, 'fake-bin');
  fs.mkdirSync(bin, { recursive: true });
  const log = path.join(bin, 'opened.txt');
  fs.rmSync(log, { force: true });
  fs.writeFileSync(path.join(bin, 'xdg-open'), `#!/bin/sh\necho "$1" > '${log}'\n`, { mode: 0o755 });
  const r = seqto(['report', dir, '--open'], { PATH: `${bin}:${process.env.PATH}` });
  assert.equal(r.status, 0, r.stderr);
  // The opener is not waited for; give it a moment.
  for (let i = 0; i < 50 && !fs.existsSync(log); i++) await new Promise((res) => setTimeout(res, 100));
  assert.equal(fs.readFileSync(log, 'utf8').trim(), 'file://' + path.join(dir, 'report.html'));
});

test('a run without groups: chart (b) is replaced by a note; two objectives only', () => {
  const dir = path.join(WORK, 'no-groups');
  makeRun(dir, { cycles: 9, groups: 10, seed: 11, withGroups: false, objectives: ['accuracy_loss', 'size_bytes'] });
  const r = seqto(['report', dir]);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(!fs.existsSync(path.join(dir, 'figures', 'group_errors.svg')), 'no group figure without groups');
  const report = JSON.parse(fs.readFileSync(path.join(dir, 'report.json'), 'utf8'));
  browserTest(['--page', path.join(dir, 'report.html'), '--cycles', '9', '--groups', '0',
    '--front', String(report.pareto.length), '--screenshot', path.join(ARTIFACTS, 'report-no-groups.png')]);
});

test('a folder of runs: each report, summary.json and index.html', () => {
  const root = path.join(WORK, 'compare');
  const a = makeRun(path.join(root, 'static-damage'), { cycles: 20, groups: 24, seed: 5 });
  const b = makeRun(path.join(root, 'dynamic-published'), { cycles: 13, groups: 12, seed: 9, mode: 'dynamic', ranker: 'seqto-published' });
  fs.mkdirSync(path.join(root, 'notes'), { recursive: true });  // not a run: ignored
  const r = seqto(['report', root]);
  assert.equal(r.status, 0, r.stderr);
  for (const run of ['static-damage', 'dynamic-published']) {
    assert.ok(fs.existsSync(path.join(root, run, 'report.html')), `${run}/report.html`);
    assert.ok(fs.existsSync(path.join(root, run, 'figures', 'tradeoff.png')), `${run}/figures/tradeoff.png`);
  }
  for (const f of ['compare_tradeoff', 'compare_cycles']) {
    assert.ok(fs.readFileSync(path.join(root, 'figures', f + '.svg'), 'utf8').startsWith('<svg'));
    pngSize(path.join(root, 'figures', f + '.png'));
  }

  // summary.json: the stored values, copied (runs in name order).
  const summary = JSON.parse(fs.readFileSync(path.join(root, 'summary.json'), 'utf8'));
  assert.deepEqual(Object.keys(summary.runs), ['dynamic-published', 'static-damage']);
  assert.deepEqual(summary.columns, ['cycle', 'accuracy_loss', 'size_bytes', 'latency_ms']);
  for (const [name, rep] of [['static-damage', a], ['dynamic-published', b]]) {
    const s = summary.runs[name];
    assert.equal(s.model, rep.model);
    assert.equal(s.report, `${name}/report.html`);
    assert.deepEqual(s.all_values, rep.cycles.map((c) => [c.index, c.metrics.accuracy_loss, c.size_bytes, c.latency_ms.p50]));
    assert.deepEqual(s.top3.map((t) => t.cycle), rep.pareto.slice(0, 3).map((p) => p.cycle));
    assert.deepEqual(s.top3.map((t) => t.rank), [1, 2, 3]);
    const best = rep.cycles.find((c) => c.index === rep.pareto[0].cycle);
    assert.deepEqual(s.top3[0].excluded, best.excluded);
    assert.equal(s.top3[0].accuracy_loss, best.metrics.accuracy_loss);
    assert.equal(s.top3[0].model_file, `${name}/${best.model_file}`);
    assert.ok(fs.existsSync(path.join(root, s.top3[0].model_file)));
    assert.deepEqual(s.pareto_front, rep.pareto.map((p) => p.cycle));
  }
  browserTest(['--page', path.join(root, 'index.html'), '--index', '--cycles', '13,20',
    '--screenshot', path.join(ARTIFACTS, 'index.png')]);
});

test('a report.json path works like its folder; missing model files give a warning', () => {
  const dir = path.join(WORK, 'missing-models');
  makeRun(dir, { cycles: 6, groups: 8, seed: 2 });
  fs.rmSync(path.join(dir, 'models'), { recursive: true });
  const r = seqto(['report', path.join(dir, 'report.json')]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /^seqto report: warning: .*report\.json: 6 candidate model file\(s\) not found \(first: models\/cycle_000\.onnx\)/);
  assert.ok(fs.existsSync(path.join(dir, 'report.html')));
});

test('without a rasterizer the SVGs and the page are still written, with one warning', () => {
  const dir = path.join(WORK, 'no-png');
  makeRun(dir, { cycles: 5, groups: 6, seed: 4 });
  const r = seqto(['report', dir], { SEQTO_RSVG_CONVERT: path.join(WORK, 'no-such-rsvg-convert') });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /warning: .*objectives\.png: rsvg-convert failed/);
  assert.ok(fs.existsSync(path.join(dir, 'figures', 'objectives.svg')));
  assert.ok(!fs.existsSync(path.join(dir, 'figures', 'objectives.png')));
  assert.ok(fs.existsSync(path.join(dir, 'report.html')));
});

test('bad input: exit 1 and one line naming the file and the key', async (t) => {
  const base = path.join(WORK, 'bad');
  fs.rmSync(base, { recursive: true, force: true });
  let n = 0;
  // A valid run, then `edit` applied to its report.json.
  function badRun(edit) {
    const dir = path.join(base, `case${n++}`);
    makeRun(dir, { cycles: 5, groups: 6, seed: n });
    editReport(dir, edit);
    return dir;
  }
  await t.test('no such path', () => expectUserError([path.join(base, 'nope')], ['nope', 'no such file or directory']));
  await t.test('a folder without report.json', () => {
    const dir = path.join(base, 'empty');
    fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
    expectUserError([dir], [path.join(dir, 'report.json'), 'not found']);
  });
  await t.test('invalid JSON', () => {
    const dir = path.join(base, 'badjson');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'report.json'), '{"model": "m.onnx",\n  "settings": {,}\n}');
    expectUserError([dir], [path.join(dir, 'report.json'), 'invalid JSON', 'line 2']);
  });
  await t.test('not an object', () => {
    const dir = path.join(base, 'array');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'report.json'), '[1, 2]');
    expectUserError([dir], ['report.json', 'report: expected an object, got an array']);
  });
  const cases = [
    ['missing top-level key', (r) => { delete r.pareto; }, "missing key 'pareto'"],
    ['missing model', (r) => { delete r.model; }, "missing key 'model'"],
    ['missing metric', (r) => { delete r.cycles[2].metrics.accuracy_loss; }, "cycles[2].metrics: missing key 'accuracy_loss'"],
    ['missing latency mean', (r) => { delete r.baseline.latency_ms.mean; }, "baseline.latency_ms: missing key 'mean'"],
    ['size as a string', (r) => { r.cycles[1].size_bytes = '12 MB'; }, 'cycles[1].size_bytes: expected a number, got a string'],
    ['negative size', (r) => { r.baseline.size_bytes = -1; }, 'baseline.size_bytes: must not be negative'],
    ['metric as a string', (r) => { r.cycles[0].metrics.kendall_tau = 'high'; }, 'cycles[0].metrics.kendall_tau: expected a number or null'],
    ['index not an integer', (r) => { r.cycles[3].index = 1.5; }, 'cycles[3].index: expected an integer'],
    ['duplicate index', (r) => { r.cycles[3].index = 1; }, 'cycles[3].index: candidate 1 appears twice'],
    ['excluded not a list', (r) => { r.cycles[1].excluded = 'conv1'; }, 'cycles[1].excluded: expected an array, got a string'],
    ['unknown excluded group', (r) => { r.cycles[2].excluded.push('no/such/group'); }, "cycles[2].excluded[2]: 'no/such/group' is not a group in groups[]"],
    ['absolute model file', (r) => { r.cycles[0].model_file = '/tmp/x.onnx'; }, 'cycles[0].model_file: expected a path relative to the run directory'],
    ['no cycles', (r) => { r.cycles = []; }, 'cycles: no candidates'],
    ['empty front', (r) => { r.pareto = []; }, 'pareto: empty'],
    ['pareto names an unknown cycle', (r) => { r.pareto[0].cycle = 99; }, 'pareto[0].cycle: candidate 99 is not in cycles[]'],
    ['pareto rank twice', (r) => { r.pareto[1].rank = r.pareto[0].rank; }, 'pareto[1].rank: rank 1 appears twice'],
    ['pareto without objectives', (r) => { delete r.pareto[0].objectives; }, "pareto[0]: missing key 'objectives'"],
    ['group without order', (r) => { delete r.groups[4].order; }, "groups[4]: missing key 'order'"],
    ['group twice', (r) => { r.groups[1].name = r.groups[0].name; }, `groups[1].name: group '`],
    ['group MACs as a string', (r) => { r.groups[2].macs = '3M'; }, 'groups[2].macs: expected an integer, got a string'],
    ['negative model MACs', (r) => { r.macs = -5; }, 'macs: must be at least 0, got -5'],
    ['unknown objective', (r) => { r.settings.objectives = ['accuracy_loss', 'flops']; }, "settings.objectives[1]: unknown objective 'flops'"],
    ['settings not an object', (r) => { r.settings = 'static'; }, 'settings: expected an object, got a string'],
    ['unstable not a boolean', (r) => { r.cycles[2].latency_ms.unstable = 'yes'; }, 'cycles[2].latency_ms.unstable: expected true or false, got a string'],
    ['other_cores as a string', (r) => { r.baseline.latency_ms.other_cores = 'many'; }, 'baseline.latency_ms.other_cores: expected a number or null'],
    ['machine_busy without its warning', (r) => { r.machine_busy = { cores: 2 }; }, "machine_busy: missing key 'warning'"],
    ['machine_busy not an object', (r) => { r.machine_busy = 'busy'; }, 'machine_busy: expected an object or null, got a string'],
  ];
  for (const [name, edit, key] of cases) {
    await t.test(name, () => {
      const dir = badRun(edit);
      expectUserError([dir], [path.join(dir, 'report.json') + ': ' + key]);
      assert.ok(!fs.existsSync(path.join(dir, 'report.html')), 'nothing written for a bad report.json');
    });
  }
  await t.test('one bad run in a folder of runs names that run', () => {
    const root = path.join(base, 'folder');
    makeRun(path.join(root, 'a-good'), { cycles: 4, groups: 5, seed: 1 });
    makeRun(path.join(root, 'b-bad'), { cycles: 4, groups: 5, seed: 2 });
    editReport(path.join(root, 'b-bad'), (r) => { delete r.baseline; });
    expectUserError([root], [path.join(root, 'b-bad', 'report.json') + ": missing key 'baseline'"]);
    assert.ok(!fs.existsSync(path.join(root, 'summary.json')));
  });
  await t.test('node is missing', () => {
    const dir = badRun(() => {});
    expectUserError([dir], ['$SEQTO_NODE=', 'is not an executable'], { SEQTO_NODE: path.join(base, 'no-node') });
  });
  await t.test('the report writer is missing', () => {
    const dir = badRun(() => {});
    expectUserError([dir], ['report writer', 'report.js not found', 'SEQTO_REPORT_DIR'],
      { SEQTO_REPORT_DIR: path.join(base, 'no-tool') });
  });
  await t.test('the report writer fails: its error line is passed on', () => {
    const dir = badRun(() => {});
    // A tool folder whose report.js fails like the real one does on an unwritable folder.
    const tool = path.join(base, 'failing-tool');
    fs.mkdirSync(path.join(tool, 'node_modules', 'echarts'), { recursive: true });
    fs.writeFileSync(path.join(tool, 'node_modules', 'echarts', 'package.json'), '{}');
    fs.writeFileSync(path.join(tool, 'report.js'),
      "console.error('warning: something small'); console.error('error: ' + process.argv[3] + ': cannot write'); process.exit(1);");
    const r = seqto(['report', dir], { SEQTO_REPORT_DIR: tool });
    assert.equal(r.status, 1);
    assert.deepEqual(r.stderr.trim().split('\n'),
      ['seqto report: warning: something small', `seqto report: error: ${dir}: cannot write`]);
  });
});
