#include "ir/graph.h"

#include "ir/ops.h"

#include <algorithm>
#include <set>

namespace kiln::ir {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "f32", 4},  {DType::kI32, "i32", 4},  {DType::kF16, "f16", 2},   {DType::kBF16, "bf16", 2},
    {DType::kF64, "f64", 8},  {DType::kI8, "i8", 1},    {DType::kU8, "u8", 1},     {DType::kI16, "i16", 2},
    {DType::kU16, "u16", 2},  {DType::kI64, "i64", 8},  {DType::kU32, "u32", 4},   {DType::kU64, "u64", 8},
    {DType::kBool, "bool", 1},
};

}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF64;
}

uint64_t WeightEntry::stored_bytes() const {
  if (dtype != DType::kF32) return static_cast<uint64_t>(numel()) * dtype_size(dtype);
  return static_cast<uint64_t>(rows()) * weight_format_row_bytes(format, cols());
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (const auto* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  return fallback;
}

double Node::attr_float(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return fallback;
}

std::string Node::attr_str(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  return fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return {};
}

std::vector<double> Node::attr_floats(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (const auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  return {};
}

ValueId Graph::add_value(std::string name, DType dtype, std::vector<int64_t> shape) {
  Value v;
  v.id = static_cast<ValueId>(values_.size());
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::move(shape);
  values_.push_back(std::move(v));
  return values_.back().id;
}

ValueId Graph::add_weight(std::string name, WeightEntry entry) {
  ValueId existing = find_value(name);
  if (existing != kNoValue && values_[static_cast<size_t>(existing)].is_weight) return existing;
  ValueId id = add_value(name, entry.dtype, entry.shape);
  values_[static_cast<size_t>(id)].is_weight = true;
  weights_[name] = std::move(entry);
  return id;
}

std::vector<ValueId> Graph::add_node(std::string op, std::string name, std::vector<ValueId> inputs,
                                     std::map<std::string, Attr> attrs, size_t num_outputs) {
  Node node;
  node.op = std::move(op);
  node.name = std::move(name);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < num_outputs; ++i) {
    std::string out_name = num_outputs == 1 ? node.name : node.name + "." + std::to_string(i);
    node.outputs.push_back(add_value(out_name, DType::kF32, {}));
  }
  // Output shapes come from the op's shape rule; a failure leaves them empty for verify() to report.
  if (auto shapes = infer_shapes(*this, node); shapes && shapes->size() == num_outputs) {
    for (size_t i = 0; i < num_outputs; ++i) value(node.outputs[i]).shape = (*shapes)[i];
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

int64_t Graph::dim_symbol(const std::string& name) {
  for (size_t i = 0; i < dim_names_.size(); ++i) {
    if (dim_names_[i] == name) return kFirstNamedDim - static_cast<int64_t>(i);
  }
  dim_names_.push_back(name);
  return kFirstNamedDim - static_cast<int64_t>(dim_names_.size() - 1);
}

std::string Graph::dim_str(int64_t d) const {
  if (d >= 0) return std::to_string(d);
  if (d == kTokens) return "T";
  if (d == kRows) return "R";
  const int64_t index = kFirstNamedDim - d;
  if (d <= kFirstNamedDim && index < static_cast<int64_t>(dim_names_.size())) {
    return dim_names_[static_cast<size_t>(index)];
  }
  return "?";
}

std::string Graph::shape_str(const Value& v) const {
  if (!v.shape_known) return "[*]";
  std::string out = "[";
  for (size_t i = 0; i < v.shape.size(); ++i) out += (i ? "," : "") + dim_str(v.shape[i]);
  return out + "]";
}

bool Graph::has_tensor_ops() const {
  for (const auto& n : nodes_) {
    const OpInfo* info = op_info(n.op);
    if (info != nullptr && info->family == OpFamily::kTensor) return true;
  }
  return false;
}

ValueId Graph::find_value(const std::string& name) const {
  for (const auto& v : values_) {
    if (v.name == name) return v.id;
  }
  return kNoValue;
}

std::vector<size_t> Graph::consumers(ValueId id) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (std::find(nodes_[i].inputs.begin(), nodes_[i].inputs.end(), id) != nodes_[i].inputs.end()) {
      out.push_back(i);
    }
  }
  return out;
}

int64_t Graph::producer(ValueId id) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto& outs = nodes_[i].outputs;
    if (std::find(outs.begin(), outs.end(), id) != outs.end()) return static_cast<int64_t>(i);
  }
  return -1;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (auto& n : nodes_) {
    for (auto& in : n.inputs) {
      if (in == from) in = to;
    }
  }
  for (auto& out : outputs_) {
    if (out == from) out = to;
  }
}

void Graph::prune_weights() {
  std::set<std::string> used;
  for (const auto& n : nodes_) {
    for (ValueId in : n.inputs) {
      if (in >= 0 && value(in).is_weight) used.insert(value(in).name);
    }
  }
  for (auto it = weights_.begin(); it != weights_.end();) {
    it = used.count(it->first) ? std::next(it) : weights_.erase(it);
  }
  for (auto& v : values_) {
    if (v.is_weight && !used.count(v.name)) {
      v.is_weight = false;  // an orphan value: kept for stable ids, never read
      v.name = "<pruned:" + v.name + ">";
    }
  }
}

}  // namespace kiln::ir
