// LSTM, GRU and RNN through `kiln build` + `kiln eval` against ONNX Runtime, on one-node models
// written here with protobufjs from Debian's onnx.proto: the attribute combinations the ONNX
// node tests leave out (bidirectional and reverse with uneven sequence lengths, clip,
// input_forget, linear_before_reset, activations with their alpha and beta). The batch-first
// layout, which ONNX Runtime's CPU kernels refuse, is left to the node tests
// (test_lstm_batchwise, ...). Tolerance: 1e-5 absolute. Run by CTest (label onnx) after tests/onnx/models/setup.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { haveModels, onnxRuntime, writeNpy, readNpy, deterministicInput, kilnOk } from './onnx_models_helpers.mjs';

const kTolerance = 1e-5;
const kOnnxProto = '/usr/include/onnx/onnx.proto';  // Debian's libonnx-dev
const skip = !haveModels() ? 'KILN_ONNX_MODELS_DIR has no models: run tests/onnx/models/setup.sh'
  : !fs.existsSync(kOnnxProto) ? `${kOnnxProto} is missing (Debian package libonnx-dev)` : false;
let dir, ModelProto;

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-recurrent-'));
  if (skip) return;
  const protobuf = createRequire(path.join(process.env.KILN_ONNX_MODELS_DIR, 'package.json'))('protobufjs');
  ModelProto = protobuf.loadSync(kOnnxProto).lookupType('onnx.ModelProto');
});
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

const FLOAT = 1, INT32 = 6;

function valueInfo(name, dims) {
  return { name, type: { tensorType: { elemType: FLOAT, shape: dims ? { dim: dims.map((d) => ({ dimValue: d })) } : undefined } } };
}

function attribute(name, v) {
  if (typeof v === 'string') return { name, type: 3, s: Buffer.from(v) };
  if (Array.isArray(v) && typeof v[0] === 'string') return { name, type: 8, strings: v.map((s) => Buffer.from(s)) };
  if (Array.isArray(v)) return { name, type: 6, floats: v };
  return Number.isInteger(v) ? { name, type: 2, i: v } : { name, type: 1, f: v };
}

// One `op` node. Runtime inputs: X and the initial states; weights and lengths: initializers.
// `inputs` lists [name, dims, data] in the op's input order ('' for an absent one).
function writeModel(file, op, attrs, inputs, outputs, runtime) {
  const initializer = [], graphInputs = [];
  for (const [name, dims, data] of inputs) {
    if (name === '') continue;
    if (runtime.includes(name)) graphInputs.push(valueInfo(name, dims));
    else if (data instanceof Int32Array) initializer.push({ name, dims, dataType: INT32, int32Data: Array.from(data) });
    else initializer.push({ name, dims, dataType: FLOAT, floatData: Array.from(data) });
  }
  const model = {
    irVersion: 8,
    producerName: 'kiln-test',
    opsetImport: [{ domain: '', version: 14 }],
    graph: {
      name: op,
      node: [{ opType: op, name: op + '_0', input: inputs.map(([n]) => n), output: outputs,
               attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)) }],
      initializer,
      input: graphInputs,
      output: outputs.filter((o) => o !== '').map((o) => valueInfo(o)),
    },
  };
  fs.writeFileSync(file, ModelProto.encode(ModelProto.fromObject(model)).finish());
}

