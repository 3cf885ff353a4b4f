// `kiln serve --model-repository`: a Triton-style repository with a real model nobody here wrote
// (PaddleOCR's direction classifier, dynamic batching on), Debian's ONNX test_add model without a
// config.pbtxt, and a model whose config has a typo. Driven over KServe v2 HTTP with fetch and
// curl, and over KServe v2 gRPC with npm's @grpc/grpc-js; every answer is checked against ONNX
// Runtime on the same input (1e-4). Run by CTest (label onnx) after tests/onnx/models/setup.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { haveModels, modelsDir, modelPath, onnxRuntime, deterministicInput } from './onnx_models_helpers.mjs';
import { startServer, stopServer, post, get, curl, metricValue } from '../../e2e/server_helpers.mjs';

const kTolerance = 1e-4;
const kTestAdd = '/usr/share/libonnx-testdata/data/node/test_add/model.onnx';
const skip = haveModels() ? false : 'KILN_ONNX_MODELS_DIR has no models: run tests/onnx/models/setup.sh';
const kClsShape = [3, 48, 192];
const kClsSize = kClsShape.reduce((a, b) => a * b, 1);
const kSourceDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../src');
let dir, server, session, outputName, grpcClient;

before(async () => {
  if (skip) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-repository-'));
  const repo = path.join(dir, 'repo');
  fs.mkdirSync(path.join(repo, 'cls', '1'), { recursive: true });
  fs.copyFileSync(modelPath('ch_ppocr_mobile_v2.0_cls_infer.onnx'), path.join(repo, 'cls', '1', 'model.onnx'));
  fs.writeFileSync(path.join(repo, 'cls', 'config.pbtxt'), `
name: "cls"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 4 ] }
instance_group [ { count: 1 kind: KIND_CPU } ]
`);
  fs.mkdirSync(path.join(repo, 'add', '1'), { recursive: true });
  fs.copyFileSync(kTestAdd, path.join(repo, 'add', '1', 'model.onnx'));
  fs.mkdirSync(path.join(repo, 'broken', '1'), { recursive: true });
  fs.copyFileSync(kTestAdd, path.join(repo, 'broken', '1', 'model.onnx'));
  fs.writeFileSync(path.join(repo, 'broken', 'config.pbtxt'), 'input [ { name: "x" data_type: TYPE_FLOAT32 dims: [ 3, 4, 5 ] } ]\n');
  server = await startServer(['--model-repository', repo, '--engine-cache-dir', path.join(dir, 'cache'), '--grpc-port', '0']);
  // The KServe v2 gRPC client, typed from kiln's copy of the published service definition.
  const require = createRequire(path.join(modelsDir, 'package.json'));
  const grpc = require('@grpc/grpc-js');
  const loader = require('@grpc/proto-loader');
  const definition = loader.loadSync('server/repository/grpc_service.proto',
    { includeDirs: [kSourceDir], keepCase: true, longs: Number, enums: String, defaults: true });
  const { GRPCInferenceService } = grpc.loadPackageDefinition(definition).inference;
  const grpcPort = Number(server.stdoutText().match(/gRPC 127\.0\.0\.1:(\d+)/)[1]);
  grpcClient = new GRPCInferenceService(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
  const ort = onnxRuntime();
  session = await ort.InferenceSession.create(modelPath('ch_ppocr_mobile_v2.0_cls_infer.onnx'));
  outputName = session.outputNames[0];
});

after(async () => {
  if (grpcClient) grpcClient.close();
  if (server) assert.equal(await stopServer(server), 0, 'kiln serve exits 0 on SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function reference(data, batch) {
  const ort = onnxRuntime();
  const out = await session.run({ x: new ort.Tensor('float32', data, [batch, ...kClsShape]) });
  return Array.from(out[outputName].data);
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, what);
  for (let i = 0; i < got.length; ++i) {
    assert.ok(Math.abs(got[i] - want[i]) <= kTolerance, `${what}[${i}]: kiln ${got[i]}, onnxruntime ${want[i]}`);
  }
}

test('the repository index says which models serve and why the others do not', { skip }, async () => {
  assert.equal((await get(server.base, '/v2/health/ready')).status, 200);
  const index = await post(server.base, '/v2/repository/index', {});
  assert.equal(index.status, 200);
  const byName = Object.fromEntries(index.json.map((e) => [e.name, e]));
  assert.equal(byName.cls.state, 'READY');
  assert.equal(byName.cls.version, '1');
  assert.equal(byName.add.state, 'READY');
  assert.equal(byName.broken.state, 'UNAVAILABLE');
  assert.match(byName.broken.reason, /config\.pbtxt:1:\d+: .*TYPE_FLOAT32.*data_type/);
  const onlyReady = await post(server.base, '/v2/repository/index', { ready: true });
  assert.deepEqual(onlyReady.json.map((e) => e.name).sort(), ['add', 'cls']);

  const meta = await get(server.base, '/v2/models/cls');
  assert.equal(meta.status, 200);
  assert.deepEqual(meta.json.inputs, [{ name: 'x', datatype: 'FP32', shape: [-1, 3, 48, 192] }]);
  assert.deepEqual(meta.json.outputs, [{ name: outputName, datatype: 'FP32', shape: [-1, 2] }]);
  const config = await get(server.base, '/v2/models/cls/config');
  assert.equal(config.json.max_batch_size, 8);
  assert.deepEqual(config.json.dynamic_batching, { preferred_batch_size: [4], max_queue_delay_microseconds: 200000 });
  // No config.pbtxt: served as the model declares its tensors, unbatched.
  const add = await get(server.base, '/v2/models/add/config');
  assert.equal(add.json.max_batch_size, 0);
  assert.deepEqual(add.json.input.map((t) => [t.name, t.dims]), [['x', [3, 4, 5]], ['y', [3, 4, 5]]]);
  assert.equal((await get(server.base, '/v2/models/broken/ready')).status, 400);
  assert.equal((await get(server.base, '/v2/models/cls/ready')).status, 200);
});

test('infer with JSON tensors matches ONNX Runtime', { skip }, async () => {
  const data = deterministicInput([2, ...kClsShape], 7);
  const r = await post(server.base, '/v2/models/cls/infer', {
    id: 'two-images',
    inputs: [{ name: 'x', shape: [2, ...kClsShape], datatype: 'FP32', data: Array.from(data) }],
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.id, 'two-images');
  assert.equal(r.json.model_name, 'cls');
  assert.deepEqual(r.json.outputs[0].shape, [2, 2]);
  assertClose(r.json.outputs[0].data, await reference(data, 2), 'probabilities');

  // The unbatched test_add model: sum = x + y.
  const x = Array.from({ length: 60 }, (_, i) => i / 8), y = Array.from({ length: 60 }, (_, i) => -i);
  const s = await post(server.base, '/v2/models/add/infer', {
    inputs: [{ name: 'x', shape: [3, 4, 5], datatype: 'FP32', data: x }, { name: 'y', shape: [3, 4, 5], datatype: 'FP32', data: y }],
  });
  assert.equal(s.status, 200, s.text);
  assert.deepEqual(s.json.outputs[0].data, x.map((v, i) => v + y[i]));
});

test('infer with the binary data extension, sent by curl', { skip }, async () => {
  const data = deterministicInput([1, ...kClsShape], 99);
  const header = Buffer.from(JSON.stringify({
    inputs: [{ name: 'x', shape: [1, ...kClsShape], datatype: 'FP32', parameters: { binary_data_size: data.byteLength } }],
    outputs: [{ name: outputName, parameters: { binary_data: true } }],
  }));
  const body = path.join(dir, 'binary-request');
  fs.writeFileSync(body, Buffer.concat([header, Buffer.from(data.buffer)]));
  const answer = path.join(dir, 'binary-answer');
  const headers = await curl(['-X', 'POST', `${server.base}/v2/models/cls/infer`, '-H', 'Content-Type: application/octet-stream',
    '-H', `Inference-Header-Content-Length: ${header.length}`, '--data-binary', `@${body}`, '-o', answer, '-D', '-']);
  assert.match(headers, /^HTTP\/1\.1 200/);
  const n = Number(headers.match(/inference-header-content-length: (\d+)/i)[1]);
  const bytes = fs.readFileSync(answer);
  const json = JSON.parse(bytes.subarray(0, n).toString());
  assert.equal(json.outputs[0].parameters.binary_data_size, 8);
  const probs = new Float32Array(bytes.buffer.slice(bytes.byteOffset + n, bytes.byteOffset + n + 8));
  assertClose(Array.from(probs), await reference(data, 1), 'binary probabilities');
});

test('concurrent requests are batched together and each gets its own rows', { skip }, async () => {
  const metrics = async () => (await get(server.base, '/metrics')).text;
  const before = await metrics();
  const executions0 = metricValue(before, 'kiln_infer_executions_total', { model: 'cls' });
  const inputs = Array.from({ length: 8 }, (_, i) => deterministicInput([1, ...kClsShape], 1000 + i));
  const answers = await Promise.all(inputs.map((data) => post(server.base, '/v2/models/cls/infer', {
    inputs: [{ name: 'x', shape: [1, ...kClsShape], datatype: 'FP32', data: Array.from(data) }],
  })));
  for (let i = 0; i < 8; ++i) {
    assert.equal(answers[i].status, 200, answers[i].text);
    assertClose(answers[i].json.outputs[0].data, await reference(inputs[i], 1), `request ${i}`);
  }
  const after = await metrics();
  const executions = metricValue(after, 'kiln_infer_executions_total', { model: 'cls' }) - executions0;
  assert.ok(executions >= 1 && executions < 8, `8 requests ran in ${executions} executions`);
  assert.ok(metricValue(after, 'kiln_infer_requests_total', { model: 'cls', outcome: 'success' }) >= 9);
  assert.equal(metricValue(after, 'kiln_model_ready', { model: 'cls' }), 1);
  assert.ok(metricValue(after, 'kiln_infer_queue_seconds_count', { model: 'cls' }) >= 8);
});

test('bad requests get a 400 naming the problem, and the server serves on', { skip }, async () => {
  const x = { name: 'x', shape: [1, ...kClsShape], datatype: 'FP32', data: Array.from(deterministicInput([1, ...kClsShape])) };
  const cases = [
    [{ inputs: [{ ...x, datatype: 'INT64' }] }, 400, /input 'x' has datatype INT64; the model takes FP32/],
    [{ inputs: [{ ...x, shape: [1, 3, 48, 100] }] }, 400, /input 'x' has shape \[1, 3, 48, 100\]; the model takes \[-1, 3, 48, 192\]/],
    [{ inputs: [{ ...x, shape: [9, ...kClsShape] }] }, 400, /batch of 9; this model takes 1 to 8/],
    [{ inputs: [{ ...x, data: [1, 2, 3] }] }, 400, /needs 27648 elements; 'data' has 3/],
    [{ inputs: [{ ...x, name: 'image' }] }, 400, /no input 'image'/],
    [{ inputs: [x], outputs: [{ name: 'logits' }] }, 400, /no output 'logits'/],
    ['{"inputs": [', 400, /not valid JSON/],
  ];
  for (const [body, status, message] of cases) {
    const r = await post(server.base, '/v2/models/cls/infer', body);
    assert.equal(r.status, status, r.text);
    assert.match(r.json.error, message);
  }
  const unknown = await post(server.base, '/v2/models/nope/infer', { inputs: [x] });
  assert.equal(unknown.status, 404);
  assert.match(unknown.json.error, /'nope' does not exist/);
  assert.equal((await get(server.base, '/v2/models/cls/infer')).status, 405);
  const broken = await post(server.base, '/v2/models/broken/infer', { inputs: [x] });
  assert.equal(broken.status, 400);
  assert.match(broken.json.error, /not ready \(UNAVAILABLE/);
  const header = await post(server.base, '/v2/models/cls/infer', '{}', { 'inference-header-content-length': 'ten' });
  assert.equal(header.status, 400);
  assert.equal((await post(server.base, '/v2/models/cls/infer', { inputs: [x] })).status, 200);
});

test('unload and load through the repository extension', { skip }, async () => {
  const x = { name: 'x', shape: [1, ...kClsShape], datatype: 'FP32', data: Array.from(deterministicInput([1, ...kClsShape])) };
  assert.equal((await post(server.base, '/v2/repository/models/cls/unload', {})).status, 200);
  assert.equal((await get(server.base, '/v2/models/cls/ready')).status, 400);
  const refused = await post(server.base, '/v2/models/cls/infer', { inputs: [x] });
  assert.equal(refused.status, 400);
  assert.match(refused.json.error, /UNAVAILABLE: unloaded/);
  const metrics = (await get(server.base, '/metrics')).text;
  assert.equal(metricValue(metrics, 'kiln_model_ready', { model: 'cls' }), 0);
  assert.equal((await post(server.base, '/v2/repository/models/cls/load', {})).status, 200);
  assert.equal((await get(server.base, '/v2/models/cls/ready')).status, 200);
  assert.equal((await post(server.base, '/v2/models/cls/infer', { inputs: [x] })).status, 200);
  const missing = await post(server.base, '/v2/repository/models/nope/load', {});
  assert.equal(missing.status, 404);
  // Fixing the broken model's config and loading it brings it into service.
  const fixed = path.join(dir, 'repo', 'broken', 'config.pbtxt');
  fs.writeFileSync(fixed, 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 4, 5 ] } ]\n');
  const partial = await post(server.base, '/v2/repository/models/broken/load', {});
  assert.equal(partial.status, 400);
  assert.match(partial.json.error, /config\.pbtxt: input: the model's input 'y' is missing/);
  fs.writeFileSync(fixed, 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 4, 5 ] },\n' +
                          '        { name: "y" data_type: TYPE_FP32 dims: [ 3, 4, 5 ] } ]\n');
  const load = await post(server.base, '/v2/repository/models/broken/load', {});
  assert.equal(load.status, 200, load.text);
  assert.equal((await get(server.base, '/v2/models/broken/ready')).status, 200);
});

// One unary call: resolves with { error, response } (error: the gRPC status, or null).
function rpc(method, request) {
  return new Promise((resolve) => {
    grpcClient[method](request, { deadline: Date.now() + 120000 }, (error, response) => resolve({ error, response }));
  });
}

function floats(buffer) {
  return Array.from(new Float32Array(buffer.buffer.slice(buffer.byteOffset, buffer.byteOffset + buffer.length)));
}

test('the same protocol over gRPC: health, metadata, config, index', { skip }, async () => {
  assert.equal((await rpc('ServerLive', {})).response.live, true);
  assert.equal((await rpc('ServerReady', {})).response.ready, true);
  assert.equal((await rpc('ModelReady', { name: 'cls' })).response.ready, true);
  const unknown = await rpc('ModelReady', { name: 'nope' });
  assert.equal(unknown.error.code, 5);  // NOT_FOUND
  const meta = (await rpc('ServerMetadata', {})).response;
  assert.equal(meta.name, 'kiln');
  const model = (await rpc('ModelMetadata', { name: 'cls' })).response;
  assert.deepEqual(model.versions, ['1']);
  assert.deepEqual(model.inputs.map((t) => [t.name, t.datatype, t.shape]), [['x', 'FP32', [-1, 3, 48, 192]]]);
  const config = (await rpc('ModelConfig', { name: 'cls' })).response.config;
  assert.equal(config.max_batch_size, 8);
  assert.equal(config.input[0].data_type, 'TYPE_FP32');
  assert.deepEqual(config.dynamic_batching.preferred_batch_size, [4]);
  const index = (await rpc('RepositoryIndex', {})).response.models;
  assert.deepEqual(index.map((m) => [m.name, m.state]).sort(), [['add', 'READY'], ['broken', 'READY'], ['cls', 'READY']]);
});

test('ModelInfer over gRPC matches ONNX Runtime, raw and typed contents', { skip }, async () => {
  const data = deterministicInput([2, ...kClsShape], 21);
  const r = await rpc('ModelInfer', {
    model_name: 'cls', id: 'grpc-two',
    inputs: [{ name: 'x', datatype: 'FP32', shape: [2, ...kClsShape] }],
    raw_input_contents: [Buffer.from(data.buffer)],
  });
  assert.equal(r.error, null, r.error?.details);
  assert.equal(r.response.id, 'grpc-two');
  assert.deepEqual(r.response.outputs[0].shape, [2, 2]);
  assertClose(floats(r.response.raw_output_contents[0]), await reference(data, 2), 'gRPC probabilities');

  const x = Array.from({ length: 60 }, (_, i) => i / 4), y = Array.from({ length: 60 }, (_, i) => 3 - i);
  const s = await rpc('ModelInfer', {
    model_name: 'add',
    inputs: [{ name: 'x', datatype: 'FP32', shape: [3, 4, 5], contents: { fp32_contents: x } },
             { name: 'y', datatype: 'FP32', shape: [3, 4, 5], contents: { fp32_contents: y } }],
  });
  assert.equal(s.error, null, s.error?.details);
  assert.deepEqual(floats(s.response.raw_output_contents[0]), x.map((v, i) => v + y[i]));

  // Concurrent calls share batches, as over HTTP.
  const metrics = async () => (await get(server.base, '/metrics')).text;
  const executions0 = metricValue(await metrics(), 'kiln_infer_executions_total', { model: 'cls' });
  const inputs = Array.from({ length: 8 }, (_, i) => deterministicInput([1, ...kClsShape], 2000 + i));
  const answers = await Promise.all(inputs.map((d) => rpc('ModelInfer', {
    model_name: 'cls', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, ...kClsShape] }], raw_input_contents: [Buffer.from(d.buffer)],
  })));
  for (let i = 0; i < 8; ++i) {
    assert.equal(answers[i].error, null, answers[i].error?.details);
    assertClose(floats(answers[i].response.raw_output_contents[0]), await reference(inputs[i], 1), `gRPC request ${i}`);
  }
  const after = await metrics();
  const executions = metricValue(after, 'kiln_infer_executions_total', { model: 'cls' }) - executions0;
  assert.ok(executions >= 1 && executions < 8, `8 gRPC requests ran in ${executions} executions`);
  assert.ok(metricValue(after, 'kiln_grpc_requests_total', { method: 'ModelInfer', code: 'OK' }) >= 10);
});

