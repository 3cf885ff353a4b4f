// When `kiln serve` with no ENGINE compiles the demo model again: the staleness rule of the cached
// engine (cli/demo_engine.h), over files whose times are set by hand.
#include "cli/demo_engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

class DemoEngineCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_demo_cache_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "model");
    for (const fs::path& p : {dir_ / "model/config.json", dir_ / "model/model.safetensors", binary(), cached()}) {
      std::ofstream(p) << "x";
    }
    const auto t0 = fs::file_time_type::clock::now() - std::chrono::hours(10);
    touch(dir_ / "model/config.json", t0);
    touch(dir_ / "model/model.safetensors", t0 + std::chrono::hours(1));
    touch(binary(), t0 + std::chrono::hours(2));
    touch(cached(), t0 + std::chrono::hours(3));
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void touch(const fs::path& p, fs::file_time_type t) { fs::last_write_time(p, t); }
  fs::path binary() const { return dir_ / "kiln"; }
  fs::path cached() const { return dir_ / "demo.kiln"; }
  fs::path model() const { return dir_ / "model"; }
  bool current() const { return demo_engine_is_current(cached(), model(), binary()); }

  fs::path dir_;
};

TEST_F(DemoEngineCache, NewerThanTheModelAndTheBinaryIsCurrent) { EXPECT_TRUE(current()); }

TEST_F(DemoEngineCache, AModelFileChangedSinceIsStale) {
  touch(model() / "model.safetensors", fs::last_write_time(cached()) + std::chrono::minutes(1));
  EXPECT_FALSE(current());
}

TEST_F(DemoEngineCache, ARebuiltKilnMakesItStale) {
  touch(binary(), fs::last_write_time(cached()) + std::chrono::minutes(1));
  EXPECT_FALSE(current());
}

TEST_F(DemoEngineCache, AMissingEngineOrBinaryIsNotCurrent) {
  fs::remove(binary());
  EXPECT_FALSE(current()) << "no binary to compare with: compile again";
  std::ofstream(binary()) << "x";
  touch(binary(), fs::last_write_time(model() / "config.json"));
  EXPECT_TRUE(current());
  fs::remove(cached());
  EXPECT_FALSE(current());
}

}  // namespace
}  // namespace kiln::cli
