// Silero VAD v5 (npm @ricky0123/vad-web, fetched by tests/onnx/models/setup.sh) through `kiln
// build` + `kiln eval` against ONNX Runtime. The model is one If on the sample rate whose two
// branches (16 kHz, 8 kHz) hold further Ifs and an LSTM, so this checks control flow end to end:
// six chunks of a test signal at each rate, the recurrent state carried from chunk to chunk by
// each runtime on its own. Tolerance: the speech probability within 1e-5, the state within 1e-4
// (measured: 3e-7 and 7e-6).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { haveModels, modelsDir, onnxRuntime, writeNpy, readNpy, kilnOk } from './onnx_models_helpers.mjs';

const model = path.join(modelsDir, 'silero', 'silero_vad_v5.onnx');
const skip = haveModels() && fs.existsSync(model) ? false : 'no Silero VAD model: run tests/onnx/models/setup.sh';
let dir;

before(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-silero-')); });
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

// Chunk c of a tone that fades in and out after two quiet chunks, with a little hiss.
function chunk(c, n, rate) {
  const x = new Float32Array(n);
  for (let i = 0; i < n; ++i) {
    const t = (c * n + i) / rate;
    const tone = c >= 2 ? 0.5 * Math.sin(2 * Math.PI * 220 * t) * Math.sin(2 * Math.PI * 3 * t) : 0;
    x[i] = tone + 0.01 * Math.sin(12345.6 * i * (c + 1));
  }
  return x;
}

test('Silero VAD v5 matches ONNX Runtime at 16 and 8 kHz', { skip }, async () => {
  const check = kilnOk(['check', model]);
  assert.match(check, /0 unsupported nodes/);
  const engine = path.join(dir, 'silero.kiln');
  kilnOk(['build', model, '-o', engine, '--no-autotune']);
  const ort = onnxRuntime();
  const session = await ort.InferenceSession.create(model);
  for (const [rate, n] of [[16000, 512], [8000, 256]]) {
    let ortState = new Float32Array(2 * 128), kilnState = new Float32Array(2 * 128);
    const sr = BigInt64Array.from([BigInt(rate)]);
    for (let c = 0; c < 6; ++c) {
      const x = chunk(c, n, rate);
      const ref = await session.run({
        input: new ort.Tensor('float32', x, [1, n]),
        state: new ort.Tensor('float32', ortState, [2, 1, 128]),
        sr: new ort.Tensor('int64', sr, []),
      });
      const files = { input: [x, [1, n]], state: [kilnState, [2, 1, 128]], sr: [sr, []] };
      const args = ['eval', engine, '--outputs-dir', path.join(dir, 'out')];
      for (const [name, [data, shape]] of Object.entries(files)) {
        writeNpy(path.join(dir, name + '.npy'), data, shape);
        args.push('--input', `${name}=${path.join(dir, name + '.npy')}`);
      }
      kilnOk(args);
      const prob = readNpy(path.join(dir, 'out', 'output.npy')), state = readNpy(path.join(dir, 'out', 'stateN.npy'));
      assert.deepEqual(prob.shape, ref.output.dims.map(Number));
      assert.ok(Math.abs(prob.data[0] - ref.output.data[0]) <= 1e-5,
                `${rate} Hz chunk ${c}: kiln ${prob.data[0]}, onnxruntime ${ref.output.data[0]}`);
      let worst = 0;
      for (let i = 0; i < state.data.length; ++i) worst = Math.max(worst, Math.abs(state.data[i] - ref.stateN.data[i]));
      assert.ok(worst <= 1e-4, `${rate} Hz chunk ${c}: state differs by ${worst}`);
      ortState = ref.stateN.data;
      kilnState = state.data;
    }
  }
});
