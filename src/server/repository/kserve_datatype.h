// The tensor element types of the KServe v2 protocol ("FP32", "INT64", ...) and of Triton's model
// configuration ("TYPE_FP32", ...), mapped to the IR's. BYTES (TYPE_STRING) has no IR type: it
// maps to nothing, and callers refuse it by name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::server {

std::optional<ir::DType> dtype_from_kserve(std::string_view datatype);  // "FP32" -> kF32
std::string kserve_datatype(ir::DType dtype);                           // kF32 -> "FP32"
std::optional<ir::DType> dtype_from_config_type(std::string_view type);  // "TYPE_FP32" -> kF32
std::string config_type(ir::DType dtype);                                // kF32 -> "TYPE_FP32"

}  // namespace kiln::server
