// EngineWriter -> EngineFile round trips, atomic writes, and the writer's own input checks.
#include "engine/engine_writer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "engine/engine_file.h"
#include "engine_test_support.h"

namespace kiln::engine {
namespace {

using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;

// Byte i of blob `seed` is a function of both, so a blob read from the wrong place shows.
std::byte pattern_byte(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>((i * 131 + seed * 17 + (i >> 8)) & 0xff);
}

EngineWriter::FillFn fill_pattern(uint64_t seed) {
  return [seed](std::span<std::byte> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = pattern_byte(seed, i);
    return Status::ok();
  };
}

struct BlobSpec {
  std::string name;
  uint64_t size;
};

// Odd sizes on purpose: empty, one byte, around the alignment and around a page.
const std::vector<BlobSpec> kBlobs = {
    {"tok_embeddings", 4097}, {"empty", 0},          {"one", 1},         {"layers.0.wq", 63},
    {"layers.0.wk", 64},      {"layers.0.wv", 65},   {"tokenizer.json", 769}, {"norm", 7},
    {"empty_last", 0},
};

nlohmann::json sample_metadata() {
  return {{"model", {{"architecture", "llama"}, {"hidden_size", 64}, {"vocab", {"a", "b"}}}},
          {"name", "tiny \"quoted\" \xc3\xa9"}};
}

EngineWriter sample_writer() {
  EngineWriter writer;
  writer.set_header("cpu-avx2", "dtype=int4 group=32 max_seq_len=2048 max_batch_tokens=512");
  for (size_t i = 0; i < kBlobs.size(); ++i) {
    writer.add_blob(kBlobs[i].name, kBlobs[i].size, fill_pattern(i));
  }
  return writer;
}

TEST(EngineWriterTest, RoundTripKeepsHeaderMetadataAndBlobs) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(sample_writer()
                  .write(path, sample_metadata(),
                         [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); })
                  .is_ok());

  uint64_t total = 0;
  for (const BlobSpec& b : kBlobs) total += b.size;
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, total));
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_LE(calls[i - 1].first, calls[i].first);
    EXPECT_EQ(calls[i].second, total);
  }

  Expected<EngineFile> engine = EngineFile::open(path);
  ASSERT_TRUE(engine.has_value()) << engine.status().message();
  const EngineHeader& h = engine->header();
  EXPECT_EQ(h.format_version, kFormatVersion);
  EXPECT_EQ(h.kiln_version, KILN_VERSION);
  EXPECT_EQ(h.target, "cpu-avx2");
  EXPECT_EQ(h.build_options, "dtype=int4 group=32 max_seq_len=2048 max_batch_tokens=512");
  EXPECT_EQ(h.file_size, std::filesystem::file_size(path));
  EXPECT_EQ(engine->file_size(), h.file_size);
  EXPECT_EQ(h.data_offset % kDataAlignment, 0u);
  EXPECT_EQ(engine->name(), path);

  nlohmann::json expected = sample_metadata();
  nlohmann::json stored = engine->metadata();
  ASSERT_TRUE(stored.contains("blobs"));
  stored.erase("blobs");
  EXPECT_EQ(stored, expected);

  std::vector<std::string> names;
  for (const BlobSpec& b : kBlobs) names.push_back(b.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(engine->blob_names(), names);

  for (size_t i = 0; i < kBlobs.size(); ++i) {
    SCOPED_TRACE(kBlobs[i].name);
    ASSERT_TRUE(engine->has_blob(kBlobs[i].name));
    std::span<const std::byte> blob = engine->blob(kBlobs[i].name);
    ASSERT_EQ(blob.size(), kBlobs[i].size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blob.data()) % kBlobAlignment, 0u);
    for (size_t j = 0; j < blob.size(); ++j) {
      ASSERT_EQ(blob[j], pattern_byte(i, j)) << "byte " << j;
    }
  }
  EXPECT_FALSE(engine->has_blob("missing"));
  EXPECT_TRUE(engine->blob("missing").empty());
}

TEST(EngineWriterTest, BlobsStayValidAfterTheEngineIsMoved) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  ASSERT_TRUE(sample_writer().write(path, sample_metadata()).is_ok());
  Expected<EngineFile> opened = EngineFile::open(path);
  ASSERT_TRUE(opened.has_value()) << opened.status().message();
  const std::byte* before = opened->blob("layers.0.wv").data();
  auto moved = std::make_unique<EngineFile>(std::move(opened).value());
  std::span<const std::byte> blob = moved->blob("layers.0.wv");
  EXPECT_EQ(blob.data(), before);
  ASSERT_EQ(blob.size(), 65u);
  EXPECT_EQ(blob[64], pattern_byte(5, 64));
}

