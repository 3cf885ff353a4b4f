// The sample inputs of `kiln build model.onnx --int8 --calib DIR`, read from NumPy files: either
// one DIR/*.npy file a sample (a model with one input), or one subdirectory a sample holding
// INPUT_NAME.npy for each input (a '/' in an input's name written as '_'). Samples are taken in
// file-name order.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"

namespace kiln::cli {

// Each sample maps input name to tensor; a bare DIR/*.npy sample maps "" (the only input).
Expected<std::vector<std::map<std::string, ir::Tensor>>> read_calibration_samples(const std::string& dir);

}  // namespace kiln::cli
