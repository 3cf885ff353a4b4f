#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_graph_patterns.h"
#include "backends/cuda/gemm/cublas_library.h"
#include "backends/cuda/gemm/cuda_gemm.h"
#include "backends/cuda/gemm/cuda_gemv.h"
#include "backends/cuda/gemm/cuda_matmul.h"
#include "backends/cuda/layers/cuda_elementwise.h"
#include "backends/cuda/layers/cuda_embedding.h"
#include "backends/cuda/layers/cuda_norm.h"
#include "backends/cuda/layers/cuda_qkv.h"
#include "backends/cuda/layers/cuda_rope.h"
#include "backends/cuda/layers/cuda_sampling.h"
#include "ir/position_encoding.h"
#include "runtime/loaded_model.h"

namespace kiln::cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kAlign = 256;
constexpr int64_t kMaxGraphs = 256;  // captured decode shapes kept; beyond this, eager launches
constexpr int64_t kMaxAttentionSplits = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Device memory freed on destruction.
struct DeviceMemory {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { release(); }
  void release() {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  Status allocate(size_t n) {
    release();
    if (n == 0) return Status::ok();
    KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, n));
    bytes = n;
    return Status::ok();
  }
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(ptr) + offset);
  }
};

// Page-locked host memory (fast, asynchronous transfers), freed on destruction.
struct PinnedMemory {
  void* ptr = nullptr;
  size_t bytes = 0;
  PinnedMemory() = default;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  ~PinnedMemory() { release(); }
  void release() {
    if (ptr != nullptr) cudaFreeHost(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  Status allocate(size_t n) {
    release();
    if (n == 0) return Status::ok();
    KILN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr, n, cudaHostAllocDefault));
    bytes = n;
    return Status::ok();
  }
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(ptr) + offset);
  }
};

// KV-cache storage on the GPU.
class CudaBuffer final : public runtime::DeviceBuffer {
 public:
  CudaBuffer(void* ptr, size_t bytes, int device) : ptr_(ptr), bytes_(bytes), device_(device) {}
  ~CudaBuffer() override { cudaFree(ptr_); }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  std::string device() const override { return "cuda:" + std::to_string(device_); }

 private:
  void* ptr_;
  size_t bytes_;
  int device_;
};

// Byte offsets of the step's inputs in the step block (device) and its pinned mirror.
struct StepLayout {
  size_t ids = 0, positions = 0, logit_rows = 0, token_seq = 0, tiles = 0, rope = 0, bytes = 0;
};

// A dynamic-NTK rope whose frequencies are recomputed each step for each sequence's length.
struct DynamicRope {
  ir::RopeParams params;
  int64_t rotary_dim = 0;
  size_t offset = 0;  // of its [max_tokens (sequences), rotary_dim / 2] table in the step block
};

}  // namespace

// What one step's kernels read besides their node buffers: counts, the step block's device
// pointers and the KV cache.
struct StepContext {
  int64_t num_tokens = 0, num_rows = 0, num_seqs = 0;
  bool decode = false;  // every sequence has one new token
  int64_t num_tiles = 0;
  StepTokens tokens{};
  const AttentionTile* tiles = nullptr;
  const int32_t* tables = nullptr;
  int table_stride = 0;
  int block_size = 0;
  runtime::KvCache* cache = nullptr;
};

namespace {
// Whether a step of `rows` rows hands a 16-bit q/k/v product (qkv_in_16_bits) over in 16 bits:
// over a cache that rounds its keys and values anyway.
bool qkv_16_in_step(const StepContext& s, int64_t rows) {
  return rows >= kGemvMaxRows && s.cache != nullptr && s.cache->spec().dtype != runtime::KvCacheDtype::kF32;
}


// Layer `layer` of the step's cache, with the step's block tables.
PagedKv paged_kv(const StepContext& s, int64_t layer) {
  return PagedKv{s.cache->k_data(layer), s.cache->v_data(layer), s.block_size, s.tables, s.table_stride,
                 s.cache->spec().dtype};
}
}  // namespace

struct CudaBackend::State {
  CudaDeviceInfo device;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceMemory workspace, weights, arena, scratch, constants, step_dev, tables_dev;
  PinnedMemory step_host, tables_host, logits_host;
  // Device sampling: the step's rows and lists (grown on demand), and the chosen ids.
  DeviceMemory sampling_dev, ids_dev;
  PinnedMemory sampling_host, ids_host;
  StepLayout layout;
  std::vector<DynamicRope> dynamic_ropes;

  const ir::Graph* graph = nullptr;
  int64_t vocab = 0, max_tokens = 0, max_seq_len = 0;
  std::map<std::string, size_t> weight_offset;  // name -> offset in `weights`
  std::map<std::string, size_t> input_offset;   // graph input name -> offset in the step block
  std::set<ir::ValueId> producer_of_inputs;     // the graph's input values
  std::vector<float> constants_host;             // rope frequencies, ALiBi slopes; uploaded once
  using NodeFn = std::function<Status(const StepContext&)>;
  std::vector<NodeFn> nodes;
  std::vector<std::string> node_names;
  std::vector<std::string> node_ops;  // what the profile groups by: op, matmul shape, fused pair

  // KILN_CUDA_PROFILE=1: eager steps timed node by node with events (all but the first of each
  // kind); the totals per op go to stderr when the backend is destroyed.
  bool profile = false;
  std::vector<cudaEvent_t> profile_events;
  std::map<std::string, std::pair<double, int64_t>> profile_ms;  // op -> (ms, calls)
  std::map<std::string, std::pair<double, int64_t>> profile_steps;  // "decode"/"prefill" -> (ms, steps)
  std::set<bool> profile_seen;  // kinds of step (decode or not) run once already

  // Whether the engine's prefill attention runs on the tensor-core kernel, whose tiles take
  // attention_mma_tile_rows rows for the step's cache; the fp32 tile kernel's take 32.
  bool mma_tiles = false;

  bool graphs_enabled = true;
  bool device_sampling = true;  // KILN_CUDA_SAMPLING=0: callers sample the logits on the host
  int64_t graphs_captured = 0, graph_replays = 0;
  std::map<std::tuple<int64_t, int64_t, const void*, int, int>, cudaGraphExec_t> graphs;

  ~State() {
    print_profile();
    for (cudaEvent_t e : profile_events) cudaEventDestroy(e);
    clear_graphs();
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void clear_graphs() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    graphs.clear();
  }

