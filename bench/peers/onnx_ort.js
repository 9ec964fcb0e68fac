#!/usr/bin/env node
// ONNX Runtime, the reference ONNX runtime, on the models kiln's `./run bench
// onnx` imports (test/onnx/models/<name>/model.onnx, exported from PyTorch by
// bench/peers/onnx_export.py): inference at the same batch, with random inputs
// drawn as kiln-onnx bench draws them (floats in [-1, 1), integers in
// [0, int-max)), in ORT's strongest CPU setting: every graph optimization,
// sequential execution, intra-op threads 1 (.t1) or 2 (.t2).
//
// Prints per model and thread count, the median over 5 repetitions of the
// median run of each (after warm-up), and the fastest run (noise only adds
// time: on a shared machine the minimums compare more steadily):
//   BENCH onnx.<name>.infer.ort.t<T> <ms> ms
//   BENCH onnx.<name>.infer.ort.t<T>.min <ms> ms
// With CNN_DIR (bench/peers/cnn_export.py's models), also each CNN at batch
// 1 and 8 (224x224 images): BENCH onnx.<cnn>.b<B>.infer.ort.t<T>. With
// TRANSFORMER_DIR (bench/peers/transformer_export.py's models), also
// bert_base and gpt2_small at batch 1: BENCH onnx.<name>.b1.infer.ort.t<T>,
// and .import_ms: the session's creation and its first run.
// Usage: node onnx_ort.js MODELS_DIR [filter] [CNN_DIR] [TRANSFORMER_DIR]
//        (runs for "", "onnx", "onnx.<name>")
// onnxruntime-node comes from NODE_PATH (./run installs it with
// `npm install --ignore-scripts` into .cache/onnxruntime-node).
'use strict';
const path = require('path');

const [modelsDir, filter = '', cnnDir = '', transformerDir = ''] = process.argv.slice(2);
const MODELS = [
  {name: 'lenet', input: 'image', dtype: 'float32', dims: [64, 1, 28, 28], runs: 100},
  {name: 'gpt', input: 'ids', dtype: 'int64', dims: [16, 64], intMax: 96, runs: 20},
];
// The CNNs, runs per repetition by batch (a convnext_tiny batch of 8 takes ~1 s).
const CNNS = {resnet18: [20, 4], mobilenet_v2: [40, 8], efficientnet_b0: [30, 6],
              shufflenet_v2_x0_5: [60, 12], convnext_tiny: [8, 2]};
if (cnnDir !== '') {
  for (const [cnn, runs] of Object.entries(CNNS)) {
    [1, 8].forEach((batch, k) => MODELS.push({
      name: cnn, tag: `${cnn}.b${batch}`, dir: cnnDir, input: 'image', dtype: 'float32',
      dims: [batch, 3, 224, 224], runs: runs[k]}));
  }
}
// The transformers at batch 1: ids [1, seq] below the vocabulary's size.
const TRANSFORMERS = {bert_base: {seq: 128, runs: 6}, gpt2_small: {seq: 256, runs: 3}};
if (transformerDir !== '') {
  for (const [name, t] of Object.entries(TRANSFORMERS)) {
    MODELS.push({name, tag: `${name}.b1`, dir: transformerDir, input: 'ids', dtype: 'int64',
                 dims: [1, t.seq], intMax: 30000, runs: t.runs, importMs: true});
  }
}

function wanted(name) {
  return filter === '' || filter === 'onnx' || `onnx.${name}.`.startsWith(filter) ||
         filter.startsWith(`onnx.${name}.`);
}

// A fixed-seed generator (xorshift), so every run feeds the same numbers.
function rng(seed) {
  let s = BigInt(seed) || 1n;
  return () => {
    s ^= (s << 13n) & 0xffffffffffffffffn;
    s ^= s >> 7n;
    s ^= (s << 17n) & 0xffffffffffffffffn;
    return Number(s & 0xfffffffn) / 0x10000000;
  };
}

function input(ort, m) {
  const n = m.dims.reduce((a, b) => a * b, 1);
  const r = rng(7);
  if (m.dtype === 'int64') {
    const v = new BigInt64Array(n);
    for (let i = 0; i < n; ++i) v[i] = BigInt(Math.floor(r() * m.intMax));
    return new ort.Tensor('int64', v, m.dims);
  }
  const v = new Float32Array(n);
  for (let i = 0; i < n; ++i) v[i] = 2 * r() - 1;
  return new ort.Tensor('float32', v, m.dims);
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

async function main() {
  if (!MODELS.some((m) => wanted(m.name))) return;
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    console.log(`# ONNX Runtime peer skipped: onnxruntime-node not found (${e.message.split('\n')[0]})`);
    return;
  }
  for (const m of MODELS) {
    if (!wanted(m.name)) continue;
    const feeds = {[m.input]: input(ort, m)};
    for (const threads of [1, 2]) {
      const t0 = process.hrtime.bigint();
      const session = await ort.InferenceSession.create(path.join(m.dir || modelsDir, m.name, 'model.onnx'), {
        intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
        graphOptimizationLevel: 'all',
      });
      await session.run(feeds);
      const importMs = Number(process.hrtime.bigint() - t0) / 1e6;
      for (let i = 1; i < Math.max(5, m.runs / 5); ++i) await session.run(feeds);
      const reps = [];
      let fastest = Infinity;
      for (let rep = 0; rep < 5; ++rep) {
        const t = [];
        for (let i = 0; i < m.runs; ++i) {
          const t0 = process.hrtime.bigint();
          await session.run(feeds);
          t.push(Number(process.hrtime.bigint() - t0) / 1e6);
        }
        reps.push(median(t));
        fastest = Math.min(fastest, ...t);
      }
      const tag = m.tag || m.name;
      console.log(`BENCH onnx.${tag}.infer.ort.t${threads} ${median(reps).toFixed(4)} ms`);
      console.log(`BENCH onnx.${tag}.infer.ort.t${threads}.min ${fastest.toFixed(4)} ms`);
      if (m.importMs) console.log(`BENCH onnx.${tag}.infer.ort.t${threads}.import_ms ${importMs.toFixed(1)} ms`);
      await session.release();
    }
  }
  console.log(`# ONNX Runtime ${ort.env.versions ? ort.env.versions.common : ''}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
