// MappedFile: a whole file mapped read-only into memory. The mapping is owned by the object
// (move-only) and released on destruction; spans handed out stay valid while it lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"

namespace kiln {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. An empty file maps to an empty span.
  static Expected<MappedFile> open(const std::string& path);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// `bytes` (> 0) of zeroed, writable memory at a 2 MiB-aligned address with huge pages requested,
// as MappedFile maps engines; the kernel supplies pages as they are first touched. nullptr when
// the memory cannot be mapped. Release it with munmap(p, bytes).
void* map_zeroed_huge(size_t bytes);

// How many bytes of the mappings that hold `range` the kernel maps with huge (2 MiB) pages, from
// /proc/self/smaps; nullopt where that is unknown. Only pages touched so far count.
std::optional<uint64_t> huge_page_bytes(std::span<const std::byte> range);

// Reads a whole (small) file into a string.
Expected<std::string> read_text_file(const std::string& path);

}  // namespace kiln
