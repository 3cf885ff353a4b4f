// The settings of programmatic dependent launch (cuda_launch.cuh), read once from the environment.
// Plain C++: no CUDA types.
#pragma once

namespace kiln::cuda {

// Whether launch() lets a kernel launch while the one before it runs (on unless KILN_CUDA_PDL=0).
bool dependent_launch();

}  // namespace kiln::cuda
