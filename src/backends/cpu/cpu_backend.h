// The CPU backend: runs a prepared graph with the kernels of this folder, multi-threaded with
// OpenMP (cpu_set_threads). Each node is bound once, in prepare(), to a closure that holds its
// kernel choice and constants (rope frequencies, ALiBi slopes); run_step() lays each node's
// buffers out in the activation arena (the engine's memory plan times max_tokens) and calls the
// closures in order. Weights are read in place from the mapped engine; KV storage is host memory.
// With KILN_CPU_PROFILE set (op_profile.h), the backend times each node and prints the time per
// op over all steps when destroyed.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/op_profile.h"
#include "runtime/backend.h"

namespace kiln::cpu {

// Threads every CPU kernel uses; 0 = all cores.
void cpu_set_threads(int threads);
int cpu_threads();

// "cpu-avx512bf16", "cpu-avx512", "cpu-avx2" or "cpu-scalar".
std::string cpu_target_name(Isa isa);

class CpuBackend final : public runtime::Backend {
 public:
  // `threads`: the OpenMP team that prepare_thread() gives a thread (0 = all cores).
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;
  std::string target() const override;
  void prepare_thread() const override;
  Status check_target(const std::string& engine_target) const override;
  Status prepare(const runtime::LoadedModel& model, int64_t max_tokens) override;
  Expected<std::unique_ptr<runtime::DeviceBuffer>> allocate(size_t bytes) override;
  bool supports_kv_cache_dtype(runtime::KvCacheDtype) const override { return true; }  // fp32, bf16 and fp8
  Expected<std::span<const float>> run_step(const runtime::StepView& step) override;
  // A TensorGraphRunner (tensor/tensor_graph_runner.h) over the model's graph.
  Expected<std::unique_ptr<runtime::GraphRunner>> create_graph_runner(const runtime::LoadedModel& model) override;

  // Buffers of one node: inputs then outputs, in the node's order. Weights point at their stored bytes.
  struct NodeBuffers {
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
  };
  using NodeFn = std::function<void(const NodeBuffers&, const runtime::StepView&)>;

 private:
  Status bind_nodes(const ir::Graph& graph);
  void* buffer(ir::ValueId id) const;

  int threads_ = 0;
  const ir::Graph* graph_ = nullptr;
  int64_t vocab_ = 0;
  int64_t max_tokens_ = 0;
  std::vector<NodeFn> nodes_;
  std::unique_ptr<runtime::HostBuffer> arena_;
  std::vector<NodeBuffers> node_buffers_;  // per node, set by prepare()
  bool profile_ = false;
  std::vector<std::string> profile_kinds_;  // per node: its line in the profile
  OpProfile profile_totals_;
  int64_t profile_tokens_ = 0;
};

}  // namespace kiln::cpu
