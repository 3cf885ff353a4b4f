#include "engine/engine_file.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace kiln::engine {
namespace {

// Header field offsets not exported in engine_file.h (see the layout table there).
constexpr size_t kHeaderSizeOffset = 12;
constexpr size_t kKilnVersionOffset = 16;
constexpr size_t kTargetOffset = 48;
constexpr size_t kBuildOptionsOffset = 80;
constexpr size_t kMetadataOffsetOffset = 336;
constexpr size_t kMetadataSizeOffset = 344;
constexpr size_t kDataOffsetOffset = 352;
constexpr size_t kDataSizeOffset = 360;
constexpr size_t kFileSizeOffset = 368;
constexpr size_t kHeaderEnd = 392;  // first padding byte
static_assert(kBuildOptionsOffset + kBuildOptionsCapacity == kMetadataOffsetOffset);
static_assert(kHeaderChecksumOffset + 8 == kHeaderEnd && kHeaderEnd <= kHeaderSize);

uint64_t load_le(std::span<const std::byte> bytes, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= static_cast<uint64_t>(bytes[offset + i]) << (8 * i);
  }
  return value;
}
uint32_t load_u32(std::span<const std::byte> bytes, size_t offset) {
  return static_cast<uint32_t>(load_le(bytes, offset, 4));
}
uint64_t load_u64(std::span<const std::byte> bytes, size_t offset) {
  return load_le(bytes, offset, 8);
}

void store_le(std::span<std::byte> bytes, size_t offset, uint64_t value, size_t width) {
  for (size_t i = 0; i < width; ++i) {
    bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
  }
}

// Writes `text` and its NUL into a field of `capacity` bytes, or fails if it does not fit.
Status store_string(std::span<std::byte> bytes, size_t offset, size_t capacity,
                    const std::string& text, const char* field) {
  if (text.size() + 1 > capacity || text.find('\0') != std::string::npos) {
    return invalid_argument(std::string("engine header field ") + field + " \"" + text +
                            "\" must be at most " + std::to_string(capacity - 1) +
                            " bytes without NUL characters");
  }
  std::memcpy(bytes.data() + offset, text.data(), text.size());
  return Status::ok();
}

// Reads a NUL-terminated string field; false if the field has no NUL.
bool load_string(std::span<const std::byte> bytes, size_t offset, size_t capacity,
                 std::string* out) {
  const char* begin = reinterpret_cast<const char*>(bytes.data() + offset);
  const char* nul = static_cast<const char*>(std::memchr(begin, '\0', capacity));
  if (nul == nullptr) return false;
  out->assign(begin, nul);
  return true;
}

std::string how_to_build(const std::string& name) {
  return "build one with `kiln build MODEL_DIR -o " + name + "`";
}

Status not_an_engine(const std::string& name, const std::string& why) {
  return invalid_argument(name + " is not a Kiln engine file (" + why + "); " + how_to_build(name));
}

Status truncated(const std::string& name, const std::string& what) {
  return invalid_argument(name + " is truncated: " + what +
                          "; the copy is incomplete — copy it again or rebuild it with `kiln build`");
}

Status corrupted(const std::string& name, const std::string& what) {
  return invalid_argument(name + " is corrupted: " + what +
                          "; rebuild it with `kiln build` or copy it again");
}

// A blob name from the file, quoted and escaped so a message stays one printable line.
std::string quoted(const std::string& blob_name) {
  constexpr size_t kMaxShown = 80;
  std::string text = nlohmann::json(blob_name).dump(-1, ' ', /*ensure_ascii=*/true);
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...\"";
  return text;
}

}  // namespace

uint64_t engine_header_checksum(std::span<const std::byte> header) {
  KILN_CHECK(header.size() >= kHeaderChecksumOffset);
  return XXH3_64bits(header.data(), kHeaderChecksumOffset);
}

uint64_t engine_content_checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

Status encode_engine_header(const EngineHeader& header, std::span<std::byte> out) {
  KILN_CHECK(out.size() == kHeaderSize);
  std::fill(out.begin(), out.end(), std::byte{0});
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  store_le(out, kFormatVersionOffset, header.format_version, 4);
  store_le(out, kHeaderSizeOffset, header.header_size, 4);
  KILN_RETURN_IF_ERROR(
      store_string(out, kKilnVersionOffset, kKilnVersionCapacity, header.kiln_version, "kiln_version"));
  KILN_RETURN_IF_ERROR(store_string(out, kTargetOffset, kTargetCapacity, header.target, "target"));
  KILN_RETURN_IF_ERROR(store_string(out, kBuildOptionsOffset, kBuildOptionsCapacity,
                                    header.build_options, "build_options"));
  store_le(out, kMetadataOffsetOffset, header.metadata_offset, 8);
  store_le(out, kMetadataSizeOffset, header.metadata_size, 8);
  store_le(out, kDataOffsetOffset, header.data_offset, 8);
  store_le(out, kDataSizeOffset, header.data_size, 8);
  store_le(out, kFileSizeOffset, header.file_size, 8);
  store_le(out, kChecksumOffset, header.checksum, 8);
  store_le(out, kHeaderChecksumOffset, engine_header_checksum(out), 8);
  return Status::ok();
}

