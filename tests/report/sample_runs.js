// Writes realistic seqto run directories (report.json + dummy candidate .onnx files)
// for the report tests, in the format of docs/report-format.md. The numbers follow
// what a tuning run of a small CNN looks like: the fully quantized model loses a few
// points of accuracy and is ~4x smaller than the float model; each cycle gives one
// more group back to float, so accuracy loss falls (noisily) while size grows.
// The Pareto front is computed here the way the tuner does (src/eval/pareto.h):
// objectives min-max normalized to [0, 100] over all cycles, non-dominated
// candidates ranked by Euclidean distance to the ideal point (0, ..., 0).
'use strict';

const fs = require('fs');
const path = require('path');

// Small deterministic PRNG (mulberry32) so every test run sees the same data.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const OP_PATTERN = ['Conv', 'Conv', 'Conv', 'Add', 'Conv', 'Conv', 'Conv', 'Add', 'Conv', 'MatMul', 'Conv', 'Gemm'];

function objectiveValue(cycle, name) {
  if (name === 'accuracy_loss') return cycle.metrics.accuracy_loss;
  if (name === 'size_bytes') return cycle.size_bytes;
  if (name === 'latency_ms') return cycle.latency_ms.p50;  // the tuner's latency objective
  throw new Error('unknown objective ' + name);
}

function dominates(a, b) {
  let strictly = false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) strictly = true;
  }
  return strictly;
}

// Every non-dominated cycle, best first (the tuner writes the whole front).
function paretoFront(cycles, objectives) {
  const raw = cycles.map((c) => objectives.map((o) => objectiveValue(c, o)));
  const norm = raw.map((r) => r.slice());
  objectives.forEach((_, j) => {
    const col = raw.map((r) => r[j]);
    const lo = Math.min(...col), hi = Math.max(...col);
    norm.forEach((r, i) => { r[j] = hi > lo ? (100 * (raw[i][j] - lo)) / (hi - lo) : 0; });
  });
  const front = [];
  raw.forEach((r, i) => { if (!raw.some((q, k) => k !== i && dominates(q, r))) front.push(i); });
  const dist = (i) => Math.sqrt(norm[i].reduce((s, v) => s + v * v, 0));
  front.sort((x, y) => dist(x) - dist(y) || x - y);
  return front.map((i, r) => ({
    rank: r + 1,
    cycle: cycles[i].index,
    objectives: Object.fromEntries(objectives.map((o, j) => [o, norm[i][j]])),
    distance: dist(i),
  }));
}