  // Device address of an activation or weight.
  void* buffer(ir::ValueId id) const {
    if (const auto it = moved.find(id); it != moved.end()) return it->second;
    const ir::Value& v = graph->value(id);
    if (v.is_weight) return weights.at<void>(weight_offset.at(v.name));
    if (producer_of_inputs.count(id) != 0) return step_dev.at<void>(input_offset.at(v.name));
    return arena.at<float>(0) + v.arena_offset * max_tokens;
  }

  size_t add_constants(const std::vector<float>& values) {
    const size_t offset = constants_host.size();
    constants_host.insert(constants_host.end(), values.begin(), values.end());
    // Keep each table 16-byte aligned.
    while (constants_host.size() % 4 != 0) constants_host.push_back(0.0f);
    return offset;
  }
  const float* constant(size_t offset) const { return constants.at<float>(0) + offset; }

  Status bind_nodes();
  Status run_nodes(const StepContext& ctx);
  Status run_nodes_profiled(const StepContext& ctx);
  void print_profile() const;
  // Scratch for split decode attention, and the split count of a step of t rows.
  DeviceMemory attention_partial;
  DeviceMemory swiglu_out;                 // SwiGLU outputs moved out of the arena (bind_nodes)
  std::map<ir::ValueId, void*> moved;      // activations that live outside the arena
  DeviceMemory rotated_q;  // queries written by launch_qkv_rope_store: [max_tokens, num_heads * head_dim]
  int64_t split_tokens = 0;  // steps of up to this many rows may split
  int attention_splits(int64_t t, int heads) const {
    if (t > split_tokens) return 1;
    const int64_t want = (4 * static_cast<int64_t>(device.multiprocessors) + t * heads - 1) / (t * heads);
    return static_cast<int>(std::clamp<int64_t>(want, 1, kMaxAttentionSplits));
  }
};

