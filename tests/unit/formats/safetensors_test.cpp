#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "formats/safetensors_writer.h"
#include "unit/formats/formats_test_util.h"

namespace kiln::formats {
namespace {

using ::testing::HasSubstr;
using testing::raw_safetensors;
using testing::TempDir;
using testing::write_file;

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<float> to_float(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(tensor_numel(t)));
  Status s = tensor_to_float(t, out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

// Parses `bytes` and returns the error message (failing the test if parsing succeeds).
std::string parse_error(const std::string& bytes) {
  Expected<SafetensorsFile> f = SafetensorsFile::parse(as_bytes(bytes), "bad.safetensors");
  EXPECT_FALSE(f.has_value());
  if (f.has_value()) return "";
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(), HasSubstr("bad.safetensors"));
  return f.status().message();
}

// A well-formed one-tensor header with the given entry for tensor "w".
std::string header_with(const std::string& entry) { return "{\"w\":" + entry + "}"; }

TEST(SafetensorsTest, ReadsIndependentlyEncodedReferenceFile) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/tests/unit/formats/data/reference.safetensors";
  Expected<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata().at("format"), "pt");

  // File order is data order, not header-key order.
  std::vector<std::string> names;
  for (const TensorView& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"z_scalar", "bf16_matrix", "f32_matrix", "empty",
                                             "f16_vector", "i64_ids"}));

  const TensorView* scalar = f->find("z_scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(to_float(*scalar), std::vector<float>{7.25f});

  const TensorView* m = f->find("f32_matrix");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dtype, TensorDType::kF32);
  EXPECT_EQ(m->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(to_float(*m), (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));

  const TensorView* h = f->find("f16_vector");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, TensorDType::kF16);
  EXPECT_EQ(to_float(*h), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f}));

  const TensorView* b = f->find("bf16_matrix");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, TensorDType::kBF16);
  EXPECT_EQ(to_float(*b), (std::vector<float>{1.0f, -1.5f, 3.0f, 0.15625f}));

  const TensorView* e = f->find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(tensor_numel(*e), 0);
  EXPECT_TRUE(e->data.empty());

  const TensorView* ids = f->find("i64_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, TensorDType::kI64);
  int64_t raw[2];
  std::memcpy(raw, ids->data.data(), sizeof(raw));
  EXPECT_EQ(raw[0], 1);
  EXPECT_EQ(raw[1], -1);
  std::vector<float> out(2);
  Status s = tensor_to_float(*ids, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("i64_ids"));
  EXPECT_THAT(s.message(), HasSubstr("I64"));

  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST(SafetensorsTest, DTypeNamesRoundTrip) {
  for (const char* name : {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL",
                           "F8_E4M3", "F8_E5M2"}) {
    std::optional<TensorDType> d = tensor_dtype_from_name(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(tensor_dtype_name(*d), name);
  }
  EXPECT_FALSE(tensor_dtype_from_name("f32").has_value());
  EXPECT_EQ(tensor_dtype_size(TensorDType::kBF16), 2u);
  EXPECT_EQ(tensor_dtype_size(TensorDType::kF64), 8u);
}

TEST(SafetensorsTest, WriterRoundTripsEveryFloatDType) {
  TempDir dir;
  const std::vector<float> values = {0.1f, -2.5f, 3.14159f, 1e-3f, -0.0f, 65000.0f};
  const std::vector<std::byte> f32 = floats_to_tensor_bytes(values, TensorDType::kF32);
  const std::vector<std::byte> f16 = floats_to_tensor_bytes(values, TensorDType::kF16);
  const std::vector<std::byte> bf16 = floats_to_tensor_bytes(values, TensorDType::kBF16);
  const std::string path = dir.file("rt.safetensors");
  ASSERT_TRUE(write_safetensors(path,
                                {{{"a.f32", TensorDType::kF32, {2, 3}}, f32},
                                 {{"b.f16", TensorDType::kF16, {6}}, f16},
                                 {{"c.bf16", TensorDType::kBF16, {3, 1, 2}}, bf16}},
                                {{"format", "pt"}})
                  .is_ok());

  const std::string bytes = testing::read_file(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "data section should be 8-byte aligned";

  Expected<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->find("c.bf16")->shape, (std::vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(to_float(*f->find("a.f32")), values);
  std::vector<float> h = to_float(*f->find("b.f16"));
  std::vector<float> b = to_float(*f->find("c.bf16"));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(h[i], fp16_to_float(float_to_fp16(values[i])));
    EXPECT_EQ(b[i], bf16_to_float(float_to_bf16(values[i])));
    EXPECT_NEAR(h[i], values[i], std::abs(values[i]) * 1e-3f + 1e-6f);
    EXPECT_NEAR(b[i], values[i], std::abs(values[i]) * 1e-2f + 1e-6f);
  }
}

TEST(SafetensorsTest, StreamingWriterChecksByteCounts) {
  TempDir dir;
  const std::vector<float> values(10, 1.5f);
  const std::vector<std::byte> bytes = floats_to_tensor_bytes(values, TensorDType::kF32);
  const std::vector<TensorSpec> specs = {{"x", TensorDType::kF32, {3}}, {"y", TensorDType::kF32, {7}}};
  {
    Expected<SafetensorsWriter> w = SafetensorsWriter::create(dir.file("ok.safetensors"), specs);
    ASSERT_TRUE(w.has_value()) << w.status().message();
    EXPECT_EQ(w->data_bytes_total(), 40u);
    // Chunks that straddle the tensor boundary.
    ASSERT_TRUE(w->append(std::span(bytes).subspan(0, 5)).is_ok());
    ASSERT_TRUE(w->append(std::span(bytes).subspan(5, 30)).is_ok());
    EXPECT_EQ(w->append(std::span(bytes).subspan(0, 6)).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(w->append(std::span(bytes).subspan(35, 5)).is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }
  Expected<SafetensorsFile> f = SafetensorsFile::open(dir.file("ok.safetensors"));
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(to_float(*f->find("y")), std::vector<float>(7, 1.5f));

  {
    Expected<SafetensorsWriter> w = SafetensorsWriter::create(dir.file("short.safetensors"), specs);
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE(w->append(std::span(bytes).subspan(0, 12)).is_ok());
    Status s = w->finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("12 of the 40"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("short.safetensors")))
      << "an unfinished file must not be left behind";
}

TEST(SafetensorsTest, WriterRejectsInvalidSpecs) {
  TempDir dir;
  auto create = [&](std::vector<TensorSpec> specs) {
    return SafetensorsWriter::create(dir.file("w.safetensors"), std::move(specs)).status();
  };
  EXPECT_THAT(create({{"a", TensorDType::kF32, {1}}, {"a", TensorDType::kF32, {2}}}).message(),
              HasSubstr("declared twice"));
  EXPECT_THAT(create({{"a", TensorDType::kF32, {-1}}}).message(), HasSubstr("negative"));
  EXPECT_THAT(create({{"", TensorDType::kF32, {1}}}).message(), HasSubstr("empty name"));
  EXPECT_THAT(create({{"__metadata__", TensorDType::kF32, {1}}}).message(), HasSubstr("reserved"));
  const std::vector<std::byte> three(3);
  EXPECT_THAT(write_safetensors(dir.file("w.safetensors"), {{{"a", TensorDType::kF32, {1}}, three}})
                  .message(),
              HasSubstr("3 bytes"));
  EXPECT_EQ(SafetensorsWriter::create(dir.file("no/such/dir/w.safetensors"), {}).status().code(),
            StatusCode::kIoError);
}

TEST(SafetensorsTest, ParsesBorrowedBuffer) {
  const std::string bytes = raw_safetensors(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"n":1}})", 8);
  Expected<SafetensorsFile> f = SafetensorsFile::parse(as_bytes(bytes), "mem");
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->path(), "mem");
  EXPECT_EQ(f->metadata().at("n"), "1");
  EXPECT_EQ(f->find("w")->data.data(), as_bytes(bytes).data() + bytes.size() - 8);
}

TEST(SafetensorsTest, RejectsFilesShorterThanTheLengthField) {
  EXPECT_THAT(parse_error(""), HasSubstr("shorter than the 8-byte"));
  EXPECT_THAT(parse_error("\x05\0\0"), HasSubstr("shorter than the 8-byte"));
}

TEST(SafetensorsTest, RejectsHeaderLengthBeyondFileOrAbsurd) {
  EXPECT_THAT(parse_error(testing::le64(1000) + "{}"), HasSubstr("runs past the end"));
  EXPECT_THAT(parse_error(testing::le64(uint64_t{1} << 40) + "{}"), HasSubstr("100 MB"));
  EXPECT_THAT(parse_error(testing::le64(~uint64_t{0}) + "{}"), HasSubstr("100 MB"));
}

TEST(SafetensorsTest, RejectsHeadersThatAreNotAJsonObject) {
  EXPECT_THAT(parse_error(raw_safetensors("{\"w\": ", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(raw_safetensors("[1, 2]", 0)), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(raw_safetensors("\xff\xfe", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(raw_safetensors(R"({"__metadata__": [1]})", 0)), HasSubstr("__metadata__"));
}

TEST(SafetensorsTest, RejectsMissingOrIllTypedFields) {
  struct Case {
    const char* entry;
    const char* expected;
  } cases[] = {
      {R"("F32")", "not a JSON object"},
      {R"({"shape":[1],"data_offsets":[0,4]})", "\"dtype\""},
      {R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", "\"dtype\""},
      {R"({"dtype":"F32","data_offsets":[0,4]})", "\"shape\""},
      {R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})", "\"shape\""},
      {R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", "not an integer"},
      {R"({"dtype":"F32","shape":[1]})", "data_offsets"},
      {R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", "data_offsets"},
      {R"({"dtype":"F32","shape":[1],"data_offsets":[-4,4]})", "non-negative"},
      {R"({"dtype":"F32","shape":[1],"data_offsets":["0","4"]})", "non-negative"},
  };
  for (const Case& c : cases) {
    const std::string message = parse_error(raw_safetensors(header_with(c.entry), 4));
    EXPECT_THAT(message, HasSubstr(c.expected)) << c.entry;
    EXPECT_THAT(message, HasSubstr("'w'")) << c.entry;
  }
  EXPECT_THAT(parse_error(raw_safetensors(R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4)),
              HasSubstr("empty name"));
}

TEST(SafetensorsTest, RejectsUnknownDType) {
  const std::string m = parse_error(
      raw_safetensors(header_with(R"({"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]})"), 1));
  EXPECT_THAT(m, HasSubstr("unknown dtype \"Q4_K\""));
  EXPECT_THAT(m, HasSubstr("'w'"));
}

TEST(SafetensorsTest, RejectsNegativeDims) {
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]})"), 4)),
              HasSubstr("negative dimension -3"));
}

TEST(SafetensorsTest, RejectsShapeThatDisagreesWithOffsets) {
  const std::string m = parse_error(
      raw_safetensors(header_with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 16));
  EXPECT_THAT(m, HasSubstr("needs 12 bytes but data_offsets span 8"));
}

TEST(SafetensorsTest, RejectsBeginAfterEnd) {
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 16)),
              HasSubstr("after end"));
}

