// Static figures: ECharts' server-side SVG renderer (no browser, no DOM) writes the
// SVG; librsvg's rsvg-convert (Debian librsvg2-bin) rasterizes it to PNG. rsvg-convert
// is a real SVG renderer that starts in milliseconds and needs no display or browser,
// so `seqto tune` on a CI machine gets its PNGs cheaply; the PNG is the SVG, pixel for
// pixel, at 2x for sharp text in papers and CI logs.
'use strict';

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const echarts = require('echarts');

const WIDTH = 1100;
const HEIGHT = 560;

function renderSvg(option, width = WIDTH, height = HEIGHT) {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  try {
    chart.setOption(option);
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

// The first executable rsvg-convert: $SEQTO_RSVG_CONVERT, else PATH.
function findRsvgConvert() {
  const env = process.env.SEQTO_RSVG_CONVERT;
  if (env) return env;
  for (const dir of (process.env.PATH || '/usr/bin:/bin').split(':')) {
    const p = path.join(dir || '.', 'rsvg-convert');
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch (e) { /* keep looking */ }
  }
  return null;
}

// A failed write (disk full) leaves neither a partial file nor its temporary.
function writeAtomic(file, data) {
  const tmp = file + '.tmp';
  try {
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, file);
  } catch (e) {
    try { fs.unlinkSync(tmp); } catch (e2) { /* nothing written */ }
    throw e;
  }
}

// Writes DIR/<name>.svg and DIR/<name>.png for each {name, option}. Returns the files
// written and warnings (no rasterizer: PNGs skipped, one warning). Throws on I/O errors.
function writeFigures(dir, figures) {
  fs.mkdirSync(dir, { recursive: true });
  const rsvg = findRsvgConvert();
  const written = [];
  const warnings = [];
  if (!rsvg) warnings.push('rsvg-convert not found (Debian package librsvg2-bin; or set $SEQTO_RSVG_CONVERT): PNG figures skipped');
  for (const { name, option } of figures) {
    const svgFile = path.join(dir, name + '.svg');
    writeAtomic(svgFile, renderSvg(option));
    written.push(svgFile);
    if (!rsvg) continue;
    const pngFile = path.join(dir, name + '.png');
    const tmp = pngFile + '.tmp';
    const r = spawnSync(rsvg, ['--zoom=2', '--background-color=white', '--format=png', '--output=' + tmp, svgFile],
      { encoding: 'utf8' });
    if (r.error || r.status !== 0) {
      try { fs.unlinkSync(tmp); } catch (e) { /* nothing written */ }
      const why = r.error ? r.error.message : (r.stderr || '').trim().split('\n').pop() || 'exit ' + r.status;
      warnings.push(`${pngFile}: rsvg-convert failed (${why}): PNG skipped`);
      continue;
    }
    fs.renameSync(tmp, pngFile);
    written.push(pngFile);
  }
  return { written, warnings };
}

module.exports = { renderSvg, writeFigures, findRsvgConvert, writeAtomic, WIDTH, HEIGHT };