namespace {

int64_t rows_of(const ir::Value& v, const StepContext& s) {
  const int64_t d = v.shape.front();
  return d == ir::kTokens ? s.num_tokens : d == ir::kRows ? s.num_rows : d;
}

// Index of the table for this rope in `ropes`, or -1.
int64_t dynamic_rope_index(const std::vector<DynamicRope>& ropes, const ir::RopeParams& p, int64_t rot) {
  for (size_t i = 0; i < ropes.size(); ++i) {
    const ir::RopeParams& q = ropes[i].params;
    if (ropes[i].rotary_dim == rot && q.theta == p.theta && q.factor == p.factor && q.max_position == p.max_position) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

}  // namespace

Status CudaBackend::State::bind_nodes() {
  nodes.clear();
  node_names.clear();
  node_ops.clear();
  constants_host.clear();
  const ir::Graph& g = *graph;
  State* self = this;
  mma_tiles = false;
  const std::map<ir::ValueId, int> consumers = consumer_counts(g);
  // Attention nodes whose k and v launch_qkv_rope_store stores, and the buffer it writes their
  // queries to (one, reused by every layer).
  std::set<size_t> cache_stored;
  size_t q_floats = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (is_qkv_rope_attention(g, i, consumers)) {
      q_floats = std::max(q_floats, static_cast<size_t>(g.value(g.nodes()[i].outputs[0]).shape[1] * max_tokens));
    }
  }
  KILN_RETURN_IF_ERROR(rotated_q.allocate(q_floats * sizeof(float)));
  // An engine whose prefill products all round their activations to fp16 or bf16 (what a timed
  // build chooses) runs prefill attention on tensor cores with fp16 products too; one that keeps
  // fp32 activations keeps fp32 attention.
  bool half_precision = true;
  for (const ir::Node& node : g.nodes()) {
    if (node.op != "matmul") continue;
    KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* prefill,
                          bind_matmul_kernel(node, "kernel_prefill", g.weight(node.inputs[1]).format, kGemvMaxRows));
    if (!cuda_matmul_kernel_rounds_activations(*prefill)) half_precision = false;
  }
  // A SwiGLU output the plan placed over the product's input (dead once the product has read
  // it, but the fused kernel reads and writes at once) moves to a buffer of its own.
  moved.clear();
  size_t swiglu_floats = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!is_matmul_silu_mul(g, i, consumers)) continue;
    const ir::Node& act = g.nodes()[i + 1];
    if (arena_overlap(g, g.nodes()[i].inputs[0], act.outputs[0])) {
      swiglu_floats = std::max(swiglu_floats, static_cast<size_t>(g.value(act.outputs[0]).shape[1] * max_tokens));
      moved[act.outputs[0]] = nullptr;
    }
  }
  KILN_RETURN_IF_ERROR(swiglu_out.allocate(swiglu_floats * sizeof(float)));
  for (auto& [id, ptr] : moved) ptr = swiglu_out.ptr;
  KILN_ASSIGN_OR_RETURN(const auto handed, handed_in_16_bits(g, consumers, half_precision));
  std::map<ir::ValueId, ActivationType> qkv_handed;  // q/k/v products written in 16 bits (qkv_in_16_bits)
  // The type in which a step of m rows hands activation `id` over.
  auto handed_type = [handed](ir::ValueId id) {
    const auto it = handed.find(id);
    const ActivationType t = it == handed.end() ? ActivationType::kF32 : it->second;
    return [t](int64_t m) { return m >= kGemvMaxRows ? t : ActivationType::kF32; };
  };
  for (size_t index = 0; index < g.nodes().size(); ++index) {
    const ir::Node& node = g.nodes()[index];
    const ir::Value& out0 = g.value(node.outputs[0]);
    const int64_t cols = out0.shape.size() == 2 ? out0.shape[1] : 1;
    const std::string& op = node.op;
    std::vector<void*> in, out;
    for (ir::ValueId id : node.inputs) in.push_back(buffer(id));
    for (ir::ValueId id : node.outputs) out.push_back(buffer(id));
    auto f_in = [in](size_t i) { return static_cast<const float*>(in[i]); };
    auto i_in = [in](size_t i) { return static_cast<const int32_t*>(in[i]); };
    auto f_out = [out](size_t i) { return static_cast<float*>(out[i]); };
    NodeFn fn;
    if (op == "matmul") {
      const ir::WeightEntry& w = g.weight(node.inputs[1]);
      KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* decode, bind_matmul_kernel(node, "kernel_decode", w.format, 1));
      KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* prefill,
                            bind_matmul_kernel(node, "kernel_prefill", w.format, kGemvMaxRows));
      const int64_t n = w.rows(), k = w.cols();
      const bool has_bias = node.inputs.size() == 3;
      const ir::Value x = g.value(node.inputs[0]);
      // Steps whose activations arrive in 16 bits (handed_in_16_bits) skip the rounding pass.
      const auto x_type = handed_type(node.inputs[0]);
      if (is_matmul_silu_mul(g, index, consumers)) {
        // SwiGLU after the gate/up product: in the GEMV's epilogue for decode-sized steps.
        const ir::Node& act = g.nodes()[++index];
        auto* y = static_cast<float*>(buffer(act.outputs[0]));
        const auto y_type = handed_type(act.outputs[0]);
        const GemvVariant variant = gemv_variant_of(*decode);
        const ir::WeightFormat format = w.format;
        // Larger steps of a rounded half-precision product write gate/up in the weights' type,
        // which SwiGLU widens as it reads: half the bytes of the product's output, written and read.
        const bool product_16 = gate_up_in_16_bits(g, node, *prefill);
        fn = [=](const StepContext& s) {
          const int64_t m = rows_of(x, s);
          const float* bias = has_bias ? f_in(2) : nullptr;
          const bool x_16 = x_type(m) != ActivationType::kF32;
          if (m < kGemvMaxRows && gemv_supports(format)) {
            launch_gemv_silu_mul(format, f_in(0), m, k, in[1], n / 2, bias, y, self->stream, variant);
            return Status::ok();
          }
          if (m >= kGemvMaxRows && product_16) {
            KILN_RETURN_IF_ERROR(
                x_16 ? launch_matmul_16_in(*prefill, self->cublas, in[0], m, k, in[1], n, nullptr, out[0], true,
                                           self->stream)
                     : launch_gemm_16_out(*prefill, self->cublas, f_in(0), m, k, in[1], n, out[0], self->scratch.ptr,
                                          self->stream));
            launch_silu_mul_16(out[0], format == ir::WeightFormat::kBF16, m, n / 2, y, self->stream, y_type(m));
            return Status::ok();
          }
          const CudaMatmulKernel& kern = m < kGemvMaxRows ? *decode : *prefill;
          KILN_RETURN_IF_ERROR(
              x_16 ? launch_matmul_16_in(kern, self->cublas, in[0], m, k, in[1], n, bias, f_out(0), false, self->stream)
                   : launch_matmul(kern, self->cublas, f_in(0), m, k, in[1], n, bias, f_out(0), self->scratch.ptr,
                                   self->stream));
          launch_silu_mul(f_out(0), m, n / 2, y, self->stream);
          return Status::ok();
        };
        nodes.push_back(std::move(fn));
        node_names.push_back(node.name + "+" + act.name);
        node_ops.push_back("matmul " + std::to_string(n) + "x" + std::to_string(k) + "+silu_mul");
        continue;
      }
      const bool qkv_16 = qkv_in_16_bits(g, index, consumers, *prefill);
      if (qkv_16) qkv_handed[node.outputs[0]] = w.format == ir::WeightFormat::kBF16 ? ActivationType::kBF16
                                                                                   : ActivationType::kF16;
      fn = [=](const StepContext& s) {
        const int64_t m = rows_of(x, s);
        const CudaMatmulKernel& kern = m < kGemvMaxRows ? *decode : *prefill;
        const float* bias = has_bias ? f_in(2) : nullptr;
        if (qkv_16 && qkv_16_in_step(s, m)) {
          return x_type(m) != ActivationType::kF32
                     ? launch_matmul_16_in(*prefill, self->cublas, in[0], m, k, in[1], n, nullptr, out[0], true,
                                           self->stream)
                     : launch_gemm_16_out(*prefill, self->cublas, f_in(0), m, k, in[1], n, out[0], self->scratch.ptr,
                                          self->stream);
        }
        if (x_type(m) != ActivationType::kF32) {
          return launch_matmul_16_in(kern, self->cublas, in[0], m, k, in[1], n, bias, f_out(0), false, self->stream);
        }
        return launch_matmul(kern, self->cublas, f_in(0), m, k, in[1], n, bias, f_out(0), self->scratch.ptr,
                             self->stream);
      };
    } else if (op == "embedding") {
      const ir::WeightEntry& table = g.weight(node.inputs[1]);
      const ir::WeightFormat format = table.format;
      if (!embedding_supports(format)) {
        return unimplemented("embedding '" + node.name + "' reads a table stored as " +
                             std::string(ir::weight_format_name(format)) +
                             ", which the CUDA backend does not read; rebuild the engine with `kiln build --target "
                             "cuda`");
      }
      const ir::Value ids = g.value(node.inputs[0]);
      fn = [=](const StepContext& s) {
        launch_embedding(in[1], format, cols, i_in(0), rows_of(ids, s), f_out(0), self->stream);
        return Status::ok();
      };
    } else if (op == "rms_norm" || op == "layer_norm") {
      const auto eps = static_cast<float>(node.attr_float("eps", 1e-6));
      const bool rms = op == "rms_norm";
      const auto y_type = handed_type(node.outputs[0]);
      fn = [=](const StepContext& s) {
        const int64_t m = rows_of(out0, s);
        if (rms) {
          launch_rms_norm(f_in(0), m, cols, f_in(1), eps, f_out(0), self->stream, y_type(m));
        } else {
          launch_layer_norm(f_in(0), m, cols, f_in(1), f_in(2), eps, f_out(0), self->stream);
        }
        return Status::ok();
      };
    } else if (op == "add" && fuses_with_next_norm(g, index)) {
      // The residual add and the RMSNorm that reads it: one kernel, both outputs.
      const ir::Node& norm = g.nodes()[++index];
      const auto eps = static_cast<float>(norm.attr_float("eps", 1e-6));
      const auto* weight = static_cast<const float*>(buffer(norm.inputs[1]));
      auto* normed = static_cast<float*>(buffer(norm.outputs[0]));
      const auto y_type = handed_type(norm.outputs[0]);
      fn = [=](const StepContext& s) {
        const int64_t m = rows_of(out0, s);
        launch_add_rms_norm(f_in(0), f_in(1), m, cols, weight, eps, f_out(0), normed, self->stream, y_type(m));
        return Status::ok();
      };
      nodes.push_back(std::move(fn));
      node_names.push_back(node.name + "+" + norm.name);
      node_ops.push_back("add+rms_norm");
      continue;
    } else if (op == "add" || op == "mul") {
      const bool is_add = op == "add";
      fn = [=](const StepContext& s) {
        const int64_t n = rows_of(out0, s) * cols;
        if (is_add) {
          launch_add(f_in(0), f_in(1), n, f_out(0), self->stream);
        } else {
          launch_mul(f_in(0), f_in(1), n, f_out(0), self->stream);
        }
        return Status::ok();
      };
    } else if (op == "silu" || op == "gelu_tanh") {
      const bool is_silu = op == "silu";
      fn = [=](const StepContext& s) {
        const int64_t n = rows_of(out0, s) * cols;
        if (is_silu) {
          launch_silu(f_in(0), n, f_out(0), self->stream);
        } else {
          launch_gelu_tanh(f_in(0), n, f_out(0), self->stream);
        }
        return Status::ok();
      };
    } else if (op == "silu_mul") {
      fn = [=](const StepContext& s) {
        launch_silu_mul(f_in(0), rows_of(out0, s), cols, f_out(0), self->stream);
        return Status::ok();
      };
    } else if (op == "split" && is_qkv_rope_attention(g, index, consumers)) {
      const ir::Node& rq = g.nodes()[index + 1];
      const ir::Node& rk = g.nodes()[index + 2];
      const ir::Node& attn = g.nodes()[index + 3];
      const QkvShape shape{static_cast<int>(attn.attr_int("num_heads")), static_cast<int>(attn.attr_int("num_kv_heads")),
                           static_cast<int>(attn.attr_int("head_dim")), static_cast<int>(rq.attr_int("rotary_dim"))};
      const ir::RopeParams params = ir::rope_params(rq);
      KILN_RETURN_IF_ERROR(ir::rope_params_validate(params, shape.rotary_dim).with_context("node '" + rq.name + "'"));
      const bool dynamic = params.type == "dynamic";
      const int64_t table_index = dynamic ? dynamic_rope_index(dynamic_ropes, params, shape.rotary_dim) : -1;
      if (dynamic && table_index < 0) return internal_error("dynamic rope of node '" + rq.name + "' has no table");
      const size_t offset = dynamic ? 0 : add_constants(ir::rope_inv_freq(params, shape.rotary_dim, 0));
      auto* q = rotated_q.at<float>(0);
      const int64_t layer = attn.attr_int("layer");
      const auto qkv_it = qkv_handed.find(node.inputs[0]);
      const ActivationType qkv_16 = qkv_it == qkv_handed.end() ? ActivationType::kF32 : qkv_it->second;
      fn = [=](const StepContext& s) {
        const float* inv = dynamic ? self->step_dev.at<float>(self->dynamic_ropes[static_cast<size_t>(table_index)].offset)
                                   : self->constant(offset);
        const PagedKv kv = paged_kv(s, layer);
        const ActivationType qkv_type = qkv_16_in_step(s, s.num_tokens) ? qkv_16 : ActivationType::kF32;
        launch_qkv_rope_store(in[0], qkv_type, s.num_tokens, shape, s.tokens, inv,
                              dynamic ? s.tokens.token_seq : nullptr, q, nullptr, nullptr, kv, self->stream);
        return Status::ok();
      };
      nodes.push_back(std::move(fn));
      node_names.push_back(node.name + "+" + rq.name + "+" + rk.name);
      node_ops.push_back("split+rope+kv_store");
      cache_stored.insert(index + 3);
      index += 2;
      continue;
    } else if (op == "split") {
      const std::vector<int64_t> sizes = node.attr_ints("sizes");
      if (sizes.size() > static_cast<size_t>(kMaxSplit) || sizes.size() != node.outputs.size()) {
        return unimplemented("split '" + node.name + "' has " + std::to_string(sizes.size()) +
                             " parts; the CUDA backend splits into at most " + std::to_string(kMaxSplit));
      }
      SplitOutputs outs{};
      outs.count = static_cast<int>(sizes.size());
      for (size_t j = 0; j < sizes.size(); ++j) {
        outs.out[j] = static_cast<float*>(out[j]);
        outs.size[j] = sizes[j];
      }
      const int64_t width = g.value(node.inputs[0]).shape[1];
      fn = [=](const StepContext& s) {
        launch_split(f_in(0), rows_of(out0, s), width, outs, self->stream);
        return Status::ok();
      };
    } else if (op == "rope") {
      const ir::RopeParams params = ir::rope_params(node);
      const int64_t heads = node.attr_int("num_heads"), dim = node.attr_int("head_dim");
      const int64_t rot = node.attr_int("rotary_dim");
      KILN_RETURN_IF_ERROR(ir::rope_params_validate(params, rot).with_context("node '" + node.name + "'"));
      RopeTensor first{f_in(0), f_out(0), heads}, second{nullptr, nullptr, 0};
      std::string name = node.name;
      if (pairs_with_next_rope(g, index)) {
        // The keys' rope right after the queries': one launch for both.
        const ir::Node& next = g.nodes()[++index];
        second = {static_cast<const float*>(buffer(next.inputs[0])), static_cast<float*>(buffer(next.outputs[0])),
                  next.attr_int("num_heads")};
        name += "+" + next.name;
      }
      if (params.type == "dynamic") {
        // Its table is filled each step (run_step); prepare() placed one per distinct rope.
        const int64_t table_index = dynamic_rope_index(dynamic_ropes, params, rot);
        if (table_index < 0) return internal_error("dynamic rope of node '" + node.name + "' has no table");
        fn = [=](const StepContext& s) {
          const float* table = self->step_dev.at<float>(self->dynamic_ropes[static_cast<size_t>(table_index)].offset);
          launch_rope_pair(first, second, s.num_tokens, dim, rot, s.tokens.positions, table, s.tokens.token_seq,
                           self->stream);
          return Status::ok();
        };
      } else {
        const size_t offset = add_constants(ir::rope_inv_freq(params, rot, 0));
        fn = [=](const StepContext& s) {
          launch_rope_pair(first, second, s.num_tokens, dim, rot, s.tokens.positions, self->constant(offset), nullptr,
                           self->stream);
          return Status::ok();
        };
      }
      nodes.push_back(std::move(fn));
      node_names.push_back(name);
      node_ops.push_back(second.x != nullptr ? "rope q+k" : "rope");
      continue;
    } else if (op == "attention") {
      AttentionShape shape{};
      shape.num_heads = static_cast<int>(node.attr_int("num_heads"));
      shape.num_kv_heads = static_cast<int>(node.attr_int("num_kv_heads"));
      shape.head_dim = static_cast<int>(node.attr_int("head_dim"));
      shape.scale = static_cast<float>(node.attr_float("scale"));
      shape.sliding_window = static_cast<int>(node.attr_int("sliding_window"));
      if (!attention_rows_supported(shape.head_dim)) {
        return unimplemented("attention '" + node.name + "' has head_dim " + std::to_string(shape.head_dim) +
                             "; the CUDA backend supports up to 256");
      }
      const bool tiles = attention_tiles_supported(shape.head_dim);
      const bool mma = half_precision && attention_mma_supported(shape.head_dim);
      if (mma && tiles) mma_tiles = true;
      const bool split = attention_split_supported(shape.head_dim);
      const int64_t layer = node.attr_int("layer");
      const bool alibi = node.attr_int("alibi") != 0;
      const size_t slopes = alibi ? add_constants(ir::alibi_slopes(shape.num_heads)) : 0;
      const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
      const bool stored = cache_stored.count(index) != 0;
      const float* q = stored ? rotated_q.at<float>(0) : f_in(0);
      // In 16 bits only from the split and tensor-core kernels (handed_in_16_bits).
      const auto y_type = handed_type(node.outputs[0]);
      const std::string name = node.name;
      fn = [=](const StepContext& s) {
        AttentionShape sh = shape;
        sh.alibi_slopes = alibi ? self->constant(slopes) : nullptr;
        const PagedKv kv = paged_kv(s, layer);
        if (!stored) launch_kv_cache_store(f_in(1), f_in(2), s.num_tokens, kv_row, s.tokens, kv, self->stream);
        const ActivationType y = y_type(s.num_tokens);
        if (s.decode && split) {
          launch_attention_split(q, s.num_tokens, s.tokens, sh, kv, self->attention_splits(s.num_tokens, sh.num_heads),
                                 self->attention_partial.at<float>(0), out[0], y, self->stream);
        } else if (!s.decode && tiles && mma) {
          launch_attention_mma(q, s.tiles, s.num_tiles, s.tokens, sh, kv, out[0], y, self->stream);
        } else if (y != ActivationType::kF32) {
          return internal_error("attention '" + name + "' has no kernel that writes 16 bits for this step");
        } else if (s.decode || !tiles) {
          launch_attention_rows(q, s.num_tokens, s.tokens, sh, kv, f_out(0), self->stream);
        } else {
          launch_attention_tiles(q, s.tiles, s.num_tiles, s.tokens, sh, kv, f_out(0), self->stream);
        }
        return Status::ok();
      };
    } else if (op == "gather_rows") {
      fn = [=](const StepContext& s) {
        launch_gather_rows(f_in(0), cols, i_in(1), s.num_rows, f_out(0), self->stream);
        return Status::ok();
      };
    } else {
      return unimplemented("the CUDA backend cannot run node '" + node.name + "' (op " + op + ")");
    }
    nodes.push_back(std::move(fn));
    node_names.push_back(node.name);
    node_ops.push_back(op == "matmul" ? "matmul " + std::to_string(g.weight(node.inputs[1]).rows()) + "x" +
                                            std::to_string(g.weight(node.inputs[1]).cols())
                                      : op);
  }
  return Status::ok();
}

