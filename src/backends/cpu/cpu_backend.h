// The CPU backend: runs a prepared graph with the kernels of this folder, multi-threaded with
// OpenMP (cpu_set_threads). Each node is bound once, in prepare(), to a closure that holds its
// kernel choice and constants (rope frequencies, ALiBi slopes); run_node only calls it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "runtime/backend.h"

namespace kiln::cpu {

// Threads every CPU kernel uses; 0 = all cores.
void cpu_set_threads(int threads);
int cpu_threads();

// "cpu-avx512bf16", "cpu-avx512", "cpu-avx2" or "cpu-scalar".
std::string cpu_target_name(Isa isa);

class CpuBackend final : public runtime::Backend {
 public:
  CpuBackend();
  std::string target() const override;
  Status check_target(const std::string& engine_target) const override;
  Status prepare(const ir::Graph& graph) override;
  void run_node(size_t index, const runtime::NodeBuffers& buffers, const runtime::StepView& step) override;

  // The matmul kernel names bound to each matmul node, for `kiln inspect`-style reports.
  using NodeFn = std::function<void(const runtime::NodeBuffers&, const runtime::StepView&)>;

 private:
  std::vector<NodeFn> nodes_;
};

}  // namespace kiln::cpu
