#!/usr/bin/env node
// Runs an ONNX model with ONNX Runtime (onnxruntime-node): seqto's oracle in tests,
// its `ort` runner and its benchmark peer.
//
//   node tools/ort/ort_run.js MODEL --input NAME=FILE.npy ... [--output-dir DIR]
//        [--threads T] [--runs R] [--warmup W] [--json F] [--manifest F]
//        [--batches N] [--time-input NAME=FILE.npy ...]
//
// Inputs are .npy files (NAME=FILE.npy, or FILE.npy alone for a single-input model).
// Every output is written as DIR/<name>.npy ('/', '\' and ':' in names become '_');
// --manifest F also writes F, a JSON list of {"name", "file", "type", "shape"} in the
// model's output order (so callers can map files back to output names).
// With --batches N the model runs N times in this one process (Node.js start-up and
// model loading are paid once): every input is given N times, its k-th --input is
// batch k's, and each output is the concatenation of the N batches' outputs along
// dimension 0 (batches may differ in size there; a scalar output needs N = 1).
// With --runs R the model runs W untimed times, then R timed times inside this process
// (so process and session start-up do not count) on the --time-input tensors, or
// without them on the first batch; the latency statistics go to stdout and, with
// --json F, to F as
//   {"model", "runner": "ort", "ort_version", "batch", "threads", "runs", "warmup",
//    "latency_ms": {"mean", "p50", "p95", "min", "max", "stddev"}}
// Session: intraOpNumThreads=T (0: ORT's default), interOpNumThreads=1, sequential
// execution, graph optimization level 'all', CPU execution provider.
// Errors: one line on stderr, exit code 1.
'use strict';

const fs = require('fs');
const path = require('path');

const USAGE =
  'usage: node ort_run.js MODEL --input NAME=FILE.npy ... [--output-dir DIR] [--threads T] ' +
  '[--runs R] [--warmup W] [--json F] [--manifest F] [--batches N] [--time-input NAME=FILE.npy ...]';

class UserError extends Error {}