Status CudaBackend::State::run_nodes(const StepContext& ctx) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    KILN_RETURN_IF_ERROR(nodes[i](ctx).with_context("node '" + node_names[i] + "'"));
    KILN_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), node_names[i].c_str()));
  }
  return Status::ok();
}

Status CudaBackend::State::run_nodes_profiled(const StepContext& ctx) {
  while (profile_events.size() < nodes.size() + 1) {
    cudaEvent_t e = nullptr;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    profile_events.push_back(e);
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(profile_events[0], stream));
  for (size_t i = 0; i < nodes.size(); ++i) {
    KILN_RETURN_IF_ERROR(nodes[i](ctx).with_context("node '" + node_names[i] + "'"));
    KILN_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), node_names[i].c_str()));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(profile_events[i + 1], stream));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(profile_events[nodes.size()]));
  // The first step of each kind pays for loading kernels (cuBLAS loads each GEMM's on its first
  // call): it is left out of the profile.
  if (profile_seen.insert(ctx.decode).second) return Status::ok();
  double total = 0.0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    float ms = 0.0f;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, profile_events[i], profile_events[i + 1]));
    auto& e = profile_ms[(ctx.decode ? "decode  " : "prefill ") + node_ops[i]];
    e.first += ms;
    e.second += 1;
    total += ms;
  }
  auto& step = profile_steps[ctx.decode ? "decode" : "prefill"];
  step.first += total;
  step.second += 1;
  return Status::ok();
}

