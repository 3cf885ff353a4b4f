// KServe infer requests per second with dynamic batching on against off, in one run: one
// `kiln serve --model-repository` holding the same ONNX model twice, "batched"
// (dynamic_batching) and "single" (none), driven alternately by C closed-loop clients sending
// binary-data requests of one image each, ROUNDS rounds of SECONDS each. Prints each round,
// then the median requests/s and latency of each model and their ratio.
// Usage: node bench/infer_batching.mjs KILN MODEL.onnx INPUT DIMS(3x48x192) [C=8] [SECONDS=10] [ROUNDS=3] [THREADS=2]
import { execSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startKiln } from './kiln_server.mjs';

const [kiln, model, input, dimsText, c = '8', seconds = '10', rounds = '3', threads = '2'] = process.argv.slice(2);
if (!kiln || !model || !input || !dimsText) {
  console.error('usage: node bench/infer_batching.mjs KILN MODEL.onnx INPUT DIMS [C] [SECONDS] [ROUNDS] [THREADS]');
  process.exit(2);
}
const dims = dimsText.split('x').map(Number);
const clients = Number(c);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-infer-bench-'));
for (const [name, batching] of [['batched', true], ['single', false]]) {
  fs.mkdirSync(path.join(dir, 'repo', name, '1'), { recursive: true });
  fs.copyFileSync(model, path.join(dir, 'repo', name, '1', 'model.onnx'));
  fs.writeFileSync(path.join(dir, 'repo', name, 'config.pbtxt'),
    `max_batch_size: ${Math.max(8, clients)}\n` +
    `input [ { name: "${input}" data_type: TYPE_FP32 dims: [ ${dims.join(', ')} ] } ]\n` +
    (batching ? 'dynamic_batching { max_queue_delay_microseconds: 2000 }\n' : ''));
}

const { server, base } = await startKiln(kiln, ['serve', '--model-repository', path.join(dir, 'repo'), '--engine-cache-dir', path.join(dir, 'cache'),
  '--port', '0', '--grpc-port', '-1', '--threads', threads]);

const size = dims.reduce((a, b) => a * b, 1);
const pixels = new Float32Array(size).map((_, i) => Math.sin(i) * 0.5);
const header = Buffer.from(JSON.stringify({
  inputs: [{ name: input, shape: [1, ...dims], datatype: 'FP32', parameters: { binary_data_size: size * 4 } }],
  parameters: { binary_data_output: true },
}));
const body = Buffer.concat([header, Buffer.from(pixels.buffer)]);

async function one(name) {
  const r = await fetch(`${base}/v2/models/${name}/infer`, {
    method: 'POST', body,
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
  });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`${name}: HTTP ${r.status}`);
}

async function round(name) {
  const end = Date.now() + Number(seconds) * 1000;
  const latencies = [];
  await Promise.all(Array.from({ length: clients }, async () => {
    while (Date.now() < end) {
      const t0 = performance.now();
      await one(name);
      latencies.push(performance.now() - t0);
    }
  }));
  latencies.sort((a, b) => a - b);
  return { rps: latencies.length / Number(seconds), p50: latencies[Math.floor(latencies.length / 2)],
           p99: latencies[Math.floor(latencies.length * 0.99)] };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  console.log(execSync("lscpu | grep 'Model name'").toString().trim());
  for (const name of ['batched', 'single']) for (let i = 0; i < 2 * clients; ++i) await one(name);  // warm-up
  const results = { batched: [], single: [] };
  for (let r = 0; r < Number(rounds); ++r) {
    for (const name of r % 2 ? ['single', 'batched'] : ['batched', 'single']) {
      const x = await round(name);
      results[name].push(x);
      console.log(`round ${r + 1} ${name.padEnd(7)}: ${x.rps.toFixed(1)} req/s, p50 ${x.p50.toFixed(1)} ms, p99 ${x.p99.toFixed(1)} ms`);
    }
  }
  const summary = {};
  for (const name of ['batched', 'single']) {
    summary[name] = { rps: median(results[name].map((x) => x.rps)), p50: median(results[name].map((x) => x.p50)) };
    console.log(`median ${name.padEnd(7)}: ${summary[name].rps.toFixed(1)} req/s, p50 ${summary[name].p50.toFixed(1)} ms`);
  }
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const value = (n, m) => Number((metrics.match(new RegExp(`^${n}\\{model="${m}"\\} (\\S+)`, 'm')) ?? [])[1]);
  console.log(`rows per execution: batched ${(value('kiln_infer_inferences_total', 'batched') / value('kiln_infer_executions_total', 'batched')).toFixed(2)}, ` +
              `single ${(value('kiln_infer_inferences_total', 'single') / value('kiln_infer_executions_total', 'single')).toFixed(2)}`);
  console.log(`dynamic batching on / off: ${(summary.batched.rps / summary.single.rps).toFixed(2)}x requests/s ` +
              `(${clients} clients, ${threads} threads)`);
} finally {
  server.kill('SIGTERM');
  fs.rmSync(dir, { recursive: true, force: true });
}
