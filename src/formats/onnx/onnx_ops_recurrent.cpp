// ONNX's recurrent ops, LSTM, GRU and RNN (opset 7 to 14 forms: `layout` arrived in 14 and
// defaults to 0). The translators check the attributes and write them out complete: `direction`,
// `hidden_size`, `layout`, `activations` (one list of names for every direction, the op's
// defaults filled in), `activation_alpha` / `activation_beta` (as given: the kernel hands them
// out in order to the activations that take parameters), `clip` (0 for none), and LSTM's `input_forget`, GRU's `linear_before_reset`.
// The outputs take X's dtype.
#include <set>
#include <sstream>

#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Status recurrent(const OnnxNode& node, OnnxEmitter& out) {
  const std::string& op = node.op_type;
  const size_t gate_fns = op == "LSTM" ? 3 : op == "GRU" ? 2 : 1;
  const std::vector<std::string> defaults = op == "LSTM"  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                            : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Tanh"};
  if (node.input(0) == ir::kNoValue || node.input(1) == ir::kNoValue || node.input(2) == ir::kNoValue) {
    return node.error("X, W and R are required");
  }
  KILN_ASSIGN_OR_RETURN(std::string direction, node.string_in("direction", "forward", {"forward", "reverse", "bidirectional"}));
  const size_t dirs = direction == "bidirectional" ? 2 : 1;
  if (!node.has("hidden_size")) return node.error("hidden_size is required");
  KILN_ASSIGN_OR_RETURN(int64_t hidden, node.int_in("hidden_size", 0, 1, int64_t{1} << 24));
  KILN_ASSIGN_OR_RETURN(int64_t layout, node.int_in("layout", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(double clip, node.float_in("clip", 0.0));
  if (node.has("clip") && !(clip > 0.0)) return node.error("clip must be positive");
  std::vector<std::string> activations = defaults;
  if (node.has("activations")) {
    auto it = node.attrs.find("activations");
    if (!std::holds_alternative<std::string>(it->second)) return node.error("activations must be a list of names");
    activations = split_commas(std::get<std::string>(it->second));
    if (activations.size() != gate_fns * dirs) {
      return node.error("activations lists " + std::to_string(activations.size()) + " functions; " + op + " with direction " +
                        direction + " takes " + std::to_string(gate_fns * dirs));
    }
  } else if (dirs == 2) {
    activations.insert(activations.end(), defaults.begin(), defaults.end());
  }
  static const std::set<std::string> known = {"Sigmoid",  "Tanh",        "Relu",      "Affine",   "LeakyRelu", "ThresholdedRelu",
                                              "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"};
  std::string joined;
  for (const std::string& a : activations) {
    if (known.count(a) == 0) return node.error("activation '" + a + "' is not one ONNX defines for recurrent ops");
    joined += (joined.empty() ? "" : ",") + a;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<double> alpha, node.floats_in("activation_alpha"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> beta, node.floats_in("activation_beta"));
  std::map<std::string, ir::Attr> attrs = {{"direction", direction}, {"hidden_size", hidden}, {"layout", layout},
                                           {"activations", joined},  {"activation_alpha", alpha},
                                           {"activation_beta", beta}, {"clip", clip}};
  if (op == "LSTM") {
    KILN_ASSIGN_OR_RETURN(int64_t input_forget, node.int_in("input_forget", 0, 0, 1));
    attrs["input_forget"] = input_forget;
  }
  if (op == "GRU") {
    KILN_ASSIGN_OR_RETURN(int64_t lbr, node.int_in("linear_before_reset", 0, 0, 1));
    attrs["linear_before_reset"] = lbr;
  }
  ir::Graph& g = out.graph();
  const ir::DType dtype = g.value(node.input(0)).dtype;
  if (!ir::dtype_is_float(dtype)) return node.error("X must be a float tensor");
  for (ir::ValueId o : node.outputs) g.value(o).dtype = dtype;
  out.add(op, node.name, node.inputs, node.outputs, std::move(attrs));
  return Status::ok();
}

}  // namespace

void register_onnx_recurrent_ops(OnnxTranslatorTable& table) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) table[op] = recurrent;
}

}  // namespace kiln::formats
