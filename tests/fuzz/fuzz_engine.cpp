// libFuzzer target for the engine reader (EngineFile::parse over borrowed bytes; no files).
//
// Each input is parsed twice: as given, which exercises the magic, version, size and checksum
// checks; then with both checksums recomputed, so mutations reach the section layout, metadata
// JSON and blob table checks that a checksum mismatch would otherwise hide. Whatever parses is
// then read end to end, so a span that escapes the input shows up under AddressSanitizer.
// Seed: tests/fuzz/corpus/engine/ (a small engine written by EngineWriter).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "engine/engine_file.h"

namespace {

using kiln::engine::EngineFile;

void store_u64(std::byte* bytes, uint64_t value) {
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

// Reads every blob byte and the metadata, checking what the reader promises about them.
void read_everything(const EngineFile& engine) {
  uint64_t sum = 0;
  for (const std::string& name : engine.blob_names()) {
    KILN_CHECK(engine.has_blob(name));
    std::span<const std::byte> blob = engine.blob(name);
    KILN_CHECK(reinterpret_cast<uintptr_t>(blob.data()) % kiln::engine::kBlobAlignment == 0);
    for (std::byte b : blob) sum += static_cast<uint8_t>(b);
  }
  KILN_CHECK(engine.metadata().is_object());
  sum += engine.metadata().dump().size();
  sum += engine.header().target.size() + engine.header().build_options.size();
  // Keep the reads from being optimised away.
  volatile uint64_t sink = sum;
  (void)sink;
}

void parse_and_read(std::span<const std::byte> bytes) {
  kiln::Expected<EngineFile> engine = EngineFile::parse(bytes, {}, "fuzz input");
  if (engine.has_value()) {
    read_everything(*engine);
  } else {
    KILN_CHECK(!engine.status().message().empty());
    KILN_CHECK(engine.status().message().find('\n') == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader wants 64-byte aligned bytes, as an mmap gives; posix_memalign allocates exactly
  // `size` bytes so AddressSanitizer sees any read past the end.
  void* memory = nullptr;
  if (posix_memalign(&memory, kiln::engine::kBlobAlignment, size == 0 ? 1 : size) != 0) return 0;
  auto* buffer = static_cast<std::byte*>(memory);
  if (size > 0) std::memcpy(buffer, data, size);
  const std::span<const std::byte> bytes(buffer, size);

  parse_and_read(bytes);

  if (size >= kiln::engine::kHeaderSize) {
    store_u64(buffer + kiln::engine::kChecksumOffset,
              kiln::engine::engine_content_checksum(bytes.subspan(kiln::engine::kHeaderSize)));
    store_u64(buffer + kiln::engine::kHeaderChecksumOffset,
              kiln::engine::engine_header_checksum(bytes));
    parse_and_read(bytes);
  }
  std::free(memory);
  return 0;
}