void CudaBackend::State::print_profile() const {
  if (profile_steps.empty()) return;
  std::fprintf(stderr, "kiln cuda profile (eager launches, events between nodes)\n");
  for (const auto& [kind, e] : profile_steps) {
    std::fprintf(stderr, "  %-8s %6lld steps, %9.3f ms a step\n", kind.c_str(), static_cast<long long>(e.second),
                 e.first / static_cast<double>(e.second));
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, t] : profile_ms) {
      if (op.rfind(kind, 0) == 0) rows.emplace_back(t.first, op.substr(8));
    }
    std::sort(rows.rbegin(), rows.rend());
    for (const auto& [ms, op] : rows) {
      const auto& t = profile_ms.at((kind == "decode" ? "decode  " : "prefill ") + op);
      std::fprintf(stderr, "    %-28s %9.3f ms a step  %5.1f%%  %8.2f us a call\n", op.c_str(),
                   ms / static_cast<double>(e.second), 100.0 * ms / e.first,
                   1e3 * ms / static_cast<double>(t.second));
    }
  }
}

CudaBackend::CudaBackend(std::unique_ptr<State> state) : s_(std::move(state)) {}
CudaBackend::~CudaBackend() = default;

Expected<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  auto state = std::make_unique<State>();
  KILN_ASSIGN_OR_RETURN(state->device, cuda_device_info(device));
  KILN_RETURN_IF_ERROR(cuda_device_supported(state->device));
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  KILN_RETURN_IF_ERROR(load_cublas());
  KILN_CUBLAS_RETURN_IF_ERROR(cublasCreate(&state->cublas));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasSetStream(state->cublas, state->stream));
  KILN_RETURN_IF_ERROR(state->workspace.allocate(kCublasWorkspace));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(state->cublas, state->workspace.ptr, state->workspace.bytes));
  KILN_RETURN_IF_ERROR(attention_init());
  if (const char* env = std::getenv("KILN_CUDA_GRAPHS"); env != nullptr && std::string(env) == "0") {
    state->graphs_enabled = false;
  }
  if (const char* env = std::getenv("KILN_CUDA_SAMPLING"); env != nullptr && std::string(env) == "0") {
    state->device_sampling = false;
  }
  if (const char* env = std::getenv("KILN_CUDA_PROFILE"); env != nullptr && std::string(env) == "1") {
    state->profile = true;
    state->graphs_enabled = false;
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(state)));
}