test('gRPC refusals carry the code and the message naming the problem', { skip }, async () => {
  const raw = [Buffer.from(deterministicInput([1, ...kClsShape]).buffer)];
  const cases = [
    [{ model_name: 'cls', inputs: [{ name: 'x', datatype: 'FP64', shape: [1, ...kClsShape] }], raw_input_contents: raw }, 3,
      /input 'x' has datatype FP64; the model takes FP32/],
    [{ model_name: 'cls', inputs: [{ name: 'x', datatype: 'FP32', shape: [2, ...kClsShape] }], raw_input_contents: raw }, 3,
      /input 'x' is 221184 bytes; raw_input_contents\[0\] has 110592/],
    [{ model_name: 'cls', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, ...kClsShape], contents: { fp32_contents: [1, 2] } }] }, 3,
      /input 'x' needs 27648 values; fp32_contents has 2/],
    [{ model_name: 'cls', inputs: [] }, 3, /'inputs' must hold at least one tensor/],
    [{ model_name: 'nope', inputs: [{ name: 'x', datatype: 'FP32', shape: [1] }] }, 5, /'nope' does not exist/],
  ];
  for (const [request, code, message] of cases) {
    const r = await rpc('ModelInfer', request);
    assert.ok(r.error, 'refused');
    assert.equal(r.error.code, code, r.error.details);
    assert.match(r.error.details, message);
  }
  // Unload and load over gRPC.
  assert.equal((await rpc('RepositoryModelUnload', { model_name: 'add' })).error, null);
  assert.equal((await rpc('ModelReady', { name: 'add' })).response.ready, false);
  const refused = await rpc('ModelInfer', { model_name: 'add', inputs: [{ name: 'x', datatype: 'FP32', shape: [3, 4, 5] }] });
  assert.equal(refused.error.code, 3);
  assert.match(refused.error.details, /UNAVAILABLE: unloaded/);
  assert.equal((await rpc('RepositoryModelLoad', { model_name: 'add' })).error, null);
  assert.equal((await rpc('ModelReady', { name: 'add' })).response.ready, true);
  assert.equal((await rpc('RepositoryModelLoad', { model_name: 'nope' })).error.code, 5);
});
