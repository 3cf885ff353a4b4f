// Writer for safetensors files (layout described in safetensors.h).
//
// The header comes first in the file, so every tensor is declared up front; the data is then
// streamed in declaration order, in chunks of any size, so a writer never holds a whole model in
// memory. Used by the random-checkpoint generator and by tests that build (and then corrupt)
// files.
//
// Ownership: a SafetensorsWriter owns its open file. A writer destroyed before finish() succeeded
// closes and deletes the partial file, so a failed write never leaves a file that looks complete.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"

namespace kiln::formats {

struct TensorSpec {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
};

// numel * element size of a spec with non-negative dims.
uint64_t tensor_spec_bytes(const TensorSpec& spec);

// The first bytes of a file that stores `tensors` back to back in the given order: the 8-byte
// little-endian length, then the JSON header padded with spaces so that the data section starts
// at a multiple of 8. Specs must have unique non-empty names and non-negative dims.
std::string safetensors_header(const std::vector<TensorSpec>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// float -> little-endian bytes of `dtype` (kF32, kF16 or kBF16, rounding to nearest even).
// out: [src.size() * tensor_dtype_size(dtype)] bytes.
void floats_to_tensor_bytes(std::span<const float> src, TensorDType dtype, std::byte* out);
std::vector<std::byte> floats_to_tensor_bytes(std::span<const float> src, TensorDType dtype);

class SafetensorsWriter {
 public:
  ~SafetensorsWriter();
  SafetensorsWriter(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Creates (truncates) `path` and writes the header. Errors: invalid specs (empty or duplicate
  // names, negative dims, a name "__metadata__"), or a file that cannot be created.
  static Expected<SafetensorsWriter> create(const std::string& path, std::vector<TensorSpec> tensors,
                                            const std::map<std::string, std::string>& metadata = {});

  // Appends the next bytes of the data section (tensors in declaration order, each row-major,
  // little-endian). Writing past the declared total is an error.
  Status append(std::span<const std::byte> bytes);

  // Checks that the declared data was written in full, then flushes and closes the file.
  Status finish();

  uint64_t data_bytes_total() const { return total_; }
  uint64_t data_bytes_written() const { return written_; }

 private:
  SafetensorsWriter() = default;
  void abandon();

  std::FILE* file_ = nullptr;
  std::string path_;
  uint64_t total_ = 0;
  uint64_t written_ = 0;
};

// A tensor held in memory, for write_safetensors().
struct TensorBytes {
  TensorSpec spec;
  std::span<const std::byte> data;  // exactly tensor_spec_bytes(spec) bytes
};

// Writes a whole file from in-memory tensors.
Status write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::formats
