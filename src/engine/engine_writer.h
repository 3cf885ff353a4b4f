// EngineWriter: writes one engine file (the format is described in engine/engine_file.h).
//
// The builder declares each blob with its size and a fill function, then calls write() once with
// the metadata JSON. Blobs are filled directly into the memory-mapped output, several at once on
// threads of the writer's own (fill functions must be safe to call concurrently), so the writer
// never holds a second copy of the weights and streams a model of any size.
// The writer owns the blob declarations (names, sizes, fill functions); the fill functions own
// whatever they capture and must stay callable until write() returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::engine {

class EngineWriter {
 public:
  // Writes exactly out.size() bytes of one blob. `out` is zero-filled and 64-byte aligned.
  using FillFn = std::function<Status(std::span<std::byte> out)>;
  // progress(done_bytes, total_bytes) over the blob bytes.
  using ProgressFn = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

  // target: the backend and ISA the engine is tuned for ("cpu-avx2", at most 31 bytes);
  // build_options: the options of `kiln build` that shaped it, for humans (at most 255 bytes).
  void set_header(std::string target, std::string build_options);

  // Declares a blob; blobs are laid out in the order declared. Names must be unique.
  void add_blob(std::string name, uint64_t size, FillFn fill);

  // Writes the file atomically: to path + ".tmp", then renamed onto `path`. `metadata` must be a
  // JSON object without a "blobs" key (the writer adds the blob table). On any failure, including
  // a fill function that fails, nothing is left at path + ".tmp" and `path` is untouched.
  // progress, if set, is called with (0, total) first and after each blob, one call at a time.
  Status write(const std::string& path, nlohmann::json metadata,
               const ProgressFn& progress = {}) const;

 private:
  struct Blob {
    std::string name;
    uint64_t size = 0;
    FillFn fill;
  };

  std::string target_;
  std::string build_options_;
  std::vector<Blob> blobs_;
};

}  // namespace kiln::engine