TEST(EngineWriterTest, SameInputWritesTheSameBytes) {
  TempDir dir;
  ASSERT_TRUE(sample_writer().write(dir.file("a.kiln"), sample_metadata()).is_ok());
  ASSERT_TRUE(sample_writer().write(dir.file("b.kiln"), sample_metadata()).is_ok());
  EXPECT_EQ(read_bytes(dir.file("a.kiln")), read_bytes(dir.file("b.kiln")));
}

TEST(EngineWriterTest, EngineWithoutBlobsRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("empty.kiln");
  EngineWriter writer;
  writer.set_header("cpu-avx512", "");
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(writer
                  .write(path, nlohmann::json::object(),
                         [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); })
                  .is_ok());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(uint64_t{0}, uint64_t{0}));
  Expected<EngineFile> engine = EngineFile::open(path);
  ASSERT_TRUE(engine.has_value()) << engine.status().message();
  EXPECT_TRUE(engine->blob_names().empty());
  EXPECT_EQ(engine->header().target, "cpu-avx512");
  EXPECT_EQ(engine->header().data_size, 0u);
}

TEST(EngineWriterTest, ParsesBorrowedAlignedBytes) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  ASSERT_TRUE(sample_writer().write(path, sample_metadata()).is_ok());
  std::vector<std::byte> bytes = read_bytes(path);
  // One spare alignment unit so both an aligned and a misaligned start fit.
  std::unique_ptr<std::byte, decltype(&std::free)> buffer(
      static_cast<std::byte*>(std::aligned_alloc(kBlobAlignment, bytes.size() + kBlobAlignment)),
      &std::free);
  ASSERT_NE(buffer, nullptr);
  std::copy(bytes.begin(), bytes.end(), buffer.get());
  Expected<EngineFile> engine =
      EngineFile::parse(std::span<const std::byte>(buffer.get(), bytes.size()), {}, "in-memory");
  ASSERT_TRUE(engine.has_value()) << engine.status().message();
  EXPECT_EQ(engine->blob("one").data(), buffer.get() + engine->header().data_offset + 4160);
  EXPECT_EQ(engine->name(), "in-memory");

  std::copy(bytes.begin(), bytes.end(), buffer.get() + 8);
  Expected<EngineFile> misaligned =
      EngineFile::parse(std::span<const std::byte>(buffer.get() + 8, bytes.size()), {}, "in-memory");
  expect_error(misaligned.status(), StatusCode::kInvalidArgument, {"in-memory", "64-byte aligned"});
}

TEST(EngineWriterTest, FailingFillLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  EngineWriter writer = sample_writer();
  writer.add_blob("broken", 100, [](std::span<std::byte>) { return io_error("disk on fire"); });
  int progress_calls = 0;
  Status status =
      writer.write(path, sample_metadata(), [&](uint64_t, uint64_t) { ++progress_calls; });
  expect_error(status, StatusCode::kIoError, {"disk on fire", "\"broken\"", path});
  EXPECT_GT(progress_calls, 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(EngineWriterTest, BlobsFilledOutOfOrderOnSeveralThreadsLandInPlace) {
  // Fills finish in a scrambled order (each waits a different while); every blob must still be
  // where the table says, and the checksum over the whole file must hold.
  TempDir dir;
  const std::string path = dir.file("many.kiln");
  EngineWriter writer;
  writer.set_header("cpu-avx2", "many");
  constexpr size_t kCount = 64;
  for (size_t i = 0; i < kCount; ++i) {
    auto fill = fill_pattern(i);
    writer.add_blob("b" + std::to_string(i), 1 + (i * 977) % 5000, [fill, i](std::span<std::byte> out) {
      std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 1500));
      return fill(out);
    });
  }
  uint64_t last = 0;
  ASSERT_TRUE(writer.write(path, sample_metadata(), [&](uint64_t done, uint64_t) {
    EXPECT_GE(done, last);  // one call at a time, never going back
    last = done;
  }).is_ok());
  Expected<EngineFile> engine = EngineFile::open(path);
  ASSERT_TRUE(engine.has_value()) << engine.status().message();
  for (size_t i = 0; i < kCount; ++i) {
    std::span<const std::byte> blob = engine->blob("b" + std::to_string(i));
    ASSERT_EQ(blob.size(), 1 + (i * 977) % 5000);
    for (size_t j = 0; j < blob.size(); ++j) ASSERT_EQ(blob[j], pattern_byte(i, j)) << "blob " << i << " byte " << j;
  }
}

