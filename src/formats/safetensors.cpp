#include "formats/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/half.h"

namespace kiln::formats {
namespace {

// A header larger than this is not a real checkpoint (real headers are a few MB at most) and
// would only make us parse garbage.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeInfo {
  TensorDType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {TensorDType::kF32, "F32", 4},
    {TensorDType::kF16, "F16", 2},
    {TensorDType::kBF16, "BF16", 2},
    {TensorDType::kF64, "F64", 8},
    {TensorDType::kI64, "I64", 8},
    {TensorDType::kI32, "I32", 4},
    {TensorDType::kI16, "I16", 2},
    {TensorDType::kI8, "I8", 1},
    {TensorDType::kU8, "U8", 1},
    {TensorDType::kBool, "BOOL", 1},
    {TensorDType::kF8E4M3, "F8_E4M3", 1},
    {TensorDType::kF8E5M2, "F8_E5M2", 1},
}};

const DTypeInfo& dtype_info(TensorDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  KILN_CHECK(false);
  return kDTypes[0];
}

// Reads a JSON value as a uint64, or nullopt when it is not a non-negative integer.
std::optional<uint64_t> as_uint(const nlohmann::ordered_json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

struct Parsed {
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> metadata;
};

// Validates one tensor entry of the header against the data section.
Status parse_entry(const std::string& file, const std::string& name,
                   const nlohmann::ordered_json& entry, std::span<const std::byte> data,
                   TensorView& out) {
  auto fail = [&](const std::string& what) {
    return invalid_argument(file + ": tensor '" + name + "': " + what);
  };
  if (name.empty()) return invalid_argument(file + ": header has a tensor with an empty name");
  if (!entry.is_object()) return fail("header entry is not a JSON object");

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return fail("missing or non-string \"dtype\"");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<TensorDType> dtype = tensor_dtype_from_name(dtype_name);
  if (!dtype) return fail("unknown dtype \"" + dtype_name + "\"");

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) return fail("missing or non-array \"shape\"");
  std::vector<int64_t> shape;
  shape.reserve(shape_it->size());
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& dim : *shape_it) {
    if (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<int64_t>() < 0) {
      return fail("negative dimension " + std::to_string(dim.get<int64_t>()) + " in shape");
    }
    std::optional<uint64_t> d = as_uint(dim);
    if (!d) return fail("shape entry " + dim.dump() + " is not an integer");
    if (*d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail("dimension " + std::to_string(*d) + " is too large");
    }
    shape.push_back(static_cast<int64_t>(*d));
    if (*d != 0 && numel > std::numeric_limits<int64_t>::max() / *d) overflow = true;
    numel *= *d;
  }
  if (overflow) return fail("element count of shape " + shape_to_string(shape) + " overflows");
  const size_t elem = dtype_info(*dtype).size;
  if (numel > std::numeric_limits<uint64_t>::max() / elem) {
    return fail("byte size of shape " + shape_to_string(shape) + " overflows");
  }
  const uint64_t nbytes = numel * elem;

  auto off_it = entry.find("data_offsets");
  if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) {
    return fail("missing \"data_offsets\" or it is not a [begin, end] pair");
  }
  std::optional<uint64_t> begin = as_uint((*off_it)[0]);
  std::optional<uint64_t> end = as_uint((*off_it)[1]);
  if (!begin || !end) return fail("data_offsets " + off_it->dump() + " are not non-negative integers");
  if (*begin > *end) {
    return fail("data_offsets begin " + std::to_string(*begin) + " is after end " +
                std::to_string(*end));
  }
  if (*end > data.size()) {
    return fail("data_offsets end " + std::to_string(*end) + " is beyond the data section (" +
                std::to_string(data.size()) + " bytes); the file is truncated or its header lies");
  }
  if (*end - *begin != nbytes) {
    return fail("shape " + shape_to_string(shape) + " of " + dtype_name + " needs " +
                std::to_string(nbytes) + " bytes but data_offsets span " +
                std::to_string(*end - *begin));
  }
  out.name = name;
  out.dtype = *dtype;
  out.shape = std::move(shape);
  out.data = data.subspan(static_cast<size_t>(*begin), static_cast<size_t>(nbytes));
  return Status::ok();
}

