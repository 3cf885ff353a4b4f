// Reader for the safetensors format, the weight container of Hugging Face checkpoints.
//
// Layout of a file:
//   [8 bytes]  N, the header length, little-endian uint64
//   [N bytes]  JSON object: {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
//                            "__metadata__": {"<key>": "<string>", ...}}   (metadata optional)
//   [rest]     data section; tensor bytes are [b, e) relative to its start, row-major, little-endian
//
// Every field of the header is validated before any tensor byte is exposed: a TensorView handed
// out by SafetensorsFile always lies inside the buffer, with exactly numel * dtype-size bytes.
//
// Ownership: SafetensorsFile owns the read-only mapping of its file (or, from parse(), borrows a
// caller's buffer, which must outlive it). TensorView::data spans point into that mapping and stay
// valid while the SafetensorsFile lives; moving the SafetensorsFile keeps them valid. Nothing here
// mutates the file or the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"

namespace kiln::formats {

// Element types of safetensors tensors. Kiln computes with kF32/kF16/kBF16; the others are
// recognised only so that errors can name them.
enum class TensorDType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

// The dtype string used in safetensors headers ("F32", "BF16", "F8_E4M3", ...).
std::string_view tensor_dtype_name(TensorDType dtype);
std::optional<TensorDType> tensor_dtype_from_name(std::string_view name);
// Bytes per element (1 for kBool and the fp8 types).
size_t tensor_dtype_size(TensorDType dtype);

struct TensorView {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;      // empty for a scalar
  std::span<const std::byte> data;  // numel * tensor_dtype_size(dtype) bytes, unaligned
};

// Product of the dims (1 for a scalar). Dims were checked against overflow when the header was read.
int64_t tensor_numel(const TensorView& tensor);

// "[4096, 11008]": for error messages.
std::string shape_to_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Maps `path` and validates its header.
  static Expected<SafetensorsFile> open(const std::string& path);

  // Validates `bytes` as a safetensors file without copying; the result borrows `bytes`, which
  // must outlive it. `name` stands for the file in error messages.
  static Expected<SafetensorsFile> parse(std::span<const std::byte> bytes,
                                         const std::string& name = "<buffer>");

  // In file order: sorted by data offset.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  // The "__metadata__" entries (e.g. {"format": "pt"}); non-string values are kept as JSON text.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile file_;  // empty when the bytes are borrowed
  std::string path_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

// Converts a kF32/kF16/kBF16 tensor to float. out: [numel]. Any other dtype, or an out of the
// wrong size, is an error naming the tensor.
Status tensor_to_float(const TensorView& tensor, std::span<float> out);

}  // namespace kiln::formats