std::string CudaBackend::target() const { return s_->device.target(); }

const CudaDeviceInfo& CudaBackend::device() const { return s_->device; }

void CudaBackend::set_graphs_enabled(bool enabled) {
  s_->graphs_enabled = enabled;
  if (!enabled) s_->clear_graphs();
}
int64_t CudaBackend::graphs_captured() const { return s_->graphs_captured; }
bool CudaBackend::samples_on_device() const { return s_->device_sampling; }
int64_t CudaBackend::graph_replays() const { return s_->graph_replays; }

Status CudaBackend::check_target(const std::string& engine_target) const {
  if (engine_target.rfind("cuda-", 0) != 0) {
    return invalid_argument("engine was built for " + engine_target + "; the CUDA backend runs engines built with "
                            "`kiln build MODEL_DIR --target cuda` — rebuild it that way");
  }
  if (engine_target != kCudaTarget) {
    return invalid_argument("engine was built for " + engine_target + "; this GPU (" + s_->device.name + ") is " +
                            target() + " — run `kiln build MODEL_DIR --target cuda` again on this machine");
  }
  return Status::ok();
}

Status CudaBackend::prepare(const runtime::LoadedModel& model, int64_t max_tokens) {
  State& s = *s_;
  s.clear_graphs();
  if (model.graph().has_tensor_ops()) {
    return unimplemented("the CUDA backend runs the LLM graphs; this engine holds general tensor ops (an imported "
                         "ONNX model): build it for the CPU with `kiln build` (no --target)");
  }
  s.graph = &model.graph();
  s.vocab = model.facts().vocab_size;
  s.max_tokens = max_tokens;
  s.max_seq_len = model.facts().max_seq_len;
  const ir::Graph& g = *s.graph;

  // Weights: one allocation, each weight 256-byte aligned, copied straight from the mapping.
  s.weight_offset.clear();
  size_t total = 0;
  for (const auto& [name, w] : g.weights()) {
    s.weight_offset[name] = total;
    total = align_up(total + w.stored.size());
  }
  KILN_RETURN_IF_ERROR(s.weights.allocate(std::max<size_t>(total, kAlign)));
  for (const auto& [name, w] : g.weights()) {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(s.weights.at<void>(s.weight_offset[name]), w.stored.data(), w.stored.size(),
                                         cudaMemcpyHostToDevice));
  }

  KILN_RETURN_IF_ERROR(
      s.arena.allocate(std::max<size_t>(static_cast<size_t>(g.arena_per_token() * max_tokens) * sizeof(float), kAlign)));
  s.producer_of_inputs.clear();
  for (ir::ValueId id : g.inputs()) {
    const std::string& name = g.value(id).name;
    if (name != "ids" && name != "positions" && name != "logit_rows") {
      return unimplemented("the CUDA backend does not know graph input '" + name + "'");
    }
    s.producer_of_inputs.insert(id);
  }

  // Matmul scratch for the largest activation any product converts (and the largest integer
  // weight a product widens), for the kernels the nodes will run.
  size_t scratch = kAlign;
  for (const ir::Node& node : g.nodes()) {
    if (node.op != "matmul") continue;
    const ir::WeightEntry& w = g.weight(node.inputs[1]);
    struct Use {
      const char* attr;
      int64_t kind_rows, rows;  // the rows that pick the kernel's kind; the most it multiplies
    };
    for (const Use& use : {Use{"kernel_decode", 1, kGemvMaxRows - 1}, Use{"kernel_prefill", kGemvMaxRows, max_tokens}}) {
      KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* kernel, bind_matmul_kernel(node, use.attr, w.format, use.kind_rows));
      scratch = std::max(scratch, matmul_scratch_bytes(*kernel, use.rows, w.rows(), w.cols()));
    }
  }
  KILN_RETURN_IF_ERROR(s.scratch.allocate(align_up(scratch)));

  // The step block: regions sized for max_tokens tokens (and as many sequences), then one
  // frequency table per distinct dynamic-NTK rope.
  const auto n = static_cast<size_t>(max_tokens);
  StepLayout& l = s.layout;
  size_t at = 0;
  auto region = [&](size_t bytes) {
    const size_t offset = at;
    at = align_up(at + bytes);
    return offset;
  };
  l.ids = region(n * 4);
  l.positions = region(n * 4);
  l.logit_rows = region(n * 4);
  l.token_seq = region(n * 4);
  l.tiles = region(2 * n * sizeof(AttentionTile));  // tiles <= tokens / 32 + sequences
  s.dynamic_ropes.clear();
  for (const ir::Node& node : g.nodes()) {
    if (node.op != "rope" || node.attr_str("type") != "dynamic") continue;
    const ir::RopeParams params = ir::rope_params(node);
    const int64_t rot = node.attr_int("rotary_dim");
    KILN_RETURN_IF_ERROR(ir::rope_params_validate(params, rot).with_context("node '" + node.name + "'"));
    if (dynamic_rope_index(s.dynamic_ropes, params, rot) < 0) {
      s.dynamic_ropes.push_back({params, rot, region(n * static_cast<size_t>(rot / 2) * sizeof(float))});
    }
  }
  l.bytes = std::max(at, kAlign);
  KILN_RETURN_IF_ERROR(s.step_dev.allocate(l.bytes));
  KILN_RETURN_IF_ERROR(s.step_host.allocate(l.bytes));
  s.input_offset = {{"ids", l.ids}, {"positions", l.positions}, {"logit_rows", l.logit_rows}};

  KILN_RETURN_IF_ERROR(s.bind_nodes());
  KILN_RETURN_IF_ERROR(s.constants.allocate(align_up(std::max<size_t>(s.constants_host.size(), 1) * sizeof(float))));
  if (!s.constants_host.empty()) {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(s.constants.ptr, s.constants_host.data(),
                                         s.constants_host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  // Split decode attention: steps of few rows split their keys; size the partials for them.
  s.split_tokens = 0;
  size_t partial = 0;
  for (const ir::Node& node : g.nodes()) {
    if (node.op != "attention") continue;
    const int heads = static_cast<int>(node.attr_int("num_heads")), dim = static_cast<int>(node.attr_int("head_dim"));
    const int64_t t = std::min<int64_t>(max_tokens, 4 * s.device.multiprocessors / heads);
    s.split_tokens = std::max(s.split_tokens, t);
    partial = std::max(partial, attention_split_partial_floats(t, heads, dim, kMaxAttentionSplits) * sizeof(float));
  }
  KILN_RETURN_IF_ERROR(s.attention_partial.allocate(align_up(std::max<size_t>(partial, kAlign))));

  // Block tables: room for max_tokens sequences of max_seq_len positions in blocks of 16; a
  // cache with smaller blocks grows it (run_step).
  const size_t table_ints = n * static_cast<size_t>((s.max_seq_len + 15) / 16);
  KILN_RETURN_IF_ERROR(s.tables_dev.allocate(table_ints * 4));
  KILN_RETURN_IF_ERROR(s.tables_host.allocate(table_ints * 4));
  KILN_RETURN_IF_ERROR(s.logits_host.allocate(n * static_cast<size_t>(s.vocab) * sizeof(float)));
  KILN_RETURN_IF_ERROR(s.ids_dev.allocate(n * sizeof(int32_t)));
  KILN_RETURN_IF_ERROR(s.ids_host.allocate(n * sizeof(int32_t)));
  const size_t sampling_bytes = n * sizeof(runtime::RowSampling) + (size_t{64} << 10);  // rows + 64 KiB of lists
  KILN_RETURN_IF_ERROR(s.sampling_dev.allocate(sampling_bytes));
  KILN_RETURN_IF_ERROR(s.sampling_host.allocate(sampling_bytes));
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Status::ok();
}

Expected<std::unique_ptr<runtime::DeviceBuffer>> CudaBackend::allocate(size_t bytes) {
  void* ptr = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)));
  auto buffer = std::make_unique<CudaBuffer>(ptr, bytes, s_->device.index);
  KILN_CUDA_RETURN_IF_ERROR(cudaMemset(ptr, 0, bytes));
  // The step stream does not wait for the legacy stream the memset ran on.
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return std::unique_ptr<runtime::DeviceBuffer>(std::move(buffer));
}

