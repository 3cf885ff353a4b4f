// EngineFile validation: every way a file on disk can be wrong gets one actionable line.
#include "engine/engine_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/engine_writer.h"
#include "engine_test_support.h"

namespace kiln::engine {
namespace {

using testing::expect_error;
using testing::forge_engine;
using testing::read_bytes;
using testing::reseal;
using testing::store_u64;
using testing::TempDir;
using testing::write_bytes;

constexpr const char* kRebuild = "rebuild it with `kiln build`";

class EngineFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("model.kiln");
    EngineWriter writer;
    writer.set_header("cpu-avx2", "dtype=f32");
    writer.add_blob("w", 300, [](std::span<std::byte> out) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i);
      return Status::ok();
    });
    writer.add_blob("b", 7, [](std::span<std::byte> out) {
      for (std::byte& b : out) b = std::byte{0x11};
      return Status::ok();
    });
    ASSERT_TRUE(writer.write(path_, {{"model", "tiny"}}).is_ok());
    good_ = read_bytes(path_);
    ASSERT_TRUE(EngineFile::open(path_).has_value());
  }

  // Writes `bytes` as the engine and opens it.
  Status open_bytes(const std::vector<std::byte>& bytes, EngineFile::Options options = {}) {
    write_bytes(path_, bytes);
    return EngineFile::open(path_, options).status();
  }

  TempDir dir_;
  std::string path_;
  std::vector<std::byte> good_;
};

TEST_F(EngineFileTest, MissingPath) {
  const std::string missing = dir_.file("nope.kiln");
  expect_error(EngineFile::open(missing).status(), StatusCode::kNotFound,
               {missing, "No such file", "kiln build MODEL_DIR -o " + missing});
}

TEST_F(EngineFileTest, DirectoryPath) {
  const std::string directory = dir_.file("");
  expect_error(EngineFile::open(directory).status(), StatusCode::kInvalidArgument,
               {"is a directory", "kiln build"});
}

TEST_F(EngineFileTest, EmptyFile) {
  expect_error(open_bytes({}), StatusCode::kInvalidArgument,
               {path_ + " is not a Kiln engine file (it is empty)", "kiln build MODEL_DIR -o " + path_});
}

TEST_F(EngineFileTest, GarbageFile) {
  std::vector<std::byte> garbage(5000);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<std::byte>(i * 7 + 3);
  expect_error(open_bytes(garbage), StatusCode::kInvalidArgument,
               {path_ + " is not a Kiln engine file (bad magic); build one with `kiln build "
                        "MODEL_DIR -o " + path_ + "`"});
  // Shorter than the magic itself.
  expect_error(open_bytes({std::byte{'K'}, std::byte{'I'}}), StatusCode::kInvalidArgument,
               {"bad magic"});
}

TEST_F(EngineFileTest, OtherFormatVersion) {
  std::vector<std::byte> bytes = good_;
  bytes[kFormatVersionOffset] = std::byte{kFormatVersion + 1};
  reseal(bytes);
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
               {path_ + " was written in engine format " + std::to_string(kFormatVersion + 1) + "; this kiln " KILN_VERSION
                        " reads format " + std::to_string(kFormatVersion) + " — rebuild it with this kiln's `kiln build`"});
}

TEST_F(EngineFileTest, TruncatedData) {
  std::vector<std::byte> bytes(good_.begin(), good_.end() - 100);
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
               {path_ + " is truncated", "100 of its " + std::to_string(good_.size()) +
                                             " bytes are missing",
                "incomplete"});
}

TEST_F(EngineFileTest, TruncatedHeader) {
  std::vector<std::byte> bytes(good_.begin(), good_.begin() + 1000);
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
               {"truncated", "only 1000 of the 4096 header bytes", "incomplete"});
  bytes.resize(10);  // magic present, version cut off
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument, {"truncated", "only 10 of"});
}

TEST_F(EngineFileTest, ExtraBytesAfterTheEnd) {
  std::vector<std::byte> bytes = good_;
  bytes.resize(bytes.size() + 3);
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
               {"corrupted", "3 unexpected bytes", kRebuild});
}

TEST_F(EngineFileTest, FlippedDataByte) {
  std::vector<std::byte> bytes = good_;
  const uint64_t data_offset = EngineFile::open(path_)->header().data_offset;
  bytes[data_offset + 150] ^= std::byte{0x01};
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
               {path_ + " is corrupted: content checksum mismatch", kRebuild, "copy it again"});
  // Skipping verification loads it, and shows the flipped byte.
  write_bytes(path_, bytes);
  Expected<EngineFile> unchecked = EngineFile::open(path_, {.verify_checksum = false});
  ASSERT_TRUE(unchecked.has_value()) << unchecked.status().message();
  EXPECT_EQ(unchecked->blob("w")[150], std::byte{150 ^ 1});
}

