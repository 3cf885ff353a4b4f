#!/usr/bin/env python3
# Writes a BERT-base-sized ONNX graph (12 layers, hidden 768, 12 heads of 64, FFN 3072, 512
# positions, vocabulary 30522; random weights, as transformers.BertModel(BertConfig()) has before
# training) from the tiny TorchScript export in tests/onnx/models/transformers, on a machine
# without PyTorch: every weight is widened to BERT-base's size, the constants that carry the head
# size, the score scale and the position range are rewritten, and layer 1's nodes are copied ten
# more times, each copy with weights of its own. Needs Debian's python3-onnx and python3-numpy.
#   bench/bert_base_onnx.py OUT.onnx
import copy
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HIDDEN, FFN, HEAD, POSITIONS, VOCAB, LAYERS = 768, 3072, 64, 512, 30522, 12
TINY = {32: HIDDEN, 37: FFN, 64: POSITIONS, 100: VOCAB}  # the tiny export's sizes -> BERT-base's

src = pathlib.Path(__file__).resolve().parent.parent / "tests/onnx/models/transformers/bert_torchscript.onnx"
model = onnx.load(src)
graph = model.graph
rng = np.random.default_rng(0)


def weight(name, shape):
    """A random weight as BertModel initialises one (normal, std 0.02); LayerNorm scales are 1."""
    if len(shape) == 1 and "LayerNorm.weight" in name:
        return numpy_helper.from_array(np.ones(shape, np.float32), name)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name)


def set_constant(node, value):
    node.attribute[0].t.CopyFrom(numpy_helper.from_array(value, node.attribute[0].t.name))


weights = {}
for t in graph.initializer:
    shape = [TINY.get(d, d) for d in t.dims]
    weights[t.name] = weight(t.name, shape)
for node in graph.node:
    if node.op_type != "Constant":
        continue
    value = numpy_helper.to_array(node.attribute[0].t)
    if value.shape == (1, 64) and value.dtype == np.int64:  # position ids (0..63) or token types (0)
        set_constant(node, np.arange(POSITIONS, dtype=np.int64)[None] if value[0, 1] == 1
                     else np.zeros((1, POSITIONS), np.int64))
    elif value.shape == (1,) and value[0] == 16:  # the head size in the reshapes
        set_constant(node, np.array([HEAD], np.int64))
    elif value.shape == () and value.dtype == np.float32 and abs(float(value) - 0.25) < 1e-7:  # 1 / sqrt(16)
        set_constant(node, np.array(1.0 / np.sqrt(HEAD), np.float32))

# The exporter shares equal tiny biases through Identity nodes: give every bias its own tensor.
aliases = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity"}
nodes = [n for n in graph.node if n.op_type != "Identity"]
for alias, target in aliases.items():
    weights[alias] = weight(alias, list(weights[target].dims))

layer_in = "/model/encoder/layer.0/output/LayerNorm/LayerNormalization_output_0"
layer_out = "/model/encoder/layer.1/output/LayerNorm/LayerNormalization_output_0"
layer1 = [n for n in nodes if "/layer.1/" in n.name]
for n in layer1:
    n.output[:] = [layer_out if o == "last_hidden_state" else o for o in n.output]
produced = {o for n in layer1 for o in n.output}
previous = layer_out
for k in range(2, LAYERS):
    suffix = f"__layer{k}"
    for n in layer1:
        c = copy.deepcopy(n)
        c.name = n.name.replace("/layer.1/", f"/layer.{k}/")
        for i, x in enumerate(c.input):
            if x in produced:
                c.input[i] = x + suffix
            elif x == layer_in:
                c.input[i] = previous
            elif x.startswith("onnx::MatMul") or x.startswith("model.encoder.layer.1."):
                weights[x + suffix] = weight(x + suffix, list(weights[x].dims))
                c.input[i] = x + suffix
        c.output[:] = [o + suffix for o in c.output]
        nodes.append(c)
    previous = layer_out + suffix
for n in nodes:
    n.output[:] = ["last_hidden_state" if o == previous else o for o in n.output]
del graph.node[:]
graph.node.extend(nodes)
del graph.initializer[:]
graph.initializer.extend(weights.values())
graph.output[0].type.tensor_type.shape.dim[2].dim_value = HIDDEN
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
params = sum(int(np.prod(t.dims)) for t in graph.initializer)
print(f"{sys.argv[1]}: {len(nodes)} nodes, {params / 1e6:.1f}M parameters")
