#!/usr/bin/env node
// Opens a report page in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser is ever downloaded) from file:// and checks it as a
// person would see it:
//   - no console error, no uncaught exception, no request beyond the page itself;
//   - every chart holds the expected number of points (ECharts' getOption());
//   - hovering a point shows the tooltip with the candidate, its excluded groups
//     and its metrics; clicking a column heading sorts the table;
//   - a full-page screenshot is kept (--screenshot) as a test artifact.
//
//   node browser_test.js --page report.html --screenshot out.png \
//        --cycles 20 --groups 24 --front 11           (a run's report.html)
//   node browser_test.js --page index.html --screenshot out.png \
//        --index --cycles 20,13                       (a folder's index.html)
//
// Expected counts come from the caller (the test that wrote the data); the page's
// report.json gives the Pareto picks and names to look for. Exit 0 when every check
// passes, 1 otherwise (each failure on its own line).
'use strict';

const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

function parseArgs(argv) {
  const a = { index: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--index') a.index = true;
    else if (k.startsWith('--')) a[k.slice(2)] = argv[++i];
  }
  if (!a.page) throw new Error('usage: browser_test.js --page FILE [--index] [--screenshot PNG] [--cycles N[,N..]] [--groups N] [--front N]');
  return a;
}

const failures = [];
let checks = 0;
function check(ok, what) {
  checks++;
  if (!ok) failures.push(what);
}

async function hoverTooltip(page, chartKey, seriesId, value) {
  await page.locator(`#chart-${chartKey}`).scrollIntoViewIfNeeded();
  // Pixel of the data point inside the chart, then inside the viewport.
  const pos = await page.evaluate(({ chartKey, seriesId, value }) => {
    const chart = window.seqtoReport.charts[chartKey];
    const px = chart.convertToPixel({ seriesId }, value);
    const r = chart.getDom().getBoundingClientRect();
    return { x: r.left + px[0], y: r.top + px[1], top: r.top };
  }, { chartKey, seriesId, value });
  await page.mouse.move(pos.x + 40, pos.y + 40);
  await page.mouse.move(pos.x, pos.y, { steps: 4 });
  const tip = page.locator(`#chart-${chartKey} .seqto-tooltip`);
  try {
    await tip.waitFor({ state: 'visible', timeout: 3000 });
  } catch (e) {
    return '';
  }
  // Tooltip content is updated after it is shown; wait until it mentions something.
  await page.waitForFunction((key) => {
    const el = document.querySelector(`#chart-${key} .seqto-tooltip`);
    return el && el.innerText.trim().length > 0;
  }, chartKey, { timeout: 3000 }).catch(() => {});
  return tip.innerText();
}

