// Element-wise CPU kernels of the decoder block: residual add, gating multiply and the MLP
// activations. All work on fp32 and match Hugging Face transformers' fp32 formulas.
//
// The caller owns every buffer. Outputs may alias an input element for element (y == a is a
// valid in-place add), except silu_mul, whose output must not overlap its input.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// y[i] = a[i] + b[i]; a, b, y: [n].
void add(const float* a, const float* b, int64_t n, float* y);

// y[i] = a[i] * b[i]; a, b, y: [n].
void mul(const float* a, const float* b, int64_t n, float* y);

// y[i] = x[i] * sigmoid(x[i]) = x[i] / (1 + exp(-x[i])); x, y: [n].
void silu(const float* x, int64_t n, float* y);

// GPT-2's "gelu_new": y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x, y: [n].
void gelu_tanh(const float* x, int64_t n, float* y);

// Gated MLP activation (Llama, Mistral, Qwen2): the gate and up projections arrive
// concatenated, x: [m, 2*inter] = [gate | up]; y: [m, inter],
// y[i, j] = silu(gate[i, j]) * up[i, j].
void silu_mul(const float* x, int64_t m, int64_t inter, float* y);

}  // namespace kiln::cpu
