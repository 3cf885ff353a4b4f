// Times an ONNX model in ONNX Runtime's CPU library (npm onnxruntime-node, as installed by
// tests/onnx/models/setup.sh) on NumPy inputs (f32 or int64), the way Kiln's figures against it
// are taken: intraOpNumThreads T, interOpNumThreads 1, all graph optimisations, one warm-up run,
// then R timed session.run calls. Prints the mean and the median in milliseconds.
//   node bench/ort_time.mjs MODEL.onnx THREADS REPEATS NAME=FILE.npy [NAME=FILE.npy ...]
// KILN_ONNX_MODELS_DIR: where setup.sh installed the npm packages (default build/ci/onnx_models);
// ORT_OUTPUTS_DIR: also write each float32 output of one more run there as OUTPUT_NAME.npy.
import fs from 'node:fs';
import path from 'node:path';

process.env.KILN_ONNX_MODELS_DIR = path.resolve(process.env.KILN_ONNX_MODELS_DIR ?? 'build/ci/onnx_models');
const { onnxRuntime, readNpy, writeNpy } = await import('../tests/onnx/models/onnx_models_helpers.mjs');
const ort = onnxRuntime();
const [model, threads, repeats, ...feeds] = process.argv.slice(2);
if (!model || !(Number(threads) > 0) || !(Number(repeats) > 0) || feeds.length === 0) {
  console.error('usage: node bench/ort_time.mjs MODEL.onnx THREADS REPEATS NAME=FILE.npy ...');
  process.exit(2);
}

const inputs = {};
for (const f of feeds) {
  const eq = f.indexOf('=');
  const { data, shape } = readNpy(f.slice(eq + 1));
  inputs[f.slice(0, eq)] = new ort.Tensor(data instanceof BigInt64Array ? 'int64' : 'float32', data, shape);
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
  fs.mkdirSync(outputsDir, { recursive: true });
  for (const [name, t] of Object.entries(await session.run(inputs))) {
    if (t.type === 'float32') writeNpy(path.join(outputsDir, `${name}.npy`), t.data, t.dims);
  }
}
const mean = times.reduce((a, b) => a + b, 0) / times.length;
times.sort((a, b) => a - b);
console.log(`onnxruntime ${threads} threads: mean ${mean.toFixed(2)} ms, ` +
            `median ${times[times.length >> 1].toFixed(2)} ms over ${repeats} runs`);
