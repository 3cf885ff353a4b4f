#include "backends/cuda/cuda_launch.h"

#include <cstdlib>
#include <string>

namespace kiln::cuda {
namespace {

bool env_off(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "0";
}

}  // namespace

bool dependent_launch() {
  static const bool on = !env_off("KILN_CUDA_PDL");
  return on;
}

}  // namespace kiln::cuda
