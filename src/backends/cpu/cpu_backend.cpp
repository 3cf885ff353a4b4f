#include "backends/cpu/cpu_backend.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "backends/cpu/layers/attention.h"
#include "backends/cpu/layers/elementwise.h"
#include "backends/cpu/layers/embedding.h"
#include "backends/cpu/layers/norm.h"
#include "backends/cpu/layers/rope.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "ir/position_encoding.h"
#include "runtime/loaded_model.h"

namespace kiln::cpu {
namespace {

// Steps with fewer rows than this use the node's decode kernel, others its prefill kernel.
constexpr int64_t kPrefillRows = 8;

int64_t rows_of(const ir::Value& v, const runtime::StepView& step) {
  const int64_t d = v.shape.front();
  return d == ir::kTokens ? step.num_tokens : d == ir::kRows ? step.num_rows : d;
}

const float* in_f(const CpuBackend::NodeBuffers& b, size_t i) { return static_cast<const float*>(b.inputs[i]); }
const int32_t* in_i(const CpuBackend::NodeBuffers& b, size_t i) { return static_cast<const int32_t*>(b.inputs[i]); }
float* out_f(const CpuBackend::NodeBuffers& b, size_t i) { return static_cast<float*>(b.outputs[i]); }

Expected<const MatmulKernel*> bind_matmul_kernel(const ir::Node& node, const std::string& attr,
                                                 ir::WeightFormat format) {
  const std::string name = node.attr_str(attr);
  const MatmulKernel* k = matmul_kernel_find(name);
  if (k == nullptr && !name.empty()) {
    return invalid_argument("node '" + node.name + "' names matmul kernel '" + name +
                            "', which this kiln does not have; rebuild the engine with this kiln's `kiln build`");
  }
  if (k == nullptr || k->format != format || static_cast<int>(k->isa) > static_cast<int>(isa_active())) {
    auto candidates = matmul_kernels(format, isa_active());
    if (candidates.empty()) {
      return unimplemented("no CPU matmul kernel for format " + std::string(ir::weight_format_name(format)));
    }
    k = candidates.front();
  }
  return k;
}

}  // namespace

void cpu_set_threads(int threads) { omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs()); }
int cpu_threads() { return omp_get_max_threads(); }

std::string cpu_target_name(Isa isa) { return "cpu-" + std::string(isa_name(isa)); }

CpuBackend::CpuBackend(int threads) : threads_(threads) {}

void CpuBackend::prepare_thread() const { cpu_set_threads(threads_); }

Expected<std::unique_ptr<runtime::GraphRunner>> CpuBackend::create_graph_runner(const runtime::LoadedModel& model) {
  KILN_ASSIGN_OR_RETURN(std::vector<ir::InputProfile> profiles, model.input_profiles());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<TensorGraphRunner> runner,
                        TensorGraphRunner::create(model.graph(), std::move(profiles)));
  return std::unique_ptr<runtime::GraphRunner>(std::move(runner));
}

std::string CpuBackend::target() const { return cpu_target_name(isa_detect()); }

Status CpuBackend::check_target(const std::string& engine_target) const {
  const std::string here = target();
  if (engine_target.rfind("cpu-", 0) != 0) {
    return invalid_argument("engine was built for " + engine_target + "; this is " + here +
                            " — run `kiln build` again on this machine");
  }
  auto isa = isa_from_name(engine_target.substr(4));
  if (!isa) return invalid_argument("engine target '" + engine_target + "' is unknown to this kiln; rebuild it");
  if (static_cast<int>(*isa) > static_cast<int>(isa_detect())) {
    return invalid_argument("engine was built for " + engine_target + "; this CPU is " + here +
                            " — run `kiln build` again on this machine");
  }
  return Status::ok();
}

Status CpuBackend::prepare(const runtime::LoadedModel& model, int64_t max_tokens) {
  graph_ = &model.graph();
  vocab_ = model.facts().vocab_size;
  max_tokens_ = max_tokens;
  KILN_RETURN_IF_ERROR(bind_nodes(*graph_));
  arena_ = std::make_unique<runtime::HostBuffer>(static_cast<size_t>(graph_->arena_per_token() * max_tokens) *
                                                 sizeof(float));
  // Every node's buffers are fixed from here on: look them up once rather than at every step.
  node_buffers_.clear();
  for (const ir::Node& node : graph_->nodes()) {
    NodeBuffers b;
    for (ir::ValueId in : node.inputs) b.inputs.push_back(buffer(in));
    for (ir::ValueId out : node.outputs) b.outputs.push_back(buffer(out));
    node_buffers_.push_back(std::move(b));
  }
  return Status::ok();
}

Expected<std::unique_ptr<runtime::DeviceBuffer>> CpuBackend::allocate(size_t bytes) {
  return std::unique_ptr<runtime::DeviceBuffer>(std::make_unique<runtime::HostBuffer>(bytes));
}

