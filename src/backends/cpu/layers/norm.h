// Row normalisations of the decoder block, fp32, with Hugging Face transformers' semantics:
// LlamaRMSNorm (also Mistral, Qwen2, Baichuan) and torch.nn.LayerNorm (GPT-2).
//
// The caller owns every buffer; y may equal x (in place), other overlaps are not allowed.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// x, y: [m, h] row-major; weight: [h].
// y[i, :] = weight * (x[i, :] / sqrt(mean(x[i, :]^2) + eps)).
void rms_norm(const float* x, int64_t m, int64_t h, const float* weight, float eps, float* y);

// x, y: [m, h] row-major; weight, bias: [h].
// y[i, :] = (x[i, :] - mean) / sqrt(var + eps) * weight + bias, var the biased variance of the row.
void layer_norm(const float* x, int64_t m, int64_t h, const float* weight, const float* bias,
                float eps, float* y);

}  // namespace kiln::cpu
