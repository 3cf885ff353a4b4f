// BERT and GPT-2 graphs exported from Hugging Face transformers with both PyTorch exporters
// (TorchScript, opset 17; dynamo, opset 18, IR 10), with dynamic batch and sequence axes: the
// tiny-config exports in transformers/ (made by transformers/export.py, which records versions
// in manifest.json) through `kiln build` + `kiln eval`, against PyTorch's own outputs for the
// padded batch the exports were traced with, and against ONNX Runtime on another batch shape.
// Tolerance: 1e-5 absolute (hidden states and logits are of order 1). Run by CTest (label onnx).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { haveModels, onnxRuntime, writeNpy, readNpy, kilnOk } from './onnx_models_helpers.mjs';

const kTolerance = 1e-5;
const data = path.join(path.dirname(fileURLToPath(import.meta.url)), 'transformers');
const skip = haveModels() ? false : 'KILN_ONNX_MODELS_DIR has no ONNX Runtime: run tests/onnx/models/setup.sh';
let dir;

before(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-transformers-')); });
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; ++i) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// Runs `engine` on input_ids / attention_mask; returns the output as { data, shape }.
function kilnRun(engine, ids, mask, output, tag) {
  const idsFile = path.join(dir, `${tag}.ids.npy`), maskFile = path.join(dir, `${tag}.mask.npy`);
  writeNpy(idsFile, ids.data, ids.shape);
  writeNpy(maskFile, mask.data, mask.shape);
  const out = path.join(dir, `${tag}.out`);
  kilnOk(['eval', engine, '--input', `input_ids=${idsFile}`, '--input', `attention_mask=${maskFile}`, '--outputs-dir', out]);
  return readNpy(path.join(out, `${output}.npy`));
}

// A batch of 3 sequences of 5 tokens, the last one padded after 2.
function otherBatch() {
  const ids = new BigInt64Array(15), mask = new BigInt64Array(15);
  for (let i = 0; i < 15; ++i) {
    ids[i] = BigInt((i * 37 + 11) % 100);
    mask[i] = i >= 12 ? 0n : 1n;
  }
  return { ids: { data: ids, shape: [3, 5] }, mask: { data: mask, shape: [3, 5] } };
}

for (const [model, output] of [['bert', 'last_hidden_state'], ['gpt2', 'logits']]) {
  for (const exporter of ['torchscript', 'dynamo']) {
    test(`${model} (${exporter} export) matches PyTorch and ONNX Runtime`, { skip }, async () => {
      const onnx = path.join(data, `${model}_${exporter}.onnx`);
      const engine = path.join(dir, `${model}_${exporter}.kiln`);
      kilnOk(['build', onnx, '-o', engine, '--no-autotune']);

      // The padded 2x7 batch the exports were traced with (int64).
      const ids = readNpy(path.join(data, 'input_ids.npy')), mask = readNpy(path.join(data, 'attention_mask.npy'));
      const got = kilnRun(engine, ids, mask, output, `${model}_${exporter}`);
      const torch = readNpy(path.join(data, `${model}_torch.npy`));
      assert.deepEqual(got.shape, torch.shape);
      const vsTorch = maxDiff(got.data, torch.data);
      assert.ok(vsTorch <= kTolerance, `max |kiln - pytorch| = ${vsTorch}`);

      // Dynamic axes: another batch and sequence length, against ONNX Runtime.
      const other = otherBatch();
      const got2 = kilnRun(engine, other.ids, other.mask, output, `${model}_${exporter}_other`);
      const ort = onnxRuntime();
      const session = await ort.InferenceSession.create(onnx);
      const ref = (await session.run({
        input_ids: new ort.Tensor('int64', other.ids.data, other.ids.shape),
        attention_mask: new ort.Tensor('int64', other.mask.data, other.mask.shape),
      }))[output];
      assert.deepEqual(got2.shape, ref.dims.map(Number));
      const vsOrt = maxDiff(got2.data, ref.data);
      assert.ok(vsOrt <= kTolerance, `max |kiln - onnxruntime| = ${vsOrt}`);
    });
  }
}