async function checkRunPage(page, args) {
  const report = JSON.parse(await page.locator('#seqto-data').textContent()).report;
  const cycles = +args.cycles;
  const groups = +(args.groups || 0);
  const front = +(args.front || report.pareto.length);
  const counts = await page.evaluate(() => {
    const out = {};
    const charts = window.seqtoReport.charts;
    for (const [key, chart] of Object.entries(charts)) {
      const opt = chart.getOption();
      out[key] = {};
      for (const s of opt.series) {
        out[key][s.id] = {
          n: s.data.length,
          nonNull: s.data.filter((d) => d !== null && d !== undefined && d !== '-').length,
          markX: s.markLine && s.markLine.data ? s.markLine.data.map((d) => d.xAxis).filter((x) => x !== undefined) : [],
          markY: s.markLine && s.markLine.data ? s.markLine.data.map((d) => d.yAxis).filter((y) => y !== undefined) : [],
        };
      }
      const box = chart.getDom().getBoundingClientRect();
      out[key].__size = [box.width, box.height];
    }
    return out;
  });
  // (a) objectives against the candidate index.
  const objectives = (report.settings.objectives || ['accuracy_loss', 'size_bytes', 'latency_ms']);
  const a = counts.objectives || {};
  check(!!counts.objectives, 'chart (a) objectives is missing');
  for (const o of objectives) {
    check(a['obj:' + o] && a['obj:' + o].n === cycles,
      `chart (a): series obj:${o} has ${a['obj:' + o] && a['obj:' + o].n} points, expected ${cycles}`);
  }
  const top3 = report.pareto.filter((p) => p.rank <= 3).sort((x, y) => x.rank - y.rank);
  for (const p of top3) {
    const s = a['pareto:' + p.rank];
    check(s && s.markX.length === 1 && String(s.markX[0]) === String(p.cycle),
      `chart (a): Pareto #${p.rank} line should mark candidate ${p.cycle}, got ${s && JSON.stringify(s.markX)}`);
  }
  if (objectives.includes('latency_ms')) {
    check(a['float-latency'] && a['float-latency'].markY.length === 1, 'chart (a): float model latency line is missing');
  }
  // (b) per-group errors, or the note that replaces them.
  if (groups > 0) {
    const b = counts.groups || {};
    check(!!counts.groups, 'chart (b) per-group errors is missing');
    for (const id of ['group:xmodel', 'group:qdq', 'group:weight']) {
      check(b[id] && b[id].n === groups, `chart (b): series ${id} has ${b[id] && b[id].n} points, expected ${groups}`);
    }
    const withWeight = report.groups.filter((g) => typeof g.weight_sqnr_db === 'number').length;
    check(b['group:weight'] && b['group:weight'].nonNull === withWeight,
      `chart (b): weight SQNR has ${b['group:weight'] && b['group:weight'].nonNull} values, expected ${withWeight}`);
  } else {
    check(!counts.groups, 'chart (b) should be omitted without groups');
    const note = await page.locator('#chart-groups').innerText();
    check(/omitted/.test(note), `chart (b): expected a note that it is omitted, got "${note}"`);
  }
  // (c) trade-off scatter.
  const c = counts.tradeoff || {};
  check(!!counts.tradeoff, 'chart (c) trade-off is missing');
  check(c.candidates && c.candidates.n === cycles, `chart (c): ${c.candidates && c.candidates.n} candidates, expected ${cycles}`);
  check(c.front && c.front.n === front, `chart (c): ${c.front && c.front.n} points on the front, expected ${front}`);
  check(c.top3 && c.top3.n === Math.min(3, top3.length), `chart (c): ${c.top3 && c.top3.n} top-3 picks, expected ${top3.length}`);
  check(c.float && c.float.n === 1, 'chart (c): the float model point is missing');
  // (d) latency per candidate: a bar each, red where slower than float, the bound
  // where MACs are known, the float and int8 reference lines.
  const d = counts.latency || {};
  check(!!counts.latency, 'chart (d) latency is missing');
  check(d.latency && d.latency.n === cycles, `chart (d): ${d.latency && d.latency.n} bars, expected ${cycles}`);
  check(d['float-ref'] && d['float-ref'].markY.length === 1, 'chart (d): the float model line is missing');
  const floatMs = report.baseline.latency_ms.p50;
  const slower = report.cycles.filter((x) => x.latency_ms.p50 > floatMs).map((x) => x.index).sort((x, y) => x - y);
  const red = await page.evaluate(() => {
    const s = window.seqtoReport.charts.latency.getOption().series.find((x) => x.id === 'latency');
    return window.seqtoReport.view.rows.filter((r, i) => s.data[i].itemStyle.color === '#d62728').map((r) => r.cycle.index);
  });
  check(JSON.stringify(red.sort((x, y) => x - y)) === JSON.stringify(slower),
    `chart (d): red bars on ${JSON.stringify(red)}, expected the candidates slower than float ${JSON.stringify(slower)}`);
  if (report.cycles.some((x) => x.excluded.length === 0)) {
    check(d['int8-ref'] && d['int8-ref'].markY.length === 1, 'chart (d): the fully quantized line is missing');
    // A bound wherever the MACs of every excluded group are known.
    const macsOf = Object.fromEntries((report.groups || []).map((g) => [g.name, g.macs]));
    const withBound = typeof report.macs !== 'number' ? 0
      : report.cycles.filter((x) => x.excluded.every((g) => typeof macsOf[g] === 'number')).length;
    check(d.bound && d.bound.nonNull === withBound,
      `chart (d): the bound has ${d.bound && d.bound.nonNull} points, expected ${withBound}`);
  }
  for (const [key, v] of Object.entries(counts)) {
    check(v.__size[0] > 300 && v.__size[1] > 300, `chart ${key} is too small: ${v.__size}`);
  }

  // Hover the Pareto #1 point of chart (c): the tooltip names the candidate, its
  // excluded groups and its metrics.
  const best = report.cycles.find((x) => x.index === top3[0].cycle);
  const point = await page.evaluate(() => window.seqtoReport.charts.tradeoff.getOption().series
    .find((s) => s.id === 'top3').data[0]);
  const text = await hoverTooltip(page, 'tradeoff', 'top3', [point[0], point[1]]);
  check(text.includes(`Candidate ${best.index}`), `chart (c) tooltip should name "Candidate ${best.index}", got "${text}"`);
  check(text.includes('Pareto #1'), `chart (c) tooltip should say "Pareto #1", got "${text}"`);
  for (const g of best.excluded.slice(0, 12)) check(text.includes(g), `chart (c) tooltip lacks excluded group "${g}"`);
  check(/Accuracy loss/.test(text) && /Latency/.test(text) && /Size/.test(text),
    `chart (c) tooltip lacks the metrics: "${text}"`);
  if (args.screenshot) {
    // The hovered chart with its tooltip, next to the full-page screenshot.
    await page.locator('#chart-tradeoff').screenshot({ path: args.screenshot.replace(/\.png$/, '') + '-tooltip.png' });
  }
  // Chart (a): an axis tooltip for the candidate under the mouse.
  const last = report.cycles.reduce((m, x) => (x.index > m.index ? x : m));
  const aPoint = [String(last.index), await page.evaluate((i) => window.seqtoReport.view.rows
    .find((r) => r.cycle.index === i).norm.accuracy_loss, last.index)];
  const textA = await hoverTooltip(page, 'objectives', 'obj:accuracy_loss', aPoint);
  check(textA.includes(`Candidate ${last.index}`), `chart (a) tooltip should name "Candidate ${last.index}", got "${textA}"`);
  await page.mouse.move(2, 2);

  // The candidates table: one row per candidate, links to the .onnx files, sortable.
  const rowIds = () => page.$$eval('#candidates tbody tr', (trs) => trs.map((tr) => +tr.dataset.row));
  check((await rowIds()).length === cycles, `table: ${(await rowIds()).length} rows, expected ${cycles}`);
  // Unstable latencies (p95 over 1.5 x p50) are marked in their rows, and only there.
  const unstable = report.cycles.filter((x) => x.latency_ms.unstable === true).map((x) => x.index).sort((x, y) => x - y);
  const marked = (await page.$$eval('#candidates tbody tr', (trs) => trs.filter((tr) => tr.querySelector('.unstable-mark'))
    .map((tr) => +tr.dataset.row))).sort((x, y) => x - y);
  check(JSON.stringify(marked) === JSON.stringify(unstable),
    `table: unstable-latency marks on candidates ${JSON.stringify(marked)}, expected ${JSON.stringify(unstable)}`);
  // Slower than float: the latency cell is red in those rows, and only there.
  const redRows = (await page.$$eval('#candidates tbody tr', (trs) => trs.filter((tr) => tr.querySelector('.slower'))
    .map((tr) => +tr.dataset.row))).sort((x, y) => x - y);
  check(JSON.stringify(redRows) === JSON.stringify(slower),
    `table: red latencies on candidates ${JSON.stringify(redRows)}, expected ${JSON.stringify(slower)}`);
  const redColor = await page.$$eval('#candidates .slower', (s) => (s[0] ? getComputedStyle(s[0]).color : ''));
  check(slower.length === 0 || redColor === 'rgb(198, 40, 40)', `table: a slower latency is colored ${redColor}`);
  // Hovering chart (d) shows the candidate against float, int8 and the bound.
  if (slower.length) {
    const k = slower[0];
    const textD = await hoverTooltip(page, 'latency', 'latency',
      [String(k), report.cycles.find((x) => x.index === k).latency_ms.p50 / 2]);
    check(textD.includes(`Candidate ${k}`) && /slower than the float model/.test(textD) && /× float/.test(textD) &&
      /bound/.test(textD), `chart (d) tooltip for candidate ${k}: "${textD}"`);
    await page.mouse.move(2, 2);
  }
  // The tuner's busy-machine warning is a banner when report.json has one.
  const banners = await page.locator('#busy-warning').count();
  check(banners === (report.machine_busy ? 1 : 0), `busy-machine banner: ${banners}, machine_busy: ${JSON.stringify(report.machine_busy)}`);
  if (report.machine_busy) {
    const text = await page.locator('#busy-warning').innerText();
    check(text.includes(report.machine_busy.warning), `busy-machine banner says "${text}"`);
  }
  const hrefs = await page.$$eval('#candidates tbody a', (as) => as.map((a) => a.getAttribute('href')));
  check(hrefs.length === cycles && hrefs.every((h) => h.endsWith('.onnx')), `table: model links ${JSON.stringify(hrefs.slice(0, 3))}...`);
  const header = page.locator('#candidates th[data-key="accuracy_loss"]');
  const byLoss = report.cycles.slice().sort((x, y) => x.metrics.accuracy_loss - y.metrics.accuracy_loss || 0);
  await header.click();
  const asc = await rowIds();
  const ascLoss = asc.map((i) => report.cycles.find((x) => x.index === i).metrics.accuracy_loss);
  check(ascLoss.every((v, i) => i === 0 || ascLoss[i - 1] <= v), `table: ascending sort by accuracy loss gave ${ascLoss}`);
  check(asc[0] === byLoss[0].index, `table: first row after sorting should be candidate ${byLoss[0].index}, got ${asc[0]}`);
  check(await header.getAttribute('aria-sort') === 'ascending', 'table: header not marked ascending');
  await header.click();
  const desc = await rowIds();
  check(desc[0] === byLoss[byLoss.length - 1].index, `table: descending sort should start with candidate ${byLoss[byLoss.length - 1].index}, got ${desc[0]}`);
  await page.locator('#candidates th[data-key="index"]').click();
  check((await rowIds()).every((v, i, arr) => i === 0 || arr[i - 1] < v), 'table: sorting by candidate index failed');
  // The settings of the run.
  const settingsText = await page.locator('#settings').innerText();
  for (const k of Object.keys(report.settings)) check(settingsText.includes(k), `settings table lacks "${k}"`);
}