Status CudaBackend::enqueue_step(const runtime::StepView& step) {
  State& s = *s_;
  if (s.graph == nullptr) return internal_error("the CUDA backend runs a step before prepare()");
  const std::string here = "cuda:" + std::to_string(s.device.index);
  if (step.kv_cache->storage().device() != here) {
    return invalid_argument("the KV cache lives on " + step.kv_cache->storage().device() + ", not on " + here +
                            " (make it with Executor::create_kv_cache)");
  }
  const runtime::KvCacheSpec& spec = step.kv_cache->spec();
  const auto nt = static_cast<size_t>(step.num_tokens);
  const auto ns = static_cast<size_t>(step.num_seqs);

  StepContext ctx;
  ctx.num_tokens = step.num_tokens;
  ctx.num_rows = step.num_rows;
  ctx.num_seqs = step.num_seqs;
  ctx.decode = step.num_tokens == step.num_seqs;
  ctx.block_size = static_cast<int>(spec.block_size);
  ctx.table_stride = static_cast<int>((s.max_seq_len + spec.block_size - 1) / spec.block_size);
  ctx.cache = step.kv_cache;

  // Block tables, one row of table_stride entries per sequence (only the entries covering its
  // positions are filled: the kernels read no others).
  const size_t table_ints = ns * static_cast<size_t>(ctx.table_stride);
  if (table_ints * 4 > s.tables_host.bytes) {
    s.clear_graphs();  // captured graphs read the old table address
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
    const size_t want = static_cast<size_t>(s.max_tokens) * static_cast<size_t>(ctx.table_stride) * 4;
    KILN_RETURN_IF_ERROR(s.tables_dev.allocate(want));
    KILN_RETURN_IF_ERROR(s.tables_host.allocate(want));
  }
  auto* tables = s.tables_host.at<int32_t>(0);
  for (size_t q = 0; q < ns; ++q) {
    const int64_t end = step.context_len[q] + (step.query_start[q + 1] - step.query_start[q]);
    const auto blocks = static_cast<size_t>((end + spec.block_size - 1) / spec.block_size);
    std::memcpy(tables + q * static_cast<size_t>(ctx.table_stride), step.block_tables[q], blocks * 4);
  }

  // The step block.
  const StepLayout& l = s.layout;
  std::memcpy(s.step_host.at<int32_t>(l.ids), step.ids, nt * 4);
  std::memcpy(s.step_host.at<int32_t>(l.positions), step.positions, nt * 4);
  std::memcpy(s.step_host.at<int32_t>(l.logit_rows), step.logit_rows, static_cast<size_t>(step.num_rows) * 4);
  auto* token_seq = s.step_host.at<int32_t>(l.token_seq);
  auto* tiles = s.step_host.at<AttentionTile>(l.tiles);
  int64_t num_tiles = 0;
  const int tile_rows = s.mma_tiles ? attention_mma_tile_rows(spec.dtype)
                                    : kAttentionTileRows;
  for (size_t q = 0; q < ns; ++q) {
    const int32_t begin = step.query_start[q], end = step.query_start[q + 1];
    for (int32_t i = begin; i < end; ++i) token_seq[i] = static_cast<int32_t>(q);
    for (int32_t r = begin; r < end; r += tile_rows) {
      tiles[num_tiles++] = {static_cast<int32_t>(q), r, std::min(tile_rows, end - r), 0};
    }
  }
  ctx.num_tiles = num_tiles;
  for (const DynamicRope& d : s.dynamic_ropes) {
    const auto half = static_cast<size_t>(d.rotary_dim / 2);
    for (size_t q = 0; q < ns; ++q) {
      const int64_t len = step.context_len[q] + (step.query_start[q + 1] - step.query_start[q]);
      const std::vector<float> inv = ir::rope_inv_freq(d.params, d.rotary_dim, len);
      std::memcpy(s.step_host.at<float>(d.offset) + q * half, inv.data(), half * sizeof(float));
    }
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.step_dev.ptr, s.step_host.ptr, l.bytes, cudaMemcpyHostToDevice, s.stream));
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.tables_dev.ptr, s.tables_host.ptr, table_ints * 4, cudaMemcpyHostToDevice, s.stream));

  ctx.tokens = {s.step_dev.at<int32_t>(l.token_seq), s.step_dev.at<int32_t>(l.positions)};
  ctx.tiles = s.step_dev.at<AttentionTile>(l.tiles);
  ctx.tables = s.tables_dev.at<int32_t>(0);

  if (ctx.decode && s.graphs_enabled) {
    const auto key = std::make_tuple(ctx.num_tokens, ctx.num_rows, static_cast<const void*>(step.kv_cache->k_data(0)),
                                     ctx.table_stride, ctx.block_size);
    auto it = s.graphs.find(key);
    if (it == s.graphs.end() && static_cast<int64_t>(s.graphs.size()) < kMaxGraphs) {
      KILN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
      const Status st = s.run_nodes(ctx);
      cudaGraph_t captured = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s.stream, &captured);
      if (!st) {
        if (captured != nullptr) cudaGraphDestroy(captured);
        return st;
      }
      KILN_CUDA_RETURN_IF_ERROR(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, captured, 0);
      cudaGraphDestroy(captured);
      KILN_CUDA_RETURN_IF_ERROR(inst);
      it = s.graphs.emplace(key, exec).first;
      ++s.graphs_captured;
    }
    if (it != s.graphs.end()) {
      KILN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, s.stream));
      ++s.graph_replays;
    } else {
      KILN_RETURN_IF_ERROR(s.run_nodes(ctx));
    }
  } else {
    KILN_RETURN_IF_ERROR(s.profile ? s.run_nodes_profiled(ctx) : s.run_nodes(ctx));
  }

  return Status::ok();
}

