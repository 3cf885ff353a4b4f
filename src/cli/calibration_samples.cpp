#include "cli/calibration_samples.h"

#include <algorithm>
#include <filesystem>

#include "cli/npy.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

bool is_npy(const fs::directory_entry& e) { return e.is_regular_file() && e.path().extension() == ".npy"; }

Expected<std::vector<fs::directory_entry>> sorted_entries(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
  if (ec) return invalid_argument("--calib " + dir.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
  return entries;
}

Expected<ir::Tensor> read_one(const fs::path& file) {
  auto t = npy_read(file.string());
  if (!t) return invalid_argument("--calib: " + file.string() + ": " + t.status().message());
  return t;
}

}  // namespace

Expected<std::vector<std::map<std::string, ir::Tensor>>> read_calibration_samples(const std::string& dir) {
  if (!fs::is_directory(dir)) return invalid_argument("--calib " + dir + ": not a directory");
  KILN_ASSIGN_OR_RETURN(std::vector<fs::directory_entry> entries, sorted_entries(dir));
  std::vector<std::map<std::string, ir::Tensor>> samples;
  for (const fs::directory_entry& e : entries) {
    if (is_npy(e)) {
      KILN_ASSIGN_OR_RETURN(ir::Tensor t, read_one(e.path()));
      samples.push_back({{"", std::move(t)}});
    } else if (e.is_directory()) {
      KILN_ASSIGN_OR_RETURN(std::vector<fs::directory_entry> files, sorted_entries(e.path()));
      std::map<std::string, ir::Tensor> sample;
      for (const fs::directory_entry& f : files) {
        if (!is_npy(f)) continue;
        KILN_ASSIGN_OR_RETURN(ir::Tensor t, read_one(f.path()));
        sample.emplace(f.path().stem().string(), std::move(t));
      }
      if (sample.empty()) return invalid_argument("--calib: " + e.path().string() + " holds no .npy files");
      samples.push_back(std::move(sample));
    }
  }
  if (samples.empty()) {
    return invalid_argument("--calib " + dir + ": no samples (expected *.npy files, or one directory of INPUT.npy files a sample)");
  }
  return samples;
}

}  // namespace kiln::cli
