// summary.json for a folder of runs, like SeQTO's results/summary.json: per run, its
// top-3 Pareto picks and every candidate's values. Values are copied from each
// run's report.json, never recomputed. Paths are relative to the summary's folder.
'use strict';

const { latencyOf } = require('./charts');

const COLUMNS = ['cycle', 'accuracy_loss', 'size_bytes', 'latency_ms'];

// runs: [{name, report}] in the order to write them.
function build(runs) {
  const out = { format: 'seqto-summary/1', columns: COLUMNS, runs: {} };
  for (const { name, report } of runs) {
    const cycles = report.cycles.slice().sort((a, b) => a.index - b.index);
    const byIndex = new Map(cycles.map((c) => [c.index, c]));
    const top3 = report.pareto.slice().sort((a, b) => a.rank - b.rank).filter((p) => p.rank <= 3).slice(0, 3)
      .map((p) => {
        const c = byIndex.get(p.cycle);
        return {
          rank: p.rank,
          cycle: p.cycle,
          excluded: c.excluded,
          model_file: `${name}/${c.model_file}`,
          accuracy_loss: c.metrics.accuracy_loss,
          size_bytes: c.size_bytes,
          latency_ms: latencyOf(c.latency_ms),
          objectives: p.objectives,
          distance: p.distance === undefined ? null : p.distance,
        };
      });
    out.runs[name] = {
      model: report.model,
      report: `${name}/report.html`,
      settings: report.settings,
      baseline: report.baseline,
      candidates: cycles.length,
      pareto_front: report.pareto.map((p) => p.cycle),
      top3,
      // One row per candidate in cycle order, columns as "columns" above.
      all_values: cycles.map((c) => [c.index, c.metrics.accuracy_loss, c.size_bytes, latencyOf(c.latency_ms)]),
    };
  }
  return out;
}

module.exports = { build, COLUMNS };