Expected<EngineFile> EngineFile::open(const std::string& path, Options options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalid_argument(path + " is a directory, not a Kiln engine file; pass the file that `kiln build MODEL_DIR -o FILE` wrote");
  }
  Expected<MappedFile> file = MappedFile::open(path);
  if (!file.has_value()) {
    Status status = file.status();
    if (status.code() == StatusCode::kNotFound) {
      return not_found(status.message() + "; " + how_to_build(path));
    }
    return status.with_context("opening engine");
  }
  return parse(std::move(file).value(), options);
}

Expected<EngineFile> EngineFile::parse(MappedFile file, Options options) {
  EngineFile engine;
  engine.name_ = file.path().empty() ? "engine" : file.path();
  engine.mapping_ = std::move(file);
  engine.bytes_ = engine.mapping_.bytes();
  KILN_RETURN_IF_ERROR(engine.validate(options));
  return engine;
}

Expected<EngineFile> EngineFile::parse(std::span<const std::byte> bytes, Options options,
                                       std::string name) {
  if (!bytes.empty() && reinterpret_cast<uintptr_t>(bytes.data()) % kBlobAlignment != 0) {
    return invalid_argument("the bytes of " + name + " start at an address that is not " +
                            std::to_string(kBlobAlignment) +
                            "-byte aligned; load the engine into an aligned buffer or mmap it");
  }
  EngineFile engine;
  engine.name_ = std::move(name);
  engine.bytes_ = bytes;
  KILN_RETURN_IF_ERROR(engine.validate(options));
  return engine;
}

