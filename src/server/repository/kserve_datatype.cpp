#include "server/repository/kserve_datatype.h"

#include <array>
#include <utility>

namespace kiln::server {
namespace {

constexpr std::array<std::pair<std::string_view, ir::DType>, 13> kTypes = {{
    {"BOOL", ir::DType::kBool}, {"UINT8", ir::DType::kU8},   {"UINT16", ir::DType::kU16},
    {"UINT32", ir::DType::kU32}, {"UINT64", ir::DType::kU64}, {"INT8", ir::DType::kI8},
    {"INT16", ir::DType::kI16},  {"INT32", ir::DType::kI32},  {"INT64", ir::DType::kI64},
    {"FP16", ir::DType::kF16},   {"FP32", ir::DType::kF32},   {"FP64", ir::DType::kF64},
    {"BF16", ir::DType::kBF16},
}};

}  // namespace

std::optional<ir::DType> dtype_from_kserve(std::string_view datatype) {
  for (const auto& [name, dtype] : kTypes) {
    if (name == datatype) return dtype;
  }
  return std::nullopt;
}

std::string kserve_datatype(ir::DType dtype) {
  for (const auto& [name, d] : kTypes) {
    if (d == dtype) return std::string(name);
  }
  return "INVALID";
}

std::optional<ir::DType> dtype_from_config_type(std::string_view type) {
  if (!type.starts_with("TYPE_")) return std::nullopt;
  return dtype_from_kserve(type.substr(5));
}

std::string config_type(ir::DType dtype) { return "TYPE_" + kserve_datatype(dtype); }

}  // namespace kiln::server
