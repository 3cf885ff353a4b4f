// RMSNorm and LayerNorm over rows, as the CPU backend computes them (backends/cpu/layers/norm.h): row
// statistics summed in double, the normalisation in fp32, Hugging Face's order of operations.
// One thread block per row. Device buffers owned by the caller; y may equal x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_activation_type.h"

namespace kiln::cuda {

// x, y: [m, h]; weight: [h].  y = weight * (x / sqrt(mean(x^2) + eps)), of y_type (fp32, or
// rounded for a product that reads 16-bit activations; then y must not overlap x).
void launch_rms_norm(const float* x, int64_t m, int64_t h, const float* weight, float eps, void* y,
                     cudaStream_t stream, ActivationType y_type = ActivationType::kF32);
// x, y: [m, h]; weight, bias: [h].  y = (x - mean) / sqrt(var + eps) * weight + bias.
void launch_layer_norm(const float* x, int64_t m, int64_t h, const float* weight, const float* bias, float eps,
                       float* y, cudaStream_t stream);

// The residual add and the RMSNorm after it in one pass (the decoder's `x += o; n = rms(x)`):
// a, b, sum, y: [m, h]; sum = a + b (sum may equal a), y = rms_norm(sum) * weight, with the
// roundings of launch_add followed by launch_rms_norm; y of y_type as there.
void launch_add_rms_norm(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps,
                         float* sum, void* y, cudaStream_t stream, ActivationType y_type = ActivationType::kF32);

}  // namespace kiln::cuda
