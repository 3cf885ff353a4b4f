// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::cli {

class ProgressBar {
 public:
  ProgressBar();
  // Redraws at most ~10 times a second, and always when done reaches total.
  void update(const std::string& stage, uint64_t done, uint64_t total);
  void finish();

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point last_;
  bool drawn_ = false;
};

}  // namespace kiln::cli
