// The element type in which one kernel hands activations to the next: fp32, or the fp16 / bf16
// type that a following tensor-core product reads (cuda_gemm.h), rounded to nearest once where
// written instead of in a separate pass before the product.
#pragma once

namespace kiln::cuda {

enum class ActivationType { kF32, kF16, kBF16 };

}  // namespace kiln::cuda
