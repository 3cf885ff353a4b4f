// MappedFile, map_zeroed_huge, huge_page_bytes and read_text_file (base/mapped_file.h) on files
// the test writes into a directory of its own.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "base/mapped_file.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_mapped_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& contents) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << contents;
    return p.string();
  }

  fs::path dir_;
};

std::string as_string(const MappedFile& f) {
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

TEST_F(MappedFileTest, MapsTheWholeFile) {
  std::string contents(10000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 7 + 3);
  const std::string path = write("weights.bin", contents);
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_EQ(f->size(), contents.size());
  EXPECT_EQ(f->bytes().size(), contents.size());
  EXPECT_EQ(f->bytes().data(), f->data());
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(as_string(*f), contents);
}

TEST_F(MappedFileTest, AnEmptyFileMapsToAnEmptySpan) {
  auto f = MappedFile::open(write("empty.bin", ""));
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_EQ(f->size(), 0u);
  EXPECT_TRUE(f->bytes().empty());
}

TEST_F(MappedFileTest, AMissingFileIsNotFoundAndADirectoryIsRefused) {
  auto missing = MappedFile::open((dir_ / "absent.bin").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent.bin"), std::string::npos) << missing.status().message();

  auto directory = MappedFile::open(dir_.string());
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);
}

TEST_F(MappedFileTest, MovesHandTheMappingOver) {
  auto a = MappedFile::open(write("a.bin", "first"));
  auto b = MappedFile::open(write("b.bin", "second file"));
  ASSERT_TRUE(a && b);
  MappedFile moved(std::move(*a));
  EXPECT_EQ(as_string(moved), "first");
  EXPECT_EQ(a->size(), 0u);
  EXPECT_EQ(a->data(), nullptr);

  moved = std::move(*b);  // releases "first", takes "second file"
  EXPECT_EQ(as_string(moved), "second file");
  EXPECT_EQ(moved.path(), (dir_ / "b.bin").string());
  EXPECT_EQ(b->size(), 0u);
  EXPECT_EQ(b->data(), nullptr);
}

TEST_F(MappedFileTest, AFileOfSeveralHugePagesMapsAlignedAndWhole) {
  // Three huge pages and a bit: the path that asks for 2 MiB alignment.
  const size_t size = (size_t{3} << 21) + 4097;
  std::string contents(size, '\0');
  for (size_t i = 0; i < size; i += 4096) contents[i] = static_cast<char>(i / 4096 + 1);
  contents[size - 1] = 'z';
  auto f = MappedFile::open(write("big.bin", contents));
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % (uintptr_t{1} << 21), 0u);
  ASSERT_EQ(f->size(), size);
  EXPECT_EQ(std::memcmp(f->data(), contents.data(), size), 0);
  // Some mapping holds it: the huge-page count is known (possibly 0).
  EXPECT_TRUE(huge_page_bytes(f->bytes()).has_value());
}

TEST(MapZeroedHuge, GivesZeroedWritableAlignedMemory) {
  const size_t bytes = (size_t{2} << 20) + 123;
  void* p = map_zeroed_huge(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uintptr_t{1} << 21), 0u);
  auto* b = static_cast<unsigned char*>(p);
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes; i += 512) nonzero += b[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  b[0] = 1;
  b[bytes - 1] = 2;
  EXPECT_EQ(b[bytes - 1], 2);
  EXPECT_EQ(munmap(p, bytes), 0);
}

TEST(HugePageBytes, IsUnknownForAnEmptyOrUnmappedRange) {
  EXPECT_FALSE(huge_page_bytes({}).has_value());
  // Nothing is ever mapped at the second page of the address space (below vm.mmap_min_addr).
  const auto* low = reinterpret_cast<const std::byte*>(uintptr_t{4096});
  EXPECT_FALSE(huge_page_bytes({low, 4096}).has_value());
}

TEST_F(MappedFileTest, ReadTextFileReadsEveryByte) {
  const std::string contents = std::string("line one\nline two\n") + '\0' + "after a zero";
  auto text = read_text_file(write("config.json", contents));
  ASSERT_TRUE(text) << text.status().message();
  EXPECT_EQ(*text, contents);
  auto missing = read_text_file((dir_ / "absent.json").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln
