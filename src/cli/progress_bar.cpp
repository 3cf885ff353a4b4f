#include "cli/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace kiln::cli {

ProgressBar::ProgressBar() : enabled_(isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(const std::string& stage, uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r\033[K%-28.28s [%s] %5.1f%%", stage.c_str(), bar.c_str(), frac * 100.0);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace kiln::cli