function fail(message) {
  const line = String(message).replace(/\s*\n\s*/g, ' ').trim();
  process.stderr.write(`ort_run: ${line}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------------------
// Arguments

function parseIntArg(flag, text, min) {
  if (!/^[0-9]+$/.test(text || '')) throw new UserError(`${flag}: expected an integer >= ${min}, got '${text}'`);
  const v = Number(text);
  if (v < min) throw new UserError(`${flag}: expected an integer >= ${min}, got '${text}'`);
  return v;
}

function parseArgs(argv) {
  const args = {
    model: null, inputs: [], timeInputs: [], batches: 0, outputDir: null, threads: 0, runs: 0, warmup: 3, json: null,
    manifest: null,
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    const flag = eq > 0 ? a.slice(0, eq) : a;
    const takesValue = [
      '--input', '-i', '--time-input', '--batches', '--output-dir', '-o', '--threads', '--runs', '--warmup', '--json',
      '--manifest',
    ];
    let value;
    if (takesValue.includes(flag)) {
      if (eq > 0) value = a.slice(eq + 1);
      else if (i + 1 < argv.length) value = argv[++i];
      else throw new UserError(`${flag}: missing value`);
    }
    switch (flag) {
      case '-h':
      case '--help':
        process.stdout.write(USAGE + '\n');
        process.exit(0);
        break;
      case '--input':
      case '-i':
        args.inputs.push(value);
        break;
      case '--time-input':
        args.timeInputs.push(value);
        break;
      case '--batches':
        args.batches = parseIntArg(flag, value, 1);
        break;
      case '--output-dir':
      case '-o':
        args.outputDir = value;
        break;
      case '--threads':
        args.threads = parseIntArg(flag, value, 0);
        break;
      case '--runs':
        args.runs = parseIntArg(flag, value, 1);
        break;
      case '--warmup':
        args.warmup = parseIntArg(flag, value, 0);
        break;
      case '--json':
        args.json = value;
        break;
      case '--manifest':
        args.manifest = value;
        break;
      default:
        if (a.startsWith('-')) throw new UserError(`unknown option '${a}' (${USAGE})`);
        if (args.model !== null) throw new UserError(`unexpected argument '${a}': the model is already '${args.model}'`);
        args.model = a;
    }
  }
  if (args.model === null) throw new UserError(`missing MODEL (${USAGE})`);
  if (args.json && !args.runs) throw new UserError('--json needs --runs R');
  if (args.manifest && !args.outputDir) throw new UserError('--manifest needs --output-dir DIR');
  if (!args.outputDir && !args.runs) throw new UserError('nothing to do: give --output-dir DIR and/or --runs R');
  if (args.timeInputs.length && !args.runs) throw new UserError('--time-input needs --runs R');
  return args;
}

// ---------------------------------------------------------------------------
// .npy files (format versions 1-3, little-endian, C order)

// npy type code (without byte order) -> [ORT tensor type, typed array, bytes per element]
const NPY_TYPES = {
  f4: ['float32', Float32Array, 4],
  f8: ['float64', Float64Array, 8],
  f2: ['float16', Uint16Array, 2],
  i8: ['int64', BigInt64Array, 8],
  u8: ['uint64', BigUint64Array, 8],
  i4: ['int32', Int32Array, 4],
  u4: ['uint32', Uint32Array, 4],
  i2: ['int16', Int16Array, 2],
  u2: ['uint16', Uint16Array, 2],
  i1: ['int8', Int8Array, 1],
  u1: ['uint8', Uint8Array, 1],
  b1: ['bool', Uint8Array, 1],
};
const ORT_TO_NPY = {
  float32: '<f4', float64: '<f8', float16: '<f2', int64: '<i8', uint64: '<u8', int32: '<i4', uint32: '<u4',
  int16: '<i2', uint16: '<u2', int8: '|i1', uint8: '|u1', bool: '|b1',
};

function headerField(header, key) {
  const m = header.match(new RegExp(`['"]${key}['"]\\s*:\\s*('([^']*)'|"([^"]*)"|\\(([^)]*)\\)|(True|False))`));
  if (!m) return null;
  if (m[2] !== undefined) return m[2];
  if (m[3] !== undefined) return m[3];
  if (m[4] !== undefined) return '(' + m[4] + ')';
  return m[5];
}

function readNpy(file) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    throw new UserError(`${file}: cannot read file (${e.code || e.message})`);
  }
  if (buf.length < 10 || buf[0] !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY')
    throw new UserError(`${file}: not a .npy file (bad magic at byte 0)`);
  const major = buf[6];
  let headerLen;
  let start;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (buf.length < 12) throw new UserError(`${file}: truncated header at byte 8`);
    headerLen = buf.readUInt32LE(8);
    start = 12;
  } else {
    throw new UserError(`${file}: unsupported .npy version ${major}`);
  }
  if (start + headerLen > buf.length) throw new UserError(`${file}: truncated header`);
  const header = buf.toString(major === 3 ? 'utf8' : 'latin1', start, start + headerLen);
  const descr = headerField(header, 'descr');
  if (descr === null) throw new UserError(`${file}: missing descr in header`);
  if (descr.length !== 3 || descr[0] === '>' || !NPY_TYPES[descr.slice(1)])
    throw new UserError(`${file}: unsupported dtype '${descr}'`);
  if (headerField(header, 'fortran_order') !== 'False')
    throw new UserError(`${file}: Fortran-order arrays are not supported`);
  const shapeText = headerField(header, 'shape');
  if (shapeText === null) throw new UserError(`${file}: missing shape in header`);
  const dims = shapeText
    .slice(1, -1)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      if (!/^[0-9]+L?$/.test(s)) throw new UserError(`${file}: bad shape ${shapeText}`);
      return parseInt(s, 10);
    });
  const [type, ArrayType, size] = NPY_TYPES[descr.slice(1)];
  const count = dims.reduce((a, b) => a * b, 1);
  const dataStart = start + headerLen;
  const nbytes = count * size;
  if (buf.length - dataStart < nbytes)
    throw new UserError(
      `${file}: truncated data: expected ${nbytes} bytes from byte ${dataStart} for ${type}[${dims.join('x')}]`);
  // A fresh, aligned ArrayBuffer (Buffers from readFileSync may be views at odd offsets).
  const ab = buf.buffer.slice(buf.byteOffset + dataStart, buf.byteOffset + dataStart + nbytes);
  return { type, dims, data: new ArrayType(ab) };
}

function writeNpy(file, type, dims, data) {
  const descr = ORT_TO_NPY[type];
  if (!descr) throw new UserError(`${file}: cannot write a tensor of type '${type}' to .npy`);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  while ((10 + header.length + 1) % 64 !== 0) header += ' ';
  header += '\n';
  const pre = Buffer.alloc(10);
  pre[0] = 0x93;
  pre.write('NUMPY', 1, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const tmp = `${file}.tmp`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });  // a full disk must not keep the partial file
    throw new UserError(`${file}: cannot write file (${e.code || e.message})`);
  }
}

// ---------------------------------------------------------------------------
// Statistics (as seqto's core/stats: numpy-style linear percentiles, sample stddev)

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const pos = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

function summarize(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const n = s.length;
  const mean = s.reduce((a, b) => a + b, 0) / n;
  const variance = n > 1 ? s.reduce((a, v) => a + (v - mean) * (v - mean), 0) / (n - 1) : 0;
  return { mean, p50: percentile(s, 50), p95: percentile(s, 95), min: s[0], max: s[n - 1], stddev: Math.sqrt(variance) };
}

// ---------------------------------------------------------------------------
// Inputs and batches

// Splits NAME=FILE.npy (FILE.npy alone for a single-input model). A name may hold '='
// itself: the first '=' is tried, then the last.
function splitSpec(session, spec, flag) {
  const first = spec.indexOf('=');
  if (first < 0) {
    if (session.inputNames.length !== 1)
      throw new UserError(`${flag} '${spec}': use NAME=FILE.npy (the model has ${session.inputNames.length} inputs)`);
    return [session.inputNames[0], spec];
  }
  const last = spec.lastIndexOf('=');
  if (last !== first && !session.inputNames.includes(spec.slice(0, first)) &&
      session.inputNames.includes(spec.slice(0, last)))
    return [spec.slice(0, last), spec.slice(last + 1)];
  return [spec.slice(0, first), spec.slice(first + 1)];
}

// The feeds of `count` batches from NAME=FILE specs: the k-th spec of a name is batch k's.
function buildBatches(ort, session, specs, count, flag) {
  const batches = Array.from({ length: count }, () => ({}));
  const seen = {};
  for (const spec of specs) {
    const [name, file] = splitSpec(session, spec, flag);
    if (!session.inputNames.includes(name))
      throw new UserError(
        `${flag} '${name}' is not an input of the model (its inputs: ${session.inputNames.join(', ')})`);
    const k = seen[name] || 0;
    if (k >= count)
      throw new UserError(count === 1 ? `${flag} '${name}' given twice`
                                      : `${flag} '${name}' given more than ${count} times (--batches ${count})`);
    seen[name] = k + 1;
    const t = readNpy(file);
    batches[k][name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  const missing = session.inputNames.filter((n) => !seen[n]);
  if (missing.length) throw new UserError(`missing ${flag} for model input(s): ${missing.join(', ')}`);
  const short = session.inputNames.find((n) => seen[n] !== count);
  if (short !== undefined)
    throw new UserError(`${flag} '${short}' given ${seen[short]} times, expected ${count} (--batches ${count})`);
  return batches;
}

// One output's tensors from every batch, concatenated along dimension 0.
function concatBatches(name, parts) {
  const first = parts[0];
  if (parts.length === 1) return first;
  const describe = (t) => `${t.type}[${t.dims.join('x')}]`;
  if (!ORT_TO_NPY[first.type]) throw new UserError(`output '${name}': cannot write a tensor of type '${first.type}'`);
  if (first.dims.length === 0)
    throw new UserError(`output '${name}' is a scalar: it cannot be concatenated over ${parts.length} batches`);
  let rows = 0;
  let count = 0;
  for (let k = 0; k < parts.length; ++k) {
    const p = parts[k];
    if (p.type !== first.type || p.dims.length !== first.dims.length || p.dims.some((d, i) => i > 0 && d !== first.dims[i]))
      throw new UserError(`output '${name}': batch ${k} gives ${describe(p)}, batch 0 gives ${describe(first)}: ` +
                          'cannot concatenate along dimension 0');
    rows += p.dims[0];
    count += p.data.length;
  }
  const data = new first.data.constructor(count);
  let offset = 0;
  for (const p of parts) {
    data.set(p.data, offset);
    offset += p.data.length;
  }
  return { type: first.type, dims: [rows, ...first.dims.slice(1)], data };
}

// ---------------------------------------------------------------------------

function loadOrt() {
  try {
    return require('onnxruntime-node');
  } catch (e) {
    throw new UserError(
      `cannot load onnxruntime-node (${e.message.split('\n')[0]}); ` +
        `install it with: npm ci --ignore-scripts --prefix ${path.relative(process.cwd(), __dirname) || '.'}`);
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(args.model)) throw new UserError(`${args.model}: no such file`);
  const ort = loadOrt();
  ort.env.logLevel = 'error';  // no warnings on stderr (old opsets, optimizer notes): errors only

  let session;
  try {
    session = await ort.InferenceSession.create(args.model, {
      executionProviders: ['cpu'],
      graphOptimizationLevel: 'all',
      executionMode: 'sequential',
      intraOpNumThreads: args.threads,
      interOpNumThreads: 1,
      logSeverityLevel: 3,
    });
  } catch (e) {
    throw new UserError(`${args.model}: ONNX Runtime cannot load the model: ${e.message}`);
  }

  const count = args.batches || 1;
  const batches = buildBatches(ort, session, args.inputs, count, '--input');
  const timeFeeds = args.timeInputs.length
    ? buildBatches(ort, session, args.timeInputs, 1, '--time-input')[0]
    : batches[0];

  const run = async (feeds, where) => {
    try {
      return await session.run(feeds);
    } catch (e) {
      throw new UserError(`${args.model}: ONNX Runtime failed to run the model${where}: ${e.message}`);
    }
  };

  if (args.outputDir) {
    const perBatch = [];
    for (let k = 0; k < batches.length; ++k)
      perBatch.push(await run(batches[k], batches.length > 1 ? ` on batch ${k} of ${batches.length}` : ''));
    try {
      fs.mkdirSync(args.outputDir, { recursive: true });
    } catch (e) {
      throw new UserError(`${args.outputDir}: cannot create directory (${e.code || e.message})`);
    }
    const manifest = [];
    for (const name of session.outputNames) {
      const t = concatBatches(name, perBatch.map((r) => r[name]));
      let base = name.replace(/[/\\:]/g, '_');
      if (manifest.some((m) => m.base === base)) base += `_${manifest.length}`;  // names that collide once cleaned
      const file = path.join(args.outputDir, `${base}.npy`);
      writeNpy(file, t.type, t.dims, t.data);
      manifest.push({ name, base, file, type: t.type, shape: t.dims });
    }
    if (args.manifest) {
      try {
        const list = manifest.map(({ name, file, type, shape }) => ({ name, file, type, shape }));
        fs.writeFileSync(args.manifest, JSON.stringify(list, null, 2) + '\n');
      } catch (e) {
        throw new UserError(`${args.manifest}: cannot write file (${e.code || e.message})`);
      }
    }
  }

  if (args.runs) {
    // A run of the same tensors for the outputs was a warm-up too.
    const warmedUp = args.outputDir && timeFeeds === batches[0] ? 1 : 0;
    for (let i = warmedUp; i < args.warmup; ++i) await run(timeFeeds, '');
    const times = [];
    for (let i = 0; i < args.runs; ++i) {
      const t0 = process.hrtime.bigint();
      await run(timeFeeds, '');
      const t1 = process.hrtime.bigint();
      times.push(Number(t1 - t0) / 1e6);
    }
    const stats = summarize(times);
    const first = session.inputNames.length ? timeFeeds[session.inputNames[0]] : null;
    const batch = first && first.dims.length ? first.dims[0] : 1;
    const f = (v) => v.toFixed(3);
    process.stdout.write(
      `model ${args.model}  runner ort  batch ${batch}  threads ${args.threads}  runs ${args.runs}\n` +
        `latency ms: mean ${f(stats.mean)}  p50 ${f(stats.p50)}  p95 ${f(stats.p95)}  min ${f(stats.min)}  ` +
        `max ${f(stats.max)}  stddev ${f(stats.stddev)}\n`);
    if (args.json) {
      const j = {
        model: args.model,
        runner: 'ort',
        ort_version: ort.env.versions ? ort.env.versions.node : undefined,
        batch,
        threads: args.threads,
        runs: args.runs,
        warmup: args.warmup,
        latency_ms: stats,
      };
      try {
        fs.writeFileSync(args.json, JSON.stringify(j, null, 2) + '\n');
      } catch (e) {
        throw new UserError(`${args.json}: cannot write file (${e.code || e.message})`);
      }
    }
  }
}

main().then(
  () => process.exit(0),
  (e) => fail(e instanceof UserError ? e.message : `internal error: ${e && e.stack ? e.stack : e}`));
