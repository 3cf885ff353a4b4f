// NumPy .npy files (format version 1.0 written; 1.0-3.0 read): float32 logits for `kiln eval
// --logits-out`, and tensors of any dtype for the inputs and outputs of general engines.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"

namespace kiln::cli {

// Any-dtype arrays (little-endian, C order) as tensors: f2/f4/f8, i1/i2/i4/i8, u1/u2/u4/u8, b1.
Expected<ir::Tensor> npy_read(const std::string& path);
Status npy_write(const std::string& path, const ir::Tensor& tensor);

Status npy_write_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape);

}  // namespace kiln::cli
