#!/usr/bin/env python3
"""Exports tiny BERT and GPT-2 models from Hugging Face transformers to ONNX, the way a user would.

Writes, into OUT_DIR (default: this script's folder):
  bert_torchscript.onnx, bert_dynamo.onnx    BertModel: input_ids, attention_mask -> last_hidden_state
  gpt2_torchscript.onnx, gpt2_dynamo.onnx    GPT2LMHeadModel (no KV cache): input_ids, attention_mask -> logits
  input_ids.npy, attention_mask.npy          one padded batch of 2 x 7 (int64)
  bert_torch.npy, gpt2_torch.npy             PyTorch's outputs for that batch (float32)
  manifest.json                              versions, opsets, node counts, and |onnx - torch| per export

Both exporters get dynamic batch and sequence axes: the TorchScript one (`dynamo=False`, opset 17)
and the dynamo one (`dynamo=True`, opset 18). The configurations are tiny (hidden size 32, two
layers) and the weights random with a fixed seed, so the files stay small enough for a repository
and every operator of the real architectures still appears. Needs torch, transformers, onnx and
onnxruntime; run: python3 tests/onnx/models/transformers/export.py [OUT_DIR].
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
import torch
import transformers

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
os.makedirs(OUT, exist_ok=True)

# Padded batch: the second sequence is 4 tokens long, then 3 positions of padding.
INPUT_IDS = np.array([[5, 17, 42, 8, 99, 3, 61], [7, 23, 11, 2, 0, 0, 0]], dtype=np.int64)
ATTENTION_MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]], dtype=np.int64)


class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=37, max_position_embeddings=64, attn_implementation="eager")
        self.model = transformers.BertModel(config, add_pooling_layer=False)
        self.eval()

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class Gpt2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.GPT2Config(
            vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False,
            attn_implementation="eager")
        self.model = transformers.GPT2LMHeadModel(config)
        self.eval()

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def export(name, module, output_name, dynamo):
    path = os.path.join(OUT, f"{name}_{'dynamo' if dynamo else 'torchscript'}.onnx")
    args = (torch.from_numpy(INPUT_IDS), torch.from_numpy(ATTENTION_MASK))
    names = dict(input_names=["input_ids", "attention_mask"], output_names=[output_name])
    with torch.no_grad():
        want = module(*args).numpy()
    if dynamo:
        batch, sequence = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("sequence", min=1, max=64)
        shapes = {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}}
        program = torch.onnx.export(module, args, dynamo=True, opset_version=18, dynamic_shapes=shapes,
                                    external_data=False, **names)
        program.save(path, external_data=False)
    else:
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                output_name: {0: "batch", 1: "sequence"}}
        torch.onnx.export(module, args, path, dynamo=False, opset_version=17, dynamic_axes=axes, **names)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": INPUT_IDS, "attention_mask": ATTENTION_MASK})[0]
    real = ATTENTION_MASK.astype(bool)  # positions that are not padding
    ops = sorted({n.op_type for n in model.graph.node})
    return {
        "file": os.path.basename(path), "bytes": os.path.getsize(path), "ir_version": model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "nodes": len(model.graph.node), "ops": ops,
        "max_abs_onnxruntime_minus_torch": float(np.max(np.abs(got - want))),
        "max_abs_onnxruntime_minus_torch_unpadded": float(np.max(np.abs(got - want)[real])),
    }, want


def main():
    torch.manual_seed(20261202)
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "exports": []}
    np.save(os.path.join(OUT, "input_ids.npy"), INPUT_IDS)
    np.save(os.path.join(OUT, "attention_mask.npy"), ATTENTION_MASK)
    for name, module, output in (("bert", Bert(), "last_hidden_state"), ("gpt2", Gpt2(), "logits")):
        for dynamo in (False, True):
            try:
                entry, want = export(name, module, output, dynamo)
                np.save(os.path.join(OUT, f"{name}_torch.npy"), want.astype(np.float32))
            except Exception as e:  # one exporter failing must not hide the other's result
                entry = {"file": f"{name}_{'dynamo' if dynamo else 'torchscript'}.onnx", "error": repr(e)[:2000]}
            manifest["exports"].append(entry)
            print(json.dumps(entry))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
