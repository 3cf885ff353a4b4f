// Times an ONNX model in ONNX Runtime's CPU library (npm onnxruntime-node, as installed by
// tests/onnx/models/setup.sh) on NumPy inputs, the way Kiln's figures against it are taken:
// intraOpNumThreads T, interOpNumThreads 1, all graph optimisations, one warm-up run, then R timed
// session.run calls. Prints the mean and the median in milliseconds.
//   node bench/ort_time.mjs MODEL.onnx THREADS REPEATS NAME=FILE.npy [NAME=FILE.npy ...]
// ONNX_MODELS_DIR: where setup.sh installed the npm packages (default build/ci/onnx_models);
// ORT_OUTPUTS_DIR: also write each float32 output of the last run there as OUTPUT_NAME.npy.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const modelsDir = process.env.ONNX_MODELS_DIR ?? 'build/ci/onnx_models';
const ort = createRequire(path.resolve(modelsDir, 'package.json'))('onnxruntime-node');
const [model, threads, repeats, ...feeds] = process.argv.slice(2);
if (!model || !(Number(threads) > 0) || !(Number(repeats) > 0) || feeds.length === 0) {
  console.error('usage: node bench/ort_time.mjs MODEL.onnx THREADS REPEATS NAME=FILE.npy ...');
  process.exit(2);
}

// A little-endian .npy file of int64, int32 or float32 as an ort.Tensor.
function readNpy(file) {
  const b = fs.readFileSync(file);
  const headerLen = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + headerLen).toString('latin1');
  const descr = header.match(/'descr': '([^']+)'/)[1];
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = b.buffer.slice(b.byteOffset + 10 + headerLen, b.byteOffset + b.length);
  const types = { '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array], '<f4': ['float32', Float32Array] };
  if (!types[descr]) throw new Error(`${file}: dtype ${descr} is not one of ${Object.keys(types).join(', ')}`);
  const [type, Array] = types[descr];
  return new ort.Tensor(type, new Array(data), shape);
}

const inputs = {};
for (const f of feeds) {
  const eq = f.indexOf('=');
  inputs[f.slice(0, eq)] = readNpy(f.slice(eq + 1));
}
const session = await ort.InferenceSession.create(model, {
  intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential',
});
await session.run(inputs);
const times = [];
for (let i = 0; i < Number(repeats); ++i) {
  const t0 = performance.now();
  await session.run(inputs);
  times.push(performance.now() - t0);
}
const outputsDir = process.env.ORT_OUTPUTS_DIR;
if (outputsDir) {
  const outputs = await session.run(inputs);
  fs.mkdirSync(outputsDir, { recursive: true });
  for (const [name, t] of Object.entries(outputs)) {
    if (t.type !== 'float32') continue;
    const header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${t.dims.join(', ')}${t.dims.length === 1 ? ',' : ''}), }`;
    const padded = header.padEnd(Math.ceil((header.length + 11) / 64) * 64 - 11, ' ') + '\n';
    const head = Buffer.alloc(10);
    head.write('\x93NUMPY', 0, 'latin1');
    head[6] = 1;
    head.writeUInt16LE(padded.length, 8);
    fs.writeFileSync(path.join(outputsDir, `${name}.npy`),
                     Buffer.concat([head, Buffer.from(padded, 'latin1'), Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)]));
  }
}
const mean = times.reduce((a, b) => a + b, 0) / times.length;
times.sort((a, b) => a - b);
console.log(`onnxruntime ${ort.env.versions?.common ?? ''} ${threads} threads: mean ${mean.toFixed(2)} ms, ` +
            `median ${times[times.length >> 1].toFixed(2)} ms over ${repeats} runs`);