TEST(SafetensorsTest, RejectsOffsetsBeyondTheDataSection) {
  // Lying offsets.
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), 12)),
              HasSubstr("beyond the data section"));
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551611,18446744073709551615]})"),
                  12)),
              HasSubstr("beyond the data section"));
  // A real file, truncated.
  TempDir dir;
  const std::vector<float> values(64, 0.25f);
  ASSERT_TRUE(write_safetensors(dir.file("t.safetensors"),
                                {{{"w", TensorDType::kF32, {8, 8}},
                                  floats_to_tensor_bytes(values, TensorDType::kF32)}})
                  .is_ok());
  std::string bytes = testing::read_file(dir.file("t.safetensors"));
  bytes.resize(bytes.size() - 1);
  write_file(dir.file("t.safetensors"), bytes);
  Expected<SafetensorsFile> f = SafetensorsFile::open(dir.file("t.safetensors"));
  ASSERT_FALSE(f.has_value());
  EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(f.status().message(), HasSubstr(dir.file("t.safetensors")));
}

TEST(SafetensorsTest, RejectsOverlappingTensors) {
  const std::string m = parse_error(raw_safetensors(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12));
  EXPECT_THAT(m, HasSubstr("'b' overlaps tensor 'a'"));
  // Identical ranges overlap too; empty tensors overlap nothing.
  parse_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                              8));
  EXPECT_TRUE(SafetensorsFile::parse(as_bytes(raw_safetensors(
                                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                         8)))
                  .has_value());
}

