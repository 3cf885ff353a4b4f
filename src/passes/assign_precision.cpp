// Precision assignment: every 2-D weight (linear layers, embedding tables, lm_head) is stored in
// the format the user asked for; 1-D weights (norm scales, biases) stay f32. A weight whose
// width does not divide into the format's groups falls back to the nearest format that fits
// (int4, int8 per group or fp8 -> int8 per channel), with a note to the user.
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The weight as `format` would store it, read back into f32.
ir::WeightLoader round_trip(ir::WeightLoader load, ir::WeightFormat format, int64_t rows, int64_t cols) {
  return [load = std::move(load), format, rows, cols]() -> Expected<std::vector<float>> {
    KILN_ASSIGN_OR_RETURN(std::vector<float> w, load());
    // The whole weight at once: f8 scales per tensor.
    const size_t row_bytes = ir::weight_format_row_bytes(format, cols);
    std::vector<std::byte> stored(row_bytes * static_cast<size_t>(rows));
    ir::weight_quantize(format, w.data(), rows, cols, stored.data());
    for (int64_t r = 0; r < rows; ++r) {
      ir::weight_dequantize_row(format, stored.data() + static_cast<size_t>(r) * row_bytes, cols, w.data() + r * cols);
    }
    return w;
  };
}

}  // namespace

Status run_assign_precision(ir::Graph& graph, const PassContext& ctx) {
  const ir::WeightFormat wanted = ctx.options.matmul_format;
  if (graph.has_tensor_ops()) {
    // General graphs: every f32 weight of 16 or more elements is stored in the 16-bit float
    // format asked for (kernels widen it back to f32 at load); scalars and small vectors such
    // as shapes-as-floats stay exact. Other formats are refused by the caller.
    for (auto& [name, w] : graph.weights()) {
      const bool halve = wanted == ir::WeightFormat::kF16 || wanted == ir::WeightFormat::kBF16;
      w.format = w.dtype == ir::DType::kF32 && halve && w.numel() >= 16 ? wanted : ir::WeightFormat::kF32;
    }
    return Status::ok();
  }
  for (auto& [name, w] : graph.weights()) {
    if (w.shape.size() != 2) {
      w.format = ir::WeightFormat::kF32;
      continue;
    }
    ir::WeightFormat format = wanted;
    if (!ir::weight_format_fits(format, w.cols())) {
      format = ir::WeightFormat::kI8Channel;
      const int64_t multiple = wanted == ir::WeightFormat::kF8E4M3 ? 16 : ir::weight_format_group(wanted);
      ctx.note("weight '" + name + "' has " + std::to_string(w.cols()) + " columns, not a multiple of the " +
               std::string(ir::weight_format_name(wanted)) + " format's " + std::to_string(multiple) +
               "; stored as i8c");
    }
    if (ctx.options.simulate_quantization && format != ir::WeightFormat::kF32) {
      w.load = round_trip(std::move(w.load), format, w.rows(), w.cols());
      format = ir::WeightFormat::kF32;
    }
    w.format = format;
  }
  return Status::ok();
}

}  // namespace kiln::passes