TEST_F(EngineFileTest, FlippedMetadataByte) {
  std::vector<std::byte> bytes = good_;
  bytes[kHeaderSize + 2] ^= std::byte{0x20};
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument, {"content checksum mismatch"});
}

TEST_F(EngineFileTest, FlippedHeaderBytes) {
  for (size_t offset : {size_t{20}, size_t{50}, size_t{340}, size_t{370}, size_t{380}, size_t{385}}) {
    SCOPED_TRACE(offset);
    std::vector<std::byte> bytes = good_;
    bytes[offset] ^= std::byte{0x04};
    expect_error(open_bytes(bytes), StatusCode::kInvalidArgument,
                 {path_ + " is corrupted: header checksum mismatch", kRebuild});
  }
  std::vector<std::byte> bytes = good_;
  bytes[kHeaderSize - 1] = std::byte{1};
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument, {"header padding is not zero"});
}

// The remaining cases are forged with valid checksums, so only the check under test can fire.
TEST_F(EngineFileTest, ForgedEngineIsAccepted) {
  const std::string meta = R"({"blobs":{"a":{"offset":0,"size":10},"b":{"offset":64,"size":0},"c":{"offset":64,"size":36}}})";
  Status status = open_bytes(forge_engine(meta, 100));
  ASSERT_TRUE(status.is_ok()) << status.message();
  Expected<EngineFile> engine = EngineFile::open(path_);
  ASSERT_TRUE(engine.has_value());
  EXPECT_EQ(engine->blob("c").size(), 36u);
  EXPECT_EQ(engine->blob("c")[0], std::byte{0x5a});
}

TEST_F(EngineFileTest, MetadataNotJson) {
  expect_error(open_bytes(forge_engine("{\"blobs\": {", 0)), StatusCode::kInvalidArgument,
               {"corrupted", "metadata is not a JSON object", kRebuild});
  expect_error(open_bytes(forge_engine("[1, 2]", 0)), StatusCode::kInvalidArgument,
               {"metadata is not a JSON object"});
}

TEST_F(EngineFileTest, BlobsTableMalformed) {
  expect_error(open_bytes(forge_engine(R"({"model": 1})", 0)), StatusCode::kInvalidArgument,
               {"no \"blobs\" table", kRebuild});
  expect_error(open_bytes(forge_engine(R"({"blobs": [1]})", 0)), StatusCode::kInvalidArgument,
               {"no \"blobs\" table"});
  for (const char* entry : {R"("x")", R"({"offset": 0})", R"({"offset": -64, "size": 1})",
                            R"({"offset": 0, "size": 1.5})", R"({"offset": "0", "size": 1})"}) {
    SCOPED_TRACE(entry);
    expect_error(open_bytes(forge_engine(std::string(R"({"blobs": {"w\nx": )") + entry + "}}", 64)),
                 StatusCode::kInvalidArgument, {"blob \"w\\nx\" must be", kRebuild});
  }
}

TEST_F(EngineFileTest, BlobOutOfRange) {
  expect_error(open_bytes(forge_engine(R"({"blobs": {"w": {"offset": 64, "size": 100}}})", 128)),
               StatusCode::kInvalidArgument,
               {"blob \"w\" (offset 64, size 100) lies outside the 128-byte data section", kRebuild});
  expect_error(open_bytes(forge_engine(
                   R"({"blobs": {"w": {"offset": 64, "size": 18446744073709551600}}})", 128)),
               StatusCode::kInvalidArgument, {"lies outside"});
  expect_error(open_bytes(forge_engine(R"({"blobs": {"w": {"offset": 192, "size": 0}}})", 128)),
               StatusCode::kInvalidArgument, {"lies outside"});
}

TEST_F(EngineFileTest, BlobsOverlap) {
  expect_error(
      open_bytes(forge_engine(
          R"({"blobs": {"a": {"offset": 0, "size": 65}, "b": {"offset": 64, "size": 10}}})", 128)),
      StatusCode::kInvalidArgument, {"blobs \"a\" and \"b\" overlap", kRebuild});
}

TEST_F(EngineFileTest, BlobMisaligned) {
  expect_error(open_bytes(forge_engine(R"({"blobs": {"w": {"offset": 8, "size": 8}}})", 64)),
               StatusCode::kInvalidArgument, {"blob \"w\" at offset 8 is not 64-byte aligned"});
}