void* CpuBackend::buffer(ir::ValueId id) const {
  const ir::Value& v = graph_->value(id);
  if (v.is_weight) return const_cast<std::byte*>(graph_->weights().at(v.name).stored.data());
  return static_cast<float*>(arena_->data()) + v.arena_offset * max_tokens_;
}

Expected<std::span<const float>> CpuBackend::run_step(const runtime::StepView& step) {
  if (graph_ == nullptr) return internal_error("the CPU backend runs a step before prepare()");
  if (step.kv_cache->storage().device() != "host") {
    return invalid_argument("the KV cache lives on " + step.kv_cache->storage().device() + ", not in host memory");
  }
  // Graph inputs: ids, positions, logit_rows (by name, as the builders create them).
  for (ir::ValueId id : graph_->inputs()) {
    const std::string& name = graph_->value(id).name;
    const bool rows = name == "logit_rows";
    const int32_t* src = name == "ids" ? step.ids : name == "positions" ? step.positions : step.logit_rows;
    std::memcpy(buffer(id), src, static_cast<size_t>(rows ? step.num_rows : step.num_tokens) * sizeof(int32_t));
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!profile_) {
      nodes_[i](node_buffers_[i], step);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    nodes_[i](node_buffers_[i], step);
    OpProfile::Entry& e = profile_totals_.by_kind[profile_kinds_[i]];
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (profile_) {
    ++profile_totals_.runs;
    profile_tokens_ += step.num_tokens;
  }
  const auto* logits = static_cast<const float*>(buffer(graph_->outputs()[0]));
  return std::span<const float>(logits, static_cast<size_t>(step.num_rows * vocab_));
}

CpuBackend::~CpuBackend() {
  if (!profile_ || profile_totals_.runs == 0) return;
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.1f tokens a step",
                static_cast<double>(profile_tokens_) / static_cast<double>(profile_totals_.runs));
  profile_totals_.print("step", extra);
}