Expected<Parsed> parse_header(std::span<const std::byte> bytes, const std::string& file) {
  if (bytes.size() < 8) {
    return invalid_argument(file + ": file is " + std::to_string(bytes.size()) +
                            " bytes, shorter than the 8-byte safetensors header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint64_t>(bytes[static_cast<size_t>(i)]);
  }
  if (header_len > kMaxHeaderBytes) {
    return invalid_argument(file + ": header length " + std::to_string(header_len) +
                            " exceeds the 100 MB limit; this is not a safetensors file");
  }
  if (header_len > bytes.size() - 8) {
    return invalid_argument(file + ": header length " + std::to_string(header_len) +
                            " runs past the end of the file (" + std::to_string(bytes.size()) +
                            " bytes); the file is truncated or not safetensors");
  }
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(text, text + header_len, nullptr,
                                           /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return invalid_argument(file + ": header is not valid JSON: " + e.what());
  }
  if (header.is_discarded()) return invalid_argument(file + ": header is not valid JSON");
  if (!header.is_object()) return invalid_argument(file + ": header is not a JSON object");

  std::span<const std::byte> data = bytes.subspan(8 + static_cast<size_t>(header_len));
  Parsed parsed;
  parsed.tensors.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return invalid_argument(file + ": \"__metadata__\" is not a JSON object");
      }
      for (const auto& [mkey, mvalue] : value.items()) {
        parsed.metadata[mkey] =
            mvalue.is_string() ? mvalue.get<std::string>() : mvalue.dump();
      }
      continue;
    }
    TensorView view;
    KILN_RETURN_IF_ERROR(parse_entry(file, key, value, data, view));
    parsed.tensors.push_back(std::move(view));
  }

  // File order, and the overlap check: sorted by begin, each non-empty tensor must start at or
  // after the end of the previous non-empty one.
  auto offset = [&](const TensorView& t) { return t.data.data() - data.data(); };
  std::sort(parsed.tensors.begin(), parsed.tensors.end(),
            [&](const TensorView& a, const TensorView& b) {
              if (offset(a) != offset(b)) return offset(a) < offset(b);
              return a.name < b.name;
            });
  const TensorView* prev = nullptr;
  for (const TensorView& t : parsed.tensors) {
    if (t.data.empty()) continue;
    if (prev != nullptr && offset(t) < offset(*prev) + static_cast<ptrdiff_t>(prev->data.size())) {
      return invalid_argument(file + ": tensor '" + t.name + "' overlaps tensor '" + prev->name +
                              "' in the data section");
    }
    prev = &t;
  }
  return parsed;
}

}  // namespace

std::string_view tensor_dtype_name(TensorDType dtype) { return dtype_info(dtype).name; }

std::optional<TensorDType> tensor_dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

size_t tensor_dtype_size(TensorDType dtype) { return dtype_info(dtype).size; }

int64_t tensor_numel(const TensorView& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Expected<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  KILN_ASSIGN_OR_RETURN(SafetensorsFile file, parse(mapped.bytes(), path));
  // The views point into the mapping, whose address does not change when it is moved.
  file.file_ = std::move(mapped);
  return file;
}

Expected<SafetensorsFile> SafetensorsFile::parse(std::span<const std::byte> bytes,
                                                 const std::string& name) {
  KILN_ASSIGN_OR_RETURN(Parsed parsed, parse_header(bytes, name));
  SafetensorsFile file;
  file.path_ = name;
  file.tensors_ = std::move(parsed.tensors);
  file.metadata_ = std::move(parsed.metadata);
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.by_name_.emplace(file.tensors_[i].name, i);
  return file;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Status tensor_to_float(const TensorView& tensor, std::span<float> out) {
  const size_t numel = static_cast<size_t>(tensor_numel(tensor));
  if (out.size() != numel) {
    return invalid_argument("tensor '" + tensor.name + "' has " + std::to_string(numel) +
                            " elements but the destination holds " + std::to_string(out.size()));
  }
  if (tensor.data.size() != numel * tensor_dtype_size(tensor.dtype)) {
    return invalid_argument("tensor '" + tensor.name + "': data holds " +
                            std::to_string(tensor.data.size()) + " bytes, not the " +
                            std::to_string(numel * tensor_dtype_size(tensor.dtype)) +
                            " its shape needs");
  }
  const std::byte* src = tensor.data.data();
  switch (tensor.dtype) {
    case TensorDType::kF32:
      if (numel > 0) std::memcpy(out.data(), src, numel * sizeof(float));
      return Status::ok();
    case TensorDType::kF16:
    case TensorDType::kBF16: {
      const bool is_bf16 = tensor.dtype == TensorDType::kBF16;
      for (size_t i = 0; i < numel; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof(h));
        out[i] = is_bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
      return Status::ok();
    }
    default:
      return invalid_argument("tensor '" + tensor.name + "' has dtype " +
                              std::string(tensor_dtype_name(tensor.dtype)) +
                              "; only F32, F16 and BF16 weights are supported");
  }
}

}  // namespace kiln::formats