TEST(SafetensorsTest, RejectsElementCountOverflow) {
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})"), 4)),
              HasSubstr("overflows"));
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]})"), 4)),
              HasSubstr("byte size"));
  EXPECT_THAT(parse_error(raw_safetensors(
                  header_with(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})"), 4)),
              HasSubstr("too large"));
}

TEST(SafetensorsTest, TensorToFloatChecksDestinationSize) {
  const std::string bytes =
      raw_safetensors(header_with(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,4]})"), 4);
  Expected<SafetensorsFile> f = SafetensorsFile::parse(as_bytes(bytes));
  ASSERT_TRUE(f.has_value());
  std::vector<float> out(3);
  EXPECT_THAT(tensor_to_float(*f->find("w"), out).message(), HasSubstr("destination holds 3"));
}

// Random corruptions of a valid file must give an error or a valid file, never a read outside
// the buffer (the ASan build checks that), and every view must lie inside the buffer.
TEST(SafetensorsTest, SurvivesRandomCorruption) {
  TempDir dir;
  const std::vector<float> values(48, 0.5f);
  ASSERT_TRUE(write_safetensors(dir.file("c.safetensors"),
                                {{{"a", TensorDType::kF32, {4, 4}},
                                  floats_to_tensor_bytes(std::span(values).first(16), TensorDType::kF32)},
                                 {{"b", TensorDType::kBF16, {32}},
                                  floats_to_tensor_bytes(std::span(values).first(32), TensorDType::kBF16)}})
                  .is_ok());
  const std::string original = testing::read_file(dir.file("c.safetensors"));
  std::mt19937 rng(1234);
  int parsed_ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[pos] = static_cast<char>(rng()); break;
        case 1: bytes[pos] = "0123456789[]{},:\"-"[rng() % 18]; break;
        case 2: bytes.resize(pos); break;
      }
      if (bytes.empty()) break;
    }
    Expected<SafetensorsFile> f = SafetensorsFile::parse(as_bytes(bytes));
    if (!f.has_value()) {
      EXPECT_FALSE(f.status().message().empty());
      continue;
    }
    ++parsed_ok;
    const std::byte* lo = as_bytes(bytes).data();
    const std::byte* hi = lo + bytes.size();
    for (const TensorView& t : f->tensors()) {
      ASSERT_GE(t.data.data(), lo);
      ASSERT_LE(t.data.data() + t.data.size(), hi);
      ASSERT_EQ(t.data.size(), static_cast<size_t>(tensor_numel(t)) * tensor_dtype_size(t.dtype));
    }
  }
  EXPECT_GT(parsed_ok, 0);  // some edits land in the data section and leave the file valid
}

}  // namespace
}  // namespace kiln::formats