Status CpuBackend::bind_nodes(const ir::Graph& graph) {
  nodes_.clear();
  profile_ = profile_level_from_env() != ProfileLevel::kOff;
  profile_kinds_.clear();
  profile_totals_ = {};
  profile_tokens_ = 0;
  for (const ir::Node& node : graph.nodes()) {
    // Matrix products by weight shape (n x k), the rest by op.
    std::string kind = node.op;
    for (ir::ValueId in : node.inputs) {
      if (node.op == "matmul" && graph.value(in).is_weight) {
        const auto& shape = graph.weight(in).shape;
        if (shape.size() == 2) kind += " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
      }
    }
    profile_totals_.by_kind[kind].nodes += 1;
    profile_kinds_.push_back(std::move(kind));
  }
  std::map<std::vector<float>, std::shared_ptr<RopeTable>> rope_tables;
  for (const ir::Node& node : graph.nodes()) {
    const ir::Value& out0 = graph.value(node.outputs[0]);
    const int64_t cols = out0.shape.size() == 2 ? out0.shape[1] : 1;
    const std::string& op = node.op;
    NodeFn fn;
    if (op == "matmul") {
      const ir::WeightEntry& w = graph.weight(node.inputs[1]);
      KILN_ASSIGN_OR_RETURN(const MatmulKernel* decode, bind_matmul_kernel(node, "kernel_decode", w.format));
      KILN_ASSIGN_OR_RETURN(const MatmulKernel* prefill, bind_matmul_kernel(node, "kernel_prefill", w.format));
      const int64_t n = w.rows(), k = w.cols();
      const bool has_bias = node.inputs.size() == 3;
      const ir::Value x = graph.value(node.inputs[0]);
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        const int64_t m = rows_of(x, s);
        const MatmulKernel& kern = m < kPrefillRows ? *decode : *prefill;
        matmul(kern, in_f(b, 0), m, k, static_cast<const std::byte*>(b.inputs[1]), n,
               has_bias ? in_f(b, 2) : nullptr, out_f(b, 0));
      };
    } else if (op == "embedding") {
      const ir::WeightEntry& table = graph.weight(node.inputs[1]);
      const ir::WeightFormat format = table.format;
      if (ir::weight_format_is_panel(format)) {
        return invalid_argument("embedding '" + node.name + "' reads a table stored in panel format " +
                                std::string(ir::weight_format_name(format)) + "; lookups need a row format "
                                "(rebuild the engine with this kiln)");
      }
      const ir::Value ids = graph.value(node.inputs[0]);
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        embedding(static_cast<const std::byte*>(b.inputs[1]), format, cols, in_i(b, 0), rows_of(ids, s), out_f(b, 0));
      };
    } else if (op == "rms_norm" || op == "layer_norm") {
      const auto eps = static_cast<float>(node.attr_float("eps", 1e-6));
      const bool rms = op == "rms_norm";
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        const int64_t m = rows_of(out0, s);
        if (rms) {
          rms_norm(in_f(b, 0), m, cols, in_f(b, 1), eps, out_f(b, 0));
        } else {
          layer_norm(in_f(b, 0), m, cols, in_f(b, 1), in_f(b, 2), eps, out_f(b, 0));
        }
      };
    } else if (op == "add" || op == "mul") {
      const bool is_add = op == "add";
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        const int64_t n = rows_of(out0, s) * cols;
        if (is_add) {
          add(in_f(b, 0), in_f(b, 1), n, out_f(b, 0));
        } else {
          mul(in_f(b, 0), in_f(b, 1), n, out_f(b, 0));
        }
      };
    } else if (op == "silu" || op == "gelu_tanh") {
      const bool is_silu = op == "silu";
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        const int64_t n = rows_of(out0, s) * cols;
        if (is_silu) {
          silu(in_f(b, 0), n, out_f(b, 0));
        } else {
          gelu_tanh(in_f(b, 0), n, out_f(b, 0));
        }
      };
    } else if (op == "silu_mul") {
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        silu_mul(in_f(b, 0), rows_of(out0, s), cols, out_f(b, 0));
      };
    } else if (op == "split") {
      const std::vector<int64_t> sizes = node.attr_ints("sizes");
      const int64_t width = graph.value(node.inputs[0]).shape[1];
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        // x: [m, width] -> outputs [m, sizes[j]]
        const int64_t m = rows_of(out0, s);
        const float* x = in_f(b, 0);
        // A parallel region costs more than copying a few rows.
        parallel_for(0, m, m * width >= (int64_t{1} << 15), [&](int64_t r) {
          int64_t col = 0;
          for (size_t j = 0; j < sizes.size(); ++j) {
            std::memcpy(out_f(b, j) + r * sizes[j], x + r * width + col, static_cast<size_t>(sizes[j]) * sizeof(float));
            col += sizes[j];
          }
        });
      };
    } else if (op == "rope") {
      const ir::RopeParams params = ir::rope_params(node);
      const int64_t heads = node.attr_int("num_heads"), dim = node.attr_int("head_dim");
      const int64_t rot = node.attr_int("rotary_dim");
      KILN_RETURN_IF_ERROR(ir::rope_params_validate(params, rot).with_context("node '" + node.name + "'"));
      const bool dynamic = params.type == "dynamic";
      std::shared_ptr<RopeTable> table;
      if (!dynamic) {
        // One table for all the nodes with these frequencies (a model's queries and keys).
        std::vector<float> inv_freq = ir::rope_inv_freq(params, rot, 0);
        std::shared_ptr<RopeTable>& shared = rope_tables[inv_freq];
        if (shared == nullptr) shared = std::make_shared<RopeTable>(std::move(inv_freq));
        table = shared;
      }
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        if (!dynamic) {
          rope(in_f(b, 0), s.num_tokens, heads, dim, s.positions, *table, out_f(b, 0));
          return;
        }
        // Dynamic NTK scaling depends on each sequence's length so far.
        for (int64_t q = 0; q < s.num_seqs; ++q) {
          const int64_t begin = s.query_start[q], n = s.query_start[q + 1] - begin;
          const auto inv = ir::rope_inv_freq(params, rot, s.context_len[q] + n);
          rope(in_f(b, 0) + begin * heads * dim, n, heads, dim, rot, s.positions + begin, inv.data(),
               out_f(b, 0) + begin * heads * dim);
        }
      };
    } else if (op == "attention") {
      AttentionShape shape{};
      shape.num_heads = node.attr_int("num_heads");
      shape.num_kv_heads = node.attr_int("num_kv_heads");
      shape.head_dim = node.attr_int("head_dim");
      shape.scale = static_cast<float>(node.attr_float("scale"));
      shape.sliding_window = node.attr_int("sliding_window");
      const int64_t layer = node.attr_int("layer");
      auto slopes = std::make_shared<std::vector<float>>();
      if (node.attr_int("alibi")) *slopes = ir::alibi_slopes(shape.num_heads);
      const int64_t q_stride = shape.num_heads * shape.head_dim, kv_stride = shape.num_kv_heads * shape.head_dim;
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        AttentionShape sh = shape;
        sh.alibi_slopes = slopes->empty() ? nullptr : slopes->data();
        const AttentionBatch batch{s.num_seqs, s.query_start, s.context_len, s.block_tables};
        const auto& spec = s.kv_cache->spec();
        const KvCacheLayer cache{s.kv_cache->k_data(layer), s.kv_cache->v_data(layer), spec.num_blocks,
                                 spec.block_size, spec.dtype};
        attention(in_f(b, 0), q_stride, in_f(b, 1), kv_stride, in_f(b, 2), kv_stride, batch, sh, cache, out_f(b, 0));
      };
    } else if (op == "gather_rows") {
      fn = [=](const CpuBackend::NodeBuffers& b, const runtime::StepView& s) {
        gather_rows(in_f(b, 0), cols, in_i(b, 1), s.num_rows, out_f(b, 0));
      };
    } else {
      return unimplemented("the CPU backend cannot run node '" + node.name + "' (op " + op + ")");
    }
    nodes_.push_back(std::move(fn));
  }
  return Status::ok();
}

}  // namespace kiln::cpu
