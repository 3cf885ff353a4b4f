// The bundled demo model (models/demo) for `kiln serve` with no ENGINE: where its checkpoint is,
// and the bf16 engine compiled from it once, with kernels timed on this machine, and cached beside
// the kiln binary. The cache is compiled again when it fails to load or when anything it was made
// from is newer: a file of the model directory, or the kiln binary itself (a rebuilt kiln may
// choose other kernels or write another engine version).
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"

namespace kiln::cli {

// The demo model's directory: beside the source tree the binary was built from, beside the
// binary, or under the working directory.
Expected<std::filesystem::path> demo_model_dir();

// The running kiln binary (/proc/self/exe).
std::filesystem::path kiln_binary_path();

// Whether `cached` exists and is at least as new as every file directly in `model_dir` and as
// `binary`.
bool demo_engine_is_current(const std::filesystem::path& cached, const std::filesystem::path& model_dir,
                            const std::filesystem::path& binary);

// The cached demo engine's path, compiled first (on `threads` threads; 0: all cores) when it is
// missing, not current or does not load. Progress goes to stderr.
Expected<std::string> demo_engine(int threads);

}  // namespace kiln::cli