TEST(EngineWriterTest, OfTwoFailingFillsTheFirstBlobsErrorIsReported) {
  // Whichever thread fails first, the error names the earlier blob.
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  for (int run = 0; run < 5; ++run) {
    EngineWriter writer = sample_writer();
    writer.add_blob("first_broken", 10, [](std::span<std::byte>) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return io_error("first failure");
    });
    writer.add_blob("second_broken", 10, [](std::span<std::byte>) { return io_error("second failure"); });
    expect_error(writer.write(path, sample_metadata(), nullptr), StatusCode::kIoError, {"first failure", "\"first_broken\""});
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST(EngineWriterTest, FailingWriteKeepsThePreviousEngine) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  ASSERT_TRUE(sample_writer().write(path, sample_metadata()).is_ok());
  const std::vector<std::byte> before = read_bytes(path);

  EngineWriter writer;
  writer.set_header("cpu-avx2", "");
  writer.add_blob("w", 10, [](std::span<std::byte>) { return invalid_argument("bad tensor"); });
  EXPECT_FALSE(writer.write(path, {{"name", "other"}}).is_ok());
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // A fill that throws unwinds through the writer and still removes the temporary file.
  EngineWriter throwing;
  throwing.set_header("cpu-avx2", "");
  throwing.add_blob("w", 10, [](std::span<std::byte>) -> Status {
    throw std::runtime_error("out of memory in fill");
  });
  EXPECT_THROW((void)throwing.write(path, nlohmann::json::object()), std::runtime_error);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(EngineWriterTest, RejectsBadInputBeforeCreatingAFile) {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  auto expect_rejected = [&](const EngineWriter& writer, nlohmann::json metadata,
                             std::initializer_list<std::string> parts) {
    expect_error(writer.write(path, std::move(metadata)), StatusCode::kInvalidArgument, parts);
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  };

  EngineWriter no_target;
  expect_rejected(no_target, nlohmann::json::object(), {"set_header"});

  EngineWriter writer;
  writer.set_header("cpu-avx2", "");
  expect_rejected(writer, nlohmann::json::array({1, 2}), {"JSON object", "array"});
  expect_rejected(writer, {{"blobs", 1}}, {"\"blobs\""});
  expect_rejected(writer, {{"name", std::string("bad \xff utf-8")}}, {"cannot be written as JSON"});

  EngineWriter long_target;
  long_target.set_header(std::string(32, 'x'), "");
  expect_rejected(long_target, nlohmann::json::object(), {"target", "31 bytes"});
  EngineWriter long_options;
  long_options.set_header("cpu-avx2", std::string(256, 'o'));
  expect_rejected(long_options, nlohmann::json::object(), {"build_options", "255 bytes"});

  EngineWriter duplicate;
  duplicate.set_header("cpu-avx2", "");
  duplicate.add_blob("w", 4, fill_pattern(0));
  duplicate.add_blob("w", 8, fill_pattern(1));
  expect_rejected(duplicate, nlohmann::json::object(), {"\"w\"", "declared twice"});

  EngineWriter huge;
  huge.set_header("cpu-avx2", "");
  huge.add_blob("a", UINT64_MAX - 10, fill_pattern(0));
  huge.add_blob("b", 100, fill_pattern(1));
  expect_rejected(huge, nlohmann::json::object(), {"2^64"});

  EngineWriter no_fill;
  no_fill.set_header("cpu-avx2", "");
  no_fill.add_blob("w", 4, nullptr);
  expect_rejected(no_fill, nlohmann::json::object(), {"\"w\"", "no fill function"});
}

TEST(EngineWriterTest, ReportsAnUnwritableDirectory) {
  TempDir dir;
  const std::string path = dir.file("no_such_dir/model.kiln");
  expect_error(sample_writer().write(path, sample_metadata()), StatusCode::kIoError,
               {"cannot create", path + ".tmp"});
}

}  // namespace
}  // namespace kiln::engine
