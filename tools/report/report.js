#!/usr/bin/env node
// seqto's report writer, run by `seqto report` (src/cli/cmd_report.cc) after it has
// validated every report.json against docs/report-format.md:
//
//   node report.js run RUN_DIR            RUN_DIR/report.html + RUN_DIR/figures/*.{svg,png}
//   node report.js runs DIR NAME...       the above for each DIR/NAME, then
//                                         DIR/summary.json, DIR/index.html, DIR/figures/
//
// stdout: one line per page written. stderr: "warning: ..." lines, and on failure one
// "error: ..." line; exit 1 for a user error (unwritable folder, ...), 2 for a bug.
'use strict';

const fs = require('fs');
const path = require('path');

class UserError extends Error {}

function loadDeps() {
  try {
    return {
      C: require('./lib/charts'),
      page: require('./lib/page'),
      figures: require('./lib/figures'),
      summary: require('./lib/summary'),
    };
  } catch (e) {
    if (e.code === 'MODULE_NOT_FOUND' && /echarts/.test(e.message)) {
      throw new UserError(`${path.join(__dirname, 'node_modules', 'echarts')} is missing: ` +
        'install it with: npm ci --ignore-scripts --prefix tools/report');
    }
    throw e;
  }
}

function readReport(file) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UserError(`${file}: cannot read: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`${file}: invalid JSON: ${e.message}`);
  }
}

function now() {
  return new Date().toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

function writeRun(deps, runDir, generatedAt, warnings) {
  const { C, page, figures } = deps;
  const report = readReport(path.join(runDir, 'report.json'));
  const view = C.prepareRun(report);
  const figs = [
    { name: 'objectives', option: C.objectivesOption(view, { static: true }) },
    { name: 'group_errors', option: C.groupsOption(view, { static: true }) },
    { name: 'tradeoff', option: C.tradeoffOption(view, { static: true }) },
    { name: 'latency', option: C.latencyOption(view, { static: true }) },
  ].filter((f) => f.option);
  const figDir = path.join(runDir, 'figures');
  const res = figures.writeFigures(figDir, figs);
  res.warnings.forEach((w) => warnings.add(w));
  const rel = res.written.map((f) => path.relative(runDir, f).split(path.sep).join('/'));
  const html = page.runPage(report, { runName: path.basename(path.resolve(runDir)), figures: rel, generatedAt });
  const out = path.join(runDir, 'report.html');
  figures.writeAtomic(out, html);
  console.log(`report: ${out}`);
  console.log(`figures: ${rel.map((f) => path.join(runDir, f)).join(' ')}`);
  return report;
}

function main(argv) {
  const [mode, dir, ...names] = argv;
  if (!['run', 'runs'].includes(mode) || !dir || (mode === 'runs' && !names.length)) {
    throw new UserError('usage: node report.js run RUN_DIR | node report.js runs DIR NAME...');
  }
  const deps = loadDeps();
  const generatedAt = now();
  // The same warning (e.g. no rasterizer) once, not once per run.
  const warnings = new Set();
  if (mode === 'run') {
    writeRun(deps, dir, generatedAt, warnings);
  } else {
    const runs = names.map((name) => ({
      name,
      href: `${name}/report.html`,
      report: writeRun(deps, path.join(dir, name), generatedAt, warnings),
    }));
    const { C, page, figures, summary } = deps;
    const summaryFile = path.join(dir, 'summary.json');
    figures.writeAtomic(summaryFile, JSON.stringify(summary.build(runs), null, 2) + '\n');
    console.log(`summary: ${summaryFile}`);
    const views = runs.map((r) => ({ name: r.name, view: C.prepareRun(r.report) }));
    const res = figures.writeFigures(path.join(dir, 'figures'), [
      { name: 'compare_tradeoff', option: C.compareTradeoffOption(views, { static: true }) },
      { name: 'compare_cycles', option: C.compareCyclesOption(views, { static: true }) },
    ]);
    res.warnings.forEach((w) => warnings.add(w));
    const rel = res.written.map((f) => path.relative(dir, f).split(path.sep).join('/'));
    const index = path.join(dir, 'index.html');
    figures.writeAtomic(index, page.indexPage(runs, { dirName: path.basename(path.resolve(dir)), figures: rel, generatedAt }));
    console.log(`index: ${index}`);
  }
  warnings.forEach((w) => console.error(`warning: ${w}`));
}

try {
  main(process.argv.slice(2));
} catch (e) {
  if (e instanceof UserError || ['EACCES', 'EROFS', 'ENOSPC', 'ENOENT', 'ENOTDIR', 'EISDIR'].includes(e.code)) {
    console.error(`error: ${e.message.split('\n')[0]}`);
    process.exit(1);
  }
  console.error(`error: internal: ${(e.stack || String(e)).split('\n').slice(0, 2).join(' ')}`);
  process.exit(2);
}