// Builds and runs the model with Kiln and ONNX Runtime; returns the largest difference per output.
async function compare(tag, op, attrs, { seq, batch, input, hidden, lens, states, peepholes }) {
  const layout = 0;
  const G = { LSTM: 4, GRU: 3, RNN: 1 }[op];
  const dirs = attrs.direction === 'bidirectional' ? 2 : 1;
  const xDims = layout === 0 ? [seq, batch, input] : [batch, seq, input];
  const sDims = layout === 0 ? [dirs, batch, hidden] : [batch, dirs, hidden];
  const scaled = (dims, seed, s) => deterministicInput(dims, seed).map((v) => v * s);
  const inputs = [
    ['X', xDims, scaled(xDims, 1, 1.5)],
    ['W', [dirs, G * hidden, input], scaled([dirs, G * hidden, input], 2, 0.6)],
    ['R', [dirs, G * hidden, hidden], scaled([dirs, G * hidden, hidden], 3, 0.6)],
    ['B', [dirs, 2 * G * hidden], scaled([dirs, 2 * G * hidden], 4, 0.3)],
    lens ? ['sequence_lens', [batch], Int32Array.from(lens)] : ['', [], null],
    states ? ['initial_h', sDims, scaled(sDims, 5, 0.5)] : ['', [], null],
  ];
  if (op === 'LSTM') {
    inputs.push(states ? ['initial_c', sDims, scaled(sDims, 6, 0.5)] : ['', [], null]);
    if (peepholes) inputs.push(['P', [dirs, 3 * hidden], scaled([dirs, 3 * hidden], 7, 0.4)]);
  }
  while (inputs.length && inputs[inputs.length - 1][0] === '') inputs.pop();
  const outputs = op === 'LSTM' ? ['Y', 'Y_h', 'Y_c'] : ['Y', 'Y_h'];
  const runtime = ['X', 'initial_h', 'initial_c'];
  const model = path.join(dir, tag + '.onnx'), engine = path.join(dir, tag + '.kiln'), out = path.join(dir, tag + '.out');
  writeModel(model, op, { ...attrs, hidden_size: hidden, layout }, inputs, outputs, runtime);

  const ort = onnxRuntime();
  const session = await ort.InferenceSession.create(model);
  const feeds = {}, evalArgs = ['eval', engine, '--outputs-dir', out];
  for (const [name, dims, data] of inputs) {
    if (!runtime.includes(name)) continue;
    feeds[name] = new ort.Tensor('float32', data, dims);
    writeNpy(path.join(dir, `${tag}.${name}.npy`), data, dims);
    evalArgs.push('--input', `${name}=${path.join(dir, `${tag}.${name}.npy`)}`);
  }
  const ref = await session.run(feeds);
  kilnOk(['build', model, '-o', engine, '--no-autotune']);
  kilnOk(evalArgs);
  const diffs = {};
  for (const name of outputs) {
    const got = readNpy(path.join(out, name + '.npy'));
    assert.deepEqual(got.shape, ref[name].dims.map(Number), `${tag} ${name} shape`);
    let worst = 0;
    for (let i = 0; i < got.data.length; ++i) worst = Math.max(worst, Math.abs(got.data[i] - ref[name].data[i]));
    diffs[name] = worst;
  }
  return diffs;
}

function assertClose(tag, diffs) {
  for (const [name, d] of Object.entries(diffs)) assert.ok(d <= kTolerance, `${tag} ${name}: max |kiln - onnxruntime| = ${d}`);
}

test('LSTM matches ONNX Runtime', { skip }, async () => {
  const shape = { seq: 5, batch: 3, input: 4, hidden: 6, lens: [5, 2, 4], states: true, peepholes: true };
  assertClose('lstm-bidirectional', await compare('lstm-bidirectional', 'LSTM', { direction: 'bidirectional', clip: 2.5 }, shape));
  assertClose('lstm-reverse', await compare('lstm-reverse', 'LSTM', { direction: 'reverse', input_forget: 1 }, shape));
  assertClose('lstm-activations', await compare('lstm-activations', 'LSTM',
    { activations: ['HardSigmoid', 'Tanh', 'Softsign'], activation_alpha: [0.3], activation_beta: [0.4] },
    { ...shape, lens: undefined, peepholes: false }));
  // activation_alpha / activation_beta are consumed in order by the activations that take them.
  assertClose('lstm-alpha-order', await compare('lstm-alpha-order', 'LSTM',
    { activations: ['Sigmoid', 'LeakyRelu', 'ScaledTanh'], activation_alpha: [0.2, 0.7], activation_beta: [1.3] },
    { ...shape, lens: undefined }));
});

test('GRU matches ONNX Runtime', { skip }, async () => {
  const shape = { seq: 6, batch: 2, input: 3, hidden: 5, lens: [6, 3], states: true };
  assertClose('gru-bidirectional', await compare('gru-bidirectional', 'GRU', { direction: 'bidirectional' }, shape));
  assertClose('gru-linear-before-reset', await compare('gru-linear-before-reset', 'GRU',
    { direction: 'reverse', linear_before_reset: 1, clip: 1.5 }, shape));
});

test('RNN matches ONNX Runtime', { skip }, async () => {
  const shape = { seq: 4, batch: 3, input: 5, hidden: 4, lens: [1, 4, 3], states: true };
  assertClose('rnn-bidirectional', await compare('rnn-bidirectional', 'RNN', { direction: 'bidirectional' }, shape));
  assertClose('rnn-relu', await compare('rnn-relu', 'RNN', { activations: ['Relu'], direction: 'reverse' }, shape));
});
