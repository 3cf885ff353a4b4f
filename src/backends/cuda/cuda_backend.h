// The CUDA backend: runs a Kiln engine built for cuda-sm90 on a Hopper GPU.
//
// prepare() binds every node of the graph to a kernel of this folder (one kernel family per
// file, a launch_<op>() beside each kernel; some runs of nodes bind to one fused kernel: a
// residual add and the RMSNorm after it, the q/k/v split with its ropes and the attention's
// cache store, a gate/up product and its SwiGLU in decode-sized steps; outputs such a kernel
// cannot write in place get buffers of the backend's own), uploads the weights once from the
// mapped engine into one device allocation (no host copy on the way), and allocates everything
// a step needs: the activation arena (the engine's memory plan times max_tokens), the GEMM
// scratch, the cuBLAS workspace, a device block for the step's inputs and pinned host buffers
// for the transfers.
// run_step() allocates nothing on the device: it packs the step (ids, positions, logit rows,
// token-to-sequence map, attention tiles, dynamic-rope frequencies, block tables) into pinned
// memory, copies it over in two transfers, runs the graph on one stream and copies the logits
// back; run_step_sampled() instead copies back only the rows the caller samples itself, runs the
// sampling kernel over all of them (cuda_sampling.h) and copies back one id a row. Decode steps (one new token per sequence) are captured into a CUDA
// graph the first time a batch shape is seen and replayed after that; every varying input is
// read from the device step block, so a replay computes exactly what the eager launches would.
// The block-table area grows when a KV cache with more blocks per sequence arrives (it drops the
// captured graphs), and the sampling lists' area when a step's penalty lists outgrow it: the
// only allocations after prepare.
//
// Ownership: the backend owns its device memory, stream, cuBLAS handle and graphs; the model
// must outlive it; KV-cache storage comes from allocate() and is owned by the caller's KvCache.
// CUDA types stay inside backends/cuda: this header is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/cuda/cuda_device.h"
#include "runtime/backend.h"

namespace kiln::cuda {

class CudaBackend final : public runtime::Backend {
 public:
  // The backend on GPU `device`; fails when there is no GPU or it is not a Hopper GPU.
  static Expected<std::unique_ptr<CudaBackend>> create(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string target() const override;
  Status check_target(const std::string& engine_target) const override;
  Status prepare(const runtime::LoadedModel& model, int64_t max_tokens) override;
  Expected<std::unique_ptr<runtime::DeviceBuffer>> allocate(size_t bytes) override;
  bool supports_kv_cache_dtype(runtime::KvCacheDtype) const override { return true; }  // fp32, bf16 and fp8
  Expected<std::span<const float>> run_step(const runtime::StepView& step) override;
  // Callers have the GPU choose their tokens (default on; KILN_CUDA_SAMPLING=0 turns that off,
  // and they sample the logits on the host).
  bool samples_on_device() const override;
  Expected<runtime::SampledStep> run_step_sampled(const runtime::StepView& step,
                                                  const runtime::SamplingBatch& sampling) override;

  const CudaDeviceInfo& device() const;
  // Decode steps run from captured CUDA graphs (default on; KILN_CUDA_GRAPHS=0 turns it off).
  // Kernels launch as programmatic dependent launches (cuda_launch.cuh; KILN_CUDA_PDL=0 turns
  // that off), in graphs and eager steps alike.
  void set_graphs_enabled(bool enabled);
  int64_t graphs_captured() const;
  int64_t graph_replays() const;

  struct State;

 private:
  explicit CudaBackend(std::unique_ptr<State> state);
  // Everything of a step up to its logits, enqueued on the stream.
  Status enqueue_step(const runtime::StepView& step);
  std::unique_ptr<State> s_;
};

}  // namespace kiln::cuda