// Options: cycles, groups, seed, objectives, withGroups (false drops "groups"),
// mode ('static' | 'dynamic'), ranker, model, busy (true adds machine_busy: the
// tuner's busy-machine warning). Every 5th candidate from 3 on has an unstable
// latency (p95 over 1.5 x p50), as the tuner flags it. Latency grows with k: from
// about k = 15 on a candidate is slower than the float model (the report's red).
function makeRun(dir, opts = {}) {
  const nCycles = opts.cycles ?? 20;
  const nGroups = opts.groups ?? 24;
  const rand = rng(opts.seed ?? 7);
  const gauss = () => {
    const u = Math.max(rand(), 1e-12), v = rand();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  };
  const objectives = opts.objectives ?? ['accuracy_loss', 'size_bytes', 'latency_ms'];
  const model = opts.model ?? 'examples/fashion-mnist/mobilenetv2.onnx';

  // Groups in execution order; weight bytes (float) decide how much each one adds
  // to the model size when it goes back to float.
  const groups = [];
  for (let g = 0; g < nGroups; g++) {
    const op = OP_PATTERN[g % OP_PATTERN.length];
    const hasWeight = op !== 'Add';
    const depth = g / Math.max(1, nGroups - 1);
    groups.push({
      name: g === nGroups - 1 ? 'classifier/Gemm' : `features.${g}/${op}`,
      op_type: op,
      order: g,
      weight_sqnr_db: hasWeight ? 38 + 8 * rand() - 6 * depth : null,
      qdq_sqnr_db: 30 + 10 * rand() - 8 * depth,
      xmodel_sqnr_db: 34 - 22 * depth + 4 * gauss(),
      weightBytes: hasWeight ? Math.round(4000 + 60000 * depth * rand() + 8000 * rand()) : 0,
    });
    // MACs at batch 1: a conv reuses each weight over a feature map that shrinks with
    // depth; a MatMul/Gemm once; an Add does none.
    const g1 = groups[g];
    g1.macs = !hasWeight ? 0 : op === 'Conv' ? Math.round(g1.weightBytes / 4) * Math.round(784 / (1 + 15 * depth))
      : Math.round(g1.weightBytes / 4);
  }
  const norm = (vals) => {
    const lo = Math.min(...vals), hi = Math.max(...vals);
    return vals.map((v) => (hi > lo ? (v - lo) / (hi - lo) : 0));
  };
  const nx = norm(groups.map((g) => g.xmodel_sqnr_db));
  const nq = norm(groups.map((g) => g.qdq_sqnr_db));
  groups.forEach((g, i) => { g.seqto_score = 0.5 * nx[i] + 0.5 * nq[i]; });
  // The default ranker excludes the most damaged groups (lowest SQNR) first.
  const ranked = groups.slice().sort((a, b) => a.seqto_score - b.seqto_score || a.order - b.order);

  const floatSize = 420000 + groups.reduce((s, g) => s + g.weightBytes, 0);
  const floatLatency = 1.9;
  const fullLoss = opts.mode === 'dynamic' ? 3.1 : 6.4;
  const fs0 = Math.round(floatSize * 0.29);
  fs.mkdirSync(path.join(dir, 'models'), { recursive: true });

  const cycles = [];
  let size = fs0;
  for (let k = 0; k < nCycles; k++) {
    const excluded = ranked.slice(0, k).map((g) => g.name);
    if (k > 0) size += Math.round(ranked[k - 1].weightBytes * 0.75) + 180;  // float weight - int8 weight + Q/DQ removed
    const recovered = 1 - Math.exp(-k / 4.5);
    const loss = Math.max(0, fullLoss * (1 - recovered) + 0.35 * gauss());
    const disagreement = loss * 1.15 + 0.4 * rand();
    const lat = floatLatency * (0.62 + 0.025 * k) + 0.05 * gauss();
    const modelFile = `models/cycle_${String(k).padStart(3, '0')}.onnx`;
    // A dummy candidate file: the report only links to it.
    fs.writeFileSync(path.join(dir, modelFile), Buffer.alloc(64, k));
    cycles.push({
      index: k,
      excluded,
      model_file: modelFile,
      metrics: {
        accuracy_loss: +loss.toFixed(4),
        top1_disagreement: +disagreement.toFixed(4),
        top5_overlap: +Math.min(1, 0.93 + 0.003 * k + 0.01 * rand()).toFixed(4),
        kendall_tau: +Math.min(1, 0.71 + 0.012 * k + 0.02 * rand()).toFixed(4),
        sqnr_db: +(17 + 1.1 * k + gauss()).toFixed(3),
        kl_divergence: +(0.04 * Math.exp(-k / 5) + 0.002 * rand()).toFixed(5),
      },
      size_bytes: size,
      latency_ms: {
        mean: +lat.toFixed(4),
        p50: +(lat - 0.01).toFixed(4),
        p95: +(lat * (k % 5 === 3 ? 2.1 : 1.12)).toFixed(4),
        stddev: +(0.04 + 0.02 * rand()).toFixed(4),
        unstable: k % 5 === 3,
        other_cores: opts.busy ? 1.2 : 0.05,
        busy: !!opts.busy,
      },
    });
  }

  const report = {
    model,
    settings: {
      mode: opts.mode ?? 'static',
      per_channel: true,
      activation_type: 'uint8',
      weight_type: 'int8',
      calibration: 'minmax',
      calibration_samples: 256,
      ranker: opts.ranker ?? 'damage',
      strategy: 'exclude',
      objectives,
      threshold: 0.5,
      runner: 'engine',
      eval_samples: 1000,
      latency_runs: 50,
      warmup_runs: 5,
      seed: 1,
    },
    baseline: {
      size_bytes: floatSize,
      latency_ms: { mean: floatLatency, p50: 1.88, p95: 2.11, stddev: 0.05 },
      accuracy: { top1: 90.58, top5: 99.71 },
    },
    groups: groups.map(({ weightBytes, ...g }) => g),  // eslint-disable-line no-unused-vars
    // The model's MACs: its groups' and 4% more in nodes no group holds.
    macs: Math.round(1.04 * groups.reduce((s, g) => s + g.macs, 0)),
    cycles,
    pareto: paretoFront(cycles, objectives),
    machine_busy: opts.busy ? {
      warning: 'the machine looks busy: other processes used up to 1.20 of its 2 cores while measuring ' +
        `${nCycles} of ${nCycles} candidates with 2 threads, so latencies may be inflated (report.json: machine_busy)`,
      cores: 2, threads: 2, max_other_cores: 1.2, baseline: false, cycles: cycles.map((c) => c.index),
    } : null,
  };
  if (opts.withGroups === false) delete report.groups;
  fs.writeFileSync(path.join(dir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
  return report;
}

module.exports = { makeRun, paretoFront };

// `node sample_runs.js DIR [cycles groups seed]` writes one run (handy by hand).
if (require.main === module) {
  const [dir, c, g, s] = process.argv.slice(2);
  if (!dir) {
    console.error('usage: node sample_runs.js DIR [cycles groups seed]');
    process.exit(1);
  }
  makeRun(dir, { cycles: c ? +c : undefined, groups: g ? +g : undefined, seed: s ? +s : undefined });
  console.log('wrote ' + path.join(dir, 'report.json'));
}
