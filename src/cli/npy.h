// Writing float32 arrays as NumPy .npy files (format version 1.0), for `kiln eval --logits-out`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::cli {

Status npy_write_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape);

}  // namespace kiln::cli
