#!/usr/bin/env python3
"""Writes reference.safetensors: a small safetensors file encoded independently of Kiln's writer
(only the Python standard library), so the reader is checked against the format, not against
itself. Layout as in the safetensors specification: u64 little-endian header length, JSON header
padded with spaces to a multiple of 8, then the data section.

The data section is deliberately not in header-key order, and the file holds a scalar, an empty
tensor and an integer tensor. Run from this directory: python3 make_reference.py
"""
import json
import struct


def bf16(x):
    # Exact for the values below (all representable in bfloat16): keep the top 16 bits.
    return struct.pack("<I", struct.unpack("<I", struct.pack("<f", x))[0])[2:]


tensors = [  # (name, dtype, shape, bytes) in data-section order
    ("z_scalar", "F32", [], struct.pack("<f", 7.25)),
    ("bf16_matrix", "BF16", [2, 2], b"".join(bf16(v) for v in [1.0, -1.5, 3.0, 0.15625])),
    ("f32_matrix", "F32", [2, 3], struct.pack("<6f", -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)),
    ("empty", "F16", [0, 4], b""),
    ("f16_vector", "F16", [4], struct.pack("<4e", 1.0, -2.0, 0.5, 65504.0)),
    ("i64_ids", "I64", [2], struct.pack("<2q", 1, -1)),
]

header = {"__metadata__": {"format": "pt", "source": "make_reference.py"}}
offset = 0
data = b""
for name, dtype, shape, raw in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
    offset += len(raw)
    data += raw

text = json.dumps(dict(sorted(header.items())), separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open("reference.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