TEST_F(EngineFileTest, SectionsOutOfPlace) {
  const std::string meta = R"({"blobs": {}})";
  auto expect_layout_error = [&](const std::function<void(EngineHeader&)>& tweak,
                                 const std::string& part) {
    expect_error(open_bytes(forge_engine(meta, 128, tweak)), StatusCode::kInvalidArgument,
                 {"corrupted", part, kRebuild});
  };
  expect_layout_error([](EngineHeader& h) { h.header_size = 2048; }, "header_size is 2048");
  expect_layout_error([](EngineHeader& h) { h.metadata_offset = 4100; }, "metadata does not start");
  expect_layout_error([](EngineHeader& h) { h.metadata_size = 5000; }, "do not fit the file");
  expect_layout_error([](EngineHeader& h) { h.data_size = 64; }, "do not fit the file");
  expect_layout_error(
      [](EngineHeader& h) {
        h.data_offset -= 8;
        h.data_size += 8;
      },
      "data section at offset 8184 is not 64-byte aligned");
  expect_layout_error([](EngineHeader& h) { h.data_offset = UINT64_MAX - 10; }, "do not fit");
}

TEST_F(EngineFileTest, HeaderStringWithoutNul) {
  std::vector<std::byte> bytes = forge_engine(R"({"blobs": {}})", 0);
  for (size_t i = 48; i < 80; ++i) bytes[i] = std::byte{'x'};  // the whole target field
  reseal(bytes);
  expect_error(open_bytes(bytes), StatusCode::kInvalidArgument, {"not NUL-terminated"});
}

// The fuzzer's seed corpus: one small engine, written by this function. After a format change,
// regenerate it with  KILN_REGENERATE_FUZZ_SEED=1 test_engine --gtest_filter='EngineSeed*'
Status write_seed_engine(const std::string& path) {
  EngineWriter writer;
  writer.set_header("cpu-avx2", "dtype=f16 max_seq_len=64");
  auto fill_text = [](std::string text) {
    return [text](std::span<std::byte> out) {
      std::memcpy(out.data(), text.data(), out.size());
      return Status::ok();
    };
  };
  writer.add_blob("tok_embeddings", 24, fill_text("abcdefghijklmnopqrstuvwx"));
  writer.add_blob("norm", 0, fill_text(""));
  writer.add_blob("layers.0.w", 70, fill_text(std::string(70, '<')));
  writer.add_blob("tokenizer.json", 13, fill_text("{\"vocab\":{}}\n"));
  return writer.write(path, {{"model", {{"architecture", "llama"}, {"hidden_size", 8}, {"eps", 1e-5}}},
                             {"graph", {{"nodes", nlohmann::json::array({"matmul"})}}}});
}

TEST(EngineSeedCorpusTest, SeedParsesAndMatchesItsGenerator) {
  const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/engine/small_engine";
  if (std::getenv("KILN_REGENERATE_FUZZ_SEED") != nullptr) {
    ASSERT_TRUE(write_seed_engine(seed).is_ok());
  }
  TempDir dir;
  ASSERT_TRUE(write_seed_engine(dir.file("fresh")).is_ok());
  Expected<EngineFile> fresh = EngineFile::open(dir.file("fresh"));
  ASSERT_TRUE(fresh.has_value()) << fresh.status().message();

  Expected<EngineFile> engine = EngineFile::open(seed);
  ASSERT_TRUE(engine.has_value()) << engine.status().message();
  EXPECT_EQ(engine->metadata(), fresh->metadata());
  ASSERT_EQ(engine->blob_names(), fresh->blob_names());
  for (const std::string& name : fresh->blob_names()) {
    EXPECT_TRUE(std::ranges::equal(engine->blob(name), fresh->blob(name))) << name;
  }
}

// A large engine is mapped at a 2 MiB boundary, so that the kernel can back it with huge pages;
// its bytes read back unchanged and the huge-page count covers at most the mapping.
TEST(EngineFileMapping, LargeEngineIsMappedOnAHugePageBoundary) {
  TempDir dir;
  const std::string path = dir.file("large.kiln");
  constexpr size_t kBlob = size_t{5} << 20;
  EngineWriter writer;
  writer.set_header("cpu-avx2", "dtype=f32");
  writer.add_blob("w", kBlob, [](std::span<std::byte> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 7 + (i >> 12));
    return Status::ok();
  });
  ASSERT_TRUE(writer.write(path, {{"model", "large"}}).is_ok());
  auto file = EngineFile::open(path);
  ASSERT_TRUE(file.has_value()) << file.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file->bytes().data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(file->bytes().size(), file->file_size());
  const std::span<const std::byte> w = file->blob("w");
  ASSERT_EQ(w.size(), kBlob);
  for (size_t i = 0; i < kBlob; i += 4093) ASSERT_EQ(w[i], static_cast<std::byte>(i * 7 + (i >> 12))) << i;
  const std::optional<uint64_t> huge = huge_page_bytes(file->bytes());
  ASSERT_TRUE(huge.has_value());
  EXPECT_LE(*huge, file->file_size());
  EXPECT_FALSE(huge_page_bytes({reinterpret_cast<const std::byte*>(uintptr_t{4096}), 4096}).has_value());
}

}  // namespace
}  // namespace kiln::engine
