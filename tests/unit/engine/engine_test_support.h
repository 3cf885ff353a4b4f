// Helpers shared by the engine tests: a scratch directory, whole-file byte I/O, and a forger that
// assembles an engine file from raw parts (with valid checksums) so the reader can be tested on
// layouts the writer would never produce.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_file.h"

namespace kiln::engine::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln_engine_XXXXXX").string();
    KILN_CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  KILN_CHECK(out.good());
}

inline void store_u64(std::vector<std::byte>& bytes, size_t offset, uint64_t value) {
  for (size_t i = 0; i < 8; ++i) bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

// Recomputes the content checksum and then the header checksum of a whole engine image, so a
// test can change one thing and see the reader's check for exactly that thing.
inline void reseal(std::vector<std::byte>& bytes) {
  std::span<const std::byte> all(bytes);
  store_u64(bytes, kChecksumOffset, engine_content_checksum(all.subspan(kHeaderSize)));
  store_u64(bytes, kHeaderChecksumOffset, engine_header_checksum(all));
}

// An engine image with `metadata_text` as its metadata and `data_size` bytes of data (value 0x5a),
// laid out as the writer would; `tweak` may change the header before it is encoded.
inline std::vector<std::byte> forge_engine(const std::string& metadata_text, uint64_t data_size,
                                           const std::function<void(EngineHeader&)>& tweak = {}) {
  EngineHeader header;
  header.kiln_version = KILN_VERSION;
  header.target = "cpu-avx2";
  header.build_options = "dtype=f32";
  header.metadata_offset = kHeaderSize;
  header.metadata_size = metadata_text.size();
  header.data_offset = (kHeaderSize + metadata_text.size() + kDataAlignment - 1) / kDataAlignment *
                       kDataAlignment;
  header.data_size = data_size;
  header.file_size = header.data_offset + data_size;
  std::vector<std::byte> bytes(header.file_size, std::byte{0});
  for (size_t i = 0; i < metadata_text.size(); ++i) {
    bytes[kHeaderSize + i] = static_cast<std::byte>(metadata_text[i]);
  }
  for (uint64_t i = header.data_offset; i < header.file_size; ++i) bytes[i] = std::byte{0x5a};
  std::span<const std::byte> all(bytes);
  header.checksum = engine_content_checksum(all.subspan(kHeaderSize));
  if (tweak) tweak(header);
  KILN_CHECK(encode_engine_header(header, std::span<std::byte>(bytes).first(kHeaderSize)).is_ok());
  return bytes;
}

// Expects `status` to fail with `code` and a one-line message containing every part of `parts`.
inline void expect_error(const Status& status, StatusCode code,
                         std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), code) << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "message \"" << status.message() << "\" lacks \"" << part << "\"";
  }
}

}  // namespace kiln::engine::testing