async function checkIndexPage(page, args) {
  const data = JSON.parse(await page.locator('#seqto-data').textContent());
  const expected = String(args.cycles).split(',').map(Number);
  check(data.runs.length === expected.length, `index: ${data.runs.length} runs, expected ${expected.length}`);
  const counts = await page.evaluate(() => {
    const out = {};
    for (const [key, chart] of Object.entries(window.seqtoReport.charts)) {
      out[key] = {};
      for (const s of chart.getOption().series) out[key][s.id] = s.data.length;
    }
    return out;
  });
  expected.forEach((n, i) => {
    const t = counts['compare-tradeoff'] || {};
    const cy = counts['compare-cycles'] || {};
    const top = data.runs[i].report.pareto.filter((p) => p.rank <= 3).length;
    check(t['run:' + i] === n, `index trade-off: run ${i} has ${t['run:' + i]} points, expected ${n}`);
    check(t['run-top3:' + i] === top, `index trade-off: run ${i} has ${t['run-top3:' + i]} top-3 points, expected ${top}`);
    check(cy['run-cycles:' + i] === n, `index cycles: run ${i} has ${cy['run-cycles:' + i]} points, expected ${n}`);
  });
  const links = await page.$$eval('#runs tbody a', (as) => as.map((a) => a.getAttribute('href')));
  check(JSON.stringify(links.slice().sort()) === JSON.stringify(data.runs.map((r) => r.href).sort()),
    `index: run links ${JSON.stringify(links)}`);
  // Hover a point of the second run: the tooltip names the run and the candidate.
  const run = data.runs.length - 1;
  const pt = await page.evaluate((i) => window.seqtoReport.charts['compare-tradeoff'].getOption().series
    .find((s) => s.id === 'run-top3:' + i).data[0], run);
  const text = await hoverTooltip(page, 'compare-tradeoff', 'run-top3:' + run, [pt[0], pt[1]]);
  check(text.includes(data.runs[run].name) && text.includes('Candidate ' + pt[3]),
    `index tooltip should name run "${data.runs[run].name}" and candidate ${pt[3]}, got "${text}"`);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const file = path.resolve(args.page);
  if (!fs.existsSync(file)) throw new Error(`${file}: not found`);
  const pageUrl = 'file://' + file;
  const browser = await chromium.launch({
    executablePath: process.env.SEQTO_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--disable-gpu', '--no-first-run'],
  });
  const problems = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1300, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`uncaught exception: ${e.message}`));
    // The page must load nothing but itself: every other request fails the test.
    await page.route('**/*', (route) => {
      const url = route.request().url();
      if (url === pageUrl) return route.continue();
      problems.push(`request: ${url}`);
      return route.abort();
    });
    await page.goto(pageUrl, { waitUntil: 'load' });
    await page.waitForFunction(() => window.seqtoReport && window.seqtoReport.charts, null, { timeout: 10000 });
    // Let the entry animations finish before measuring and taking the screenshot.
    await page.waitForTimeout(1200);
    if (args.index) await checkIndexPage(page, args);
    else await checkRunPage(page, args);
    if (args.screenshot) {
      fs.mkdirSync(path.dirname(path.resolve(args.screenshot)), { recursive: true });
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.mouse.move(2, 2);
      await page.waitForTimeout(300);
      await page.screenshot({ path: args.screenshot, fullPage: true });
      console.log(`screenshot: ${args.screenshot}`);
    }
  } finally {
    await browser.close();
  }
  for (const p of problems) failures.push(p);
  checks += 1;
  for (const f of failures) console.error(`FAIL: ${f}`);
  console.log(`browser test: ${checks - failures.length} of ${checks} checks passed (${path.basename(file)})`);
  process.exit(failures.length ? 1 : 0);
}

main().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