Status EngineFile::validate(const Options& options) {
  const std::string& name = name_;
  const std::span<const std::byte> bytes = bytes_;
  const uint64_t actual_size = bytes.size();

  // 1. Identity: magic, then the format version, both readable in every format version.
  if (actual_size == 0) return not_an_engine(name, "it is empty");
  if (actual_size < kMagic.size() || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return not_an_engine(name, "bad magic");
  }
  if (actual_size < kFormatVersionOffset + 4) {
    return truncated(name, "it has only " + std::to_string(actual_size) + " of the " +
                               std::to_string(kHeaderSize) + " header bytes");
  }
  const uint32_t version = load_u32(bytes, kFormatVersionOffset);
  if (version != kFormatVersion) {
    return invalid_argument(name + " was written in engine format " + std::to_string(version) +
                            "; this kiln " KILN_VERSION " reads format " +
                            std::to_string(kFormatVersion) +
                            " — rebuild it with this kiln's `kiln build`");
  }
  if (actual_size < kHeaderSize) {
    return truncated(name, "it has only " + std::to_string(actual_size) + " of the " +
                               std::to_string(kHeaderSize) + " header bytes");
  }

  // 2. The header: checksum first, so every later message about it describes a real file.
  const std::span<const std::byte> raw = bytes.first(kHeaderSize);
  EngineHeader& h = header_;
  h.header_checksum = load_u64(raw, kHeaderChecksumOffset);
  if (h.header_checksum != engine_header_checksum(raw)) {
    return corrupted(name, "header checksum mismatch");
  }
  h.format_version = version;
  h.header_size = load_u32(raw, kHeaderSizeOffset);
  h.metadata_offset = load_u64(raw, kMetadataOffsetOffset);
  h.metadata_size = load_u64(raw, kMetadataSizeOffset);
  h.data_offset = load_u64(raw, kDataOffsetOffset);
  h.data_size = load_u64(raw, kDataSizeOffset);
  h.file_size = load_u64(raw, kFileSizeOffset);
  h.checksum = load_u64(raw, kChecksumOffset);
  if (h.header_size != kHeaderSize) {
    return corrupted(name, "header_size is " + std::to_string(h.header_size) + ", not " +
                               std::to_string(kHeaderSize));
  }
  if (!load_string(raw, kKilnVersionOffset, kKilnVersionCapacity, &h.kiln_version) ||
      !load_string(raw, kTargetOffset, kTargetCapacity, &h.target) ||
      !load_string(raw, kBuildOptionsOffset, kBuildOptionsCapacity, &h.build_options)) {
    return corrupted(name, "a header string field is not NUL-terminated");
  }
  if (std::any_of(raw.begin() + kHeaderEnd, raw.end(), [](std::byte b) { return b != std::byte{0}; })) {
    return corrupted(name, "the header padding is not zero");
  }

  // 3. Size and section layout.
  if (actual_size < h.file_size) {
    return truncated(name, std::to_string(h.file_size - actual_size) + " of its " +
                               std::to_string(h.file_size) + " bytes are missing");
  }
  if (actual_size > h.file_size) {
    return corrupted(name, "it has " + std::to_string(actual_size - h.file_size) +
                               " unexpected bytes after the " + std::to_string(h.file_size) +
                               " bytes its header records");
  }
  if (h.metadata_offset != h.header_size) {
    return corrupted(name, "the metadata does not start right after the header");
  }
  if (h.data_offset < h.metadata_offset || h.data_offset - h.metadata_offset < h.metadata_size ||
      h.data_offset > h.file_size || h.file_size - h.data_offset != h.data_size) {
    return corrupted(name, "the metadata and data sections do not fit the file (metadata " +
                               std::to_string(h.metadata_offset) + "+" +
                               std::to_string(h.metadata_size) + ", data " +
                               std::to_string(h.data_offset) + "+" + std::to_string(h.data_size) +
                               ", file " + std::to_string(h.file_size) + " bytes)");
  }
  if (h.data_offset % kBlobAlignment != 0) {
    return corrupted(name, "the data section at offset " + std::to_string(h.data_offset) +
                               " is not " + std::to_string(kBlobAlignment) + "-byte aligned");
  }

  // 4. Content checksum over everything after the header.
  if (options.verify_checksum &&
      engine_content_checksum(bytes.subspan(h.header_size)) != h.checksum) {
    return corrupted(name, "content checksum mismatch");
  }

  // 5. Metadata JSON and its blob table.
  const char* json_begin = reinterpret_cast<const char*>(bytes.data() + h.metadata_offset);
  metadata_ = nlohmann::json::parse(json_begin, json_begin + h.metadata_size, nullptr,
                                    /*allow_exceptions=*/false);
  if (metadata_.is_discarded() || !metadata_.is_object()) {
    return corrupted(name, "its metadata is not a JSON object");
  }
  auto table = metadata_.find(kBlobsKey);
  if (table == metadata_.end() || !table->is_object()) {
    return corrupted(name, "its metadata has no \"blobs\" table");
  }
  struct Extent {
    uint64_t offset, size;
    const std::string* name;
  };
  std::vector<Extent> extents;
  extents.reserve(table->size());
  for (const auto& [blob_name, entry] : table->items()) {
    auto offset = entry.is_object() ? entry.find("offset") : entry.end();
    auto size = entry.is_object() ? entry.find("size") : entry.end();
    if (!entry.is_object() || offset == entry.end() || size == entry.end() ||
        !offset->is_number_unsigned() || !size->is_number_unsigned()) {
      return corrupted(name, "blob " + quoted(blob_name) +
                                 " must be {\"offset\": unsigned, \"size\": unsigned}");
    }
    const uint64_t o = offset->get<uint64_t>();
    const uint64_t s = size->get<uint64_t>();
    if (o > h.data_size || s > h.data_size - o) {
      return corrupted(name, "blob " + quoted(blob_name) + " (offset " + std::to_string(o) +
                                 ", size " + std::to_string(s) + ") lies outside the " +
                                 std::to_string(h.data_size) + "-byte data section");
    }
    if (o % kBlobAlignment != 0) {
      return corrupted(name, "blob " + quoted(blob_name) + " at offset " + std::to_string(o) +
                                 " is not " + std::to_string(kBlobAlignment) + "-byte aligned");
    }
    extents.push_back({o, s, &blob_name});
  }
  // Sorted by start, then end, so an empty blob placed where another begins does not overlap it.
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
  });
  for (size_t i = 1; i < extents.size(); ++i) {
    const Extent& prev = extents[i - 1];
    if (prev.offset + prev.size > extents[i].offset) {
      return corrupted(name, "blobs " + quoted(*prev.name) + " and " + quoted(*extents[i].name) +
                                 " overlap");
    }
  }
  const std::byte* data = bytes.data() + h.data_offset;
  for (const Extent& e : extents) {
    blobs_.emplace(*e.name, std::span<const std::byte>(data + e.offset, e.size));
  }
  return Status::ok();
}

std::span<const std::byte> EngineFile::blob(std::string_view name) const {
  auto it = blobs_.find(name);
  return it == blobs_.end() ? std::span<const std::byte>() : it->second;
}

bool EngineFile::has_blob(std::string_view name) const { return blobs_.contains(name); }

std::vector<std::string> EngineFile::blob_names() const {
  std::vector<std::string> names;
  names.reserve(blobs_.size());
  for (const auto& entry : blobs_) names.push_back(entry.first);
  return names;
}

}  // namespace kiln::engine
