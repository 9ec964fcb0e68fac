#!/usr/bin/env node
// Runs an ONNX model in ONNX Runtime (npm onnxruntime-node, from NODE_PATH)
// for kiln's tests: the inputs are raw little-endian files described by
// DIR/inputs.json ([{"name", "dtype": "float32" | "float64" | "int32" |
// "int64" | "bool", "dims", "file"}]); the outputs are written to DIR the
// same way, described by DIR/outputs.json. All graph optimizations on, one
// intra-op thread. Exit status 1 with the error on stderr on failure.
//   node onnxruntime_run.js MODEL DIR
'use strict';
const fs = require('fs');
const path = require('path');

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, int64: BigInt64Array,
  bool: Uint8Array,
};

async function main() {
  const [model, dir] = process.argv.slice(2);
  if (!model || !dir) throw new Error('usage: onnxruntime_run.js MODEL DIR');
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const inp of JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'))) {
    const bytes = fs.readFileSync(path.join(dir, inp.file));
    const Array = ARRAYS[inp.dtype];
    if (!Array) throw new Error(`input ${inp.name}: dtype ${inp.dtype} not handled`);
    const copy = new Uint8Array(bytes.length);  // aligned for the typed array
    copy.set(bytes);
    feeds[inp.name] = new ort.Tensor(inp.dtype, new Array(copy.buffer), inp.dims);
  }
  const results = await session.run(feeds);
  const outputs = [];
  session.outputNames.forEach((name, i) => {
    const t = results[name];
    const file = `output_${i}.bin`;
    fs.writeFileSync(path.join(dir, file),
                     Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    outputs.push({name, dtype: t.type, dims: t.dims, file});
  });
  fs.writeFileSync(path.join(dir, 'outputs.json'), JSON.stringify(outputs));
}

main().catch((e) => { console.error(`onnxruntime_run: ${e.message}`); process.exit(1); });
