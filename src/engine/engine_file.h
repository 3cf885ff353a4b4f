// EngineFile: a built Kiln engine loaded for serving, plus the on-disk format it reads.
//
// One engine is one file, designed to be mmap'd read-only so several server processes share one
// copy of the weights in the page cache. All integers are little-endian.
//
//   [0, 4096)          header, a fixed binary struct (byte offsets):
//                        0  magic            char[8]   "KILNENG\0"
//                        8  format_version   u32       kFormatVersion
//                       12  header_size      u32       kHeaderSize
//                       16  kiln_version     char[32]  NUL-terminated, the KILN_VERSION that wrote it
//                       48  target           char[32]  NUL-terminated, e.g. "cpu-avx2"
//                       80  build_options    char[256] NUL-terminated, e.g. "dtype=int4 group=32"
//                      336  metadata_offset  u64       always header_size
//                      344  metadata_size    u64
//                      352  data_offset      u64       64-byte aligned (the writer page-aligns it)
//                      360  data_size        u64       data_offset + data_size == file_size
//                      368  file_size        u64
//                      376  checksum         u64       XXH3-64 of bytes [header_size, file_size)
//                      384  header_checksum  u64       XXH3-64 of header bytes [0, 384)
//                      392  zero padding up to header_size
//   [metadata]         UTF-8 JSON object chosen by the builder (model config, graph, kernel choices,
//                      ...) plus a "blobs" table added by EngineWriter:
//                        "blobs": {"name": {"offset": o, "size": s}, ...}
//                      with offsets relative to data_offset. Zero bytes pad it up to data_offset.
//   [data]             the blobs (weights, copied files such as tokenizer.json), each starting on a
//                      64-byte boundary, zero bytes in between. Blobs never overlap.
//
// The format version changes whenever a reader of the old version could misread a new file; the
// magic and format_version fields keep their place in every version so any reader can say which
// version a file has.
//
// Ownership: an EngineFile owns its read-only mapping (or borrows caller bytes, see parse()). Every
// span it hands out points into that memory and stays valid while the EngineFile lives, including
// after it is moved. Nothing is copied at load: blobs are views of the mapping.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/status.h"

namespace kiln::engine {

inline constexpr std::array<char, 8> kMagic = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '\0'};
// 2: general graphs carry fused epilogues ("kiln." node attributes) and MatMul a fused bias.
// 3: a general graph's constant MatMul weights are packed (ir/packed_weight.h, kiln.b_packed).
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr uint32_t kHeaderSize = 4096;
// Field capacities in the header, each including the terminating NUL.
inline constexpr size_t kKilnVersionCapacity = 32;
inline constexpr size_t kTargetCapacity = 32;
inline constexpr size_t kBuildOptionsCapacity = 256;
// Byte offsets of the fields that tools (and the fuzzer) patch directly.
inline constexpr size_t kFormatVersionOffset = 8;
inline constexpr size_t kChecksumOffset = 376;
inline constexpr size_t kHeaderChecksumOffset = 384;
// Every blob starts on this boundary, relative to the start of the file (and so in memory,
// because the mapping is page-aligned).
inline constexpr uint64_t kBlobAlignment = 64;
// The writer starts the data section on a page so the runtime can advise or map it by pages.
inline constexpr uint64_t kDataAlignment = 4096;
// The key of the blob table inside the metadata JSON.
inline constexpr std::string_view kBlobsKey = "blobs";

// The decoded header. Strings hold the field up to its NUL.
struct EngineHeader {
  uint32_t format_version = kFormatVersion;
  uint32_t header_size = kHeaderSize;
  std::string kiln_version;
  std::string target;
  std::string build_options;
  uint64_t metadata_offset = 0;
  uint64_t metadata_size = 0;
  uint64_t data_offset = 0;
  uint64_t data_size = 0;
  uint64_t file_size = 0;
  uint64_t checksum = 0;
  uint64_t header_checksum = 0;  // filled in by encode_engine_header()
};

// Serialises `header` into `out` (exactly kHeaderSize bytes), computing header_checksum.
// Strings must fit their field including the NUL; anything else is an invalid_argument.
Status encode_engine_header(const EngineHeader& header, std::span<std::byte> out);

// XXH3-64 of header bytes [0, kHeaderChecksumOffset). `header` holds at least that many bytes.
uint64_t engine_header_checksum(std::span<const std::byte> header);

// XXH3-64 of `bytes`, the hash used for the content checksum.
uint64_t engine_content_checksum(std::span<const std::byte> bytes);

class EngineFile {
 public:
  struct Options {
    // Hash the whole file at load. Off only where the caller verified it already (it reads every
    // byte, a few seconds for a large model on a cold page cache).
    bool verify_checksum = true;
  };

  // Maps and validates the engine at `path`. Every failure is one line naming the problem and
  // the fix (not an engine, other format version, truncated, corrupted, ...).
  static Expected<EngineFile> open(const std::string& path, Options options);
  static Expected<EngineFile> open(const std::string& path) { return open(path, Options{}); }

  // Validates an already mapped file and takes ownership of the mapping.
  static Expected<EngineFile> parse(MappedFile file, Options options);

  // Validates bytes the caller owns and keeps borrowing them: they must outlive the EngineFile
  // and start on a kBlobAlignment boundary (checked). `name` stands for the file in messages.
  static Expected<EngineFile> parse(std::span<const std::byte> bytes, Options options,
                                    std::string name = "engine");

  const EngineHeader& header() const { return header_; }
  // The metadata JSON as stored, including the "blobs" table.
  const nlohmann::json& metadata() const { return metadata_; }
  // The bytes of blob `name`, 64-byte aligned; an empty span if there is no such blob.
  std::span<const std::byte> blob(std::string_view name) const;
  bool has_blob(std::string_view name) const;
  // All blob names, sorted.
  std::vector<std::string> blob_names() const;
  uint64_t file_size() const { return header_.file_size; }
  // The whole file.
  std::span<const std::byte> bytes() const { return bytes_; }
  // The path given to open(), or the name given to parse().
  const std::string& name() const { return name_; }

 private:
  EngineFile() = default;
  Status validate(const Options& options);

  MappedFile mapping_;               // empty when the bytes are borrowed
  std::span<const std::byte> bytes_;  // the whole file
  std::string name_;
  EngineHeader header_;
  nlohmann::json metadata_;
  std::map<std::string, std::span<const std::byte>, std::less<>> blobs_;
};

}  // namespace kiln::engine