Expected<std::span<const float>> CudaBackend::run_step(const runtime::StepView& step) {
  State& s = *s_;
  KILN_RETURN_IF_ERROR(enqueue_step(step));
  const auto* logits = static_cast<const float*>(s.buffer(s.graph->outputs()[0]));
  const size_t count = static_cast<size_t>(step.num_rows * s.vocab);
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.logits_host.ptr, logits, count * sizeof(float), cudaMemcpyDeviceToHost, s.stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  return std::span<const float>(s.logits_host.at<float>(0), count);
}

Expected<runtime::SampledStep> CudaBackend::run_step_sampled(const runtime::StepView& step,
                                                             const runtime::SamplingBatch& sampling) {
  State& s = *s_;
  // The rows, lists and token masks, each 16-byte aligned, in one transfer. The buffers grow
  // (with a stream synchronisation) only when a step's lists and masks outgrow every earlier one.
  const size_t rows = step.num_rows;
  const auto aligned = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t bias_tokens = aligned(rows * sizeof(runtime::RowSampling));
  const size_t bias_values = bias_tokens + aligned(sampling.bias_tokens.size() * 4);
  const size_t penalty_tokens = bias_values + aligned(sampling.bias_values.size() * 4);
  const size_t penalty_counts = penalty_tokens + aligned(sampling.penalty_tokens.size() * 4);
  const size_t mask_words = penalty_counts + aligned(sampling.penalty_counts.size() * 4);
  const size_t bytes = mask_words + aligned(sampling.mask_words.size() * 8);
  if (bytes > s.sampling_host.bytes) {
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
    KILN_RETURN_IF_ERROR(s.sampling_host.allocate(bytes * 2));
    KILN_RETURN_IF_ERROR(s.sampling_dev.allocate(bytes * 2));
  }
  KILN_RETURN_IF_ERROR(enqueue_step(step));
  // The previous step's transfer has finished: run_step* synchronises before it returns.
  const auto put = [&](size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(s.sampling_host.at<std::byte>(offset), v.data(), v.size() * sizeof(v[0]));
  };
  put(0, sampling.rows);
  put(bias_tokens, sampling.bias_tokens);
  put(bias_values, sampling.bias_values);
  put(penalty_tokens, sampling.penalty_tokens);
  put(penalty_counts, sampling.penalty_counts);
  put(mask_words, sampling.mask_words);
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.sampling_dev.ptr, s.sampling_host.ptr, bytes, cudaMemcpyHostToDevice, s.stream));
  DeviceSamplingRows on_device;
  on_device.rows = s.sampling_dev.at<runtime::RowSampling>(0);
  on_device.bias_tokens = s.sampling_dev.at<int32_t>(bias_tokens);
  on_device.bias_values = s.sampling_dev.at<float>(bias_values);
  on_device.penalty_tokens = s.sampling_dev.at<int32_t>(penalty_tokens);
  on_device.penalty_counts = s.sampling_dev.at<int32_t>(penalty_counts);
  on_device.mask_words = s.sampling_dev.at<uint64_t>(mask_words);
  on_device.mask_stride = sampling.mask_stride;
  auto* logits = static_cast<float*>(s.buffer(s.graph->outputs()[0]));
  // The rows the caller samples itself, before the kernel overwrites them.
  const auto vocab = static_cast<size_t>(s.vocab);
  for (size_t i = 0; i < sampling.host_rows.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.logits_host.at<float>(i * vocab * sizeof(float)),
                                              logits + static_cast<size_t>(sampling.host_rows[i]) * vocab,
                                              vocab * sizeof(float), cudaMemcpyDeviceToHost, s.stream));
  }
  launch_sample_rows(logits, step.num_rows, s.vocab, on_device, s.ids_dev.at<int32_t>(0), s.stream);
  KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.ids_host.ptr, s.ids_dev.ptr, rows * sizeof(int32_t),
                                            cudaMemcpyDeviceToHost, s.stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  return runtime::SampledStep{std::span<const int32_t>(s.ids_host.at<int32_t>(0), rows),
                              std::span<const float>(s.logits_host.at<float>(0), sampling.host_rows.size() * vocab)};
}

}  // namespace kiln::cuda
