#include "backends/cpu/matmul/matmul.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"

namespace kiln::cpu {
namespace {

// All tables, best guess first for each format: highest ISA first, except that the bf16
// dot-product kernel, which rounds activations to bf16, comes after the exact AVX-512 kernels
// (it is used where timing picks it, not by default).
std::vector<const MatmulKernel*> all_kernels() {
  std::vector<const MatmulKernel*> all;
  for (auto table : {detail::matmul_kernels_avx512_panel(), detail::matmul_kernels_avx512_float(),
                     detail::matmul_kernels_avx512bf16(), detail::matmul_kernels_avx2_panel(),
                     detail::matmul_kernels_avx2_q8dot(), detail::matmul_kernels_avx2_float(),
                     detail::matmul_kernels_scalar()}) {
    for (const MatmulKernel& kernel : table) all.push_back(&kernel);
  }
  return all;
}

const std::vector<const MatmulKernel*>& registry() {
  static const std::vector<const MatmulKernel*> kAll = all_kernels();
  return kAll;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

std::vector<const MatmulKernel*> matmul_kernels(ir::WeightFormat format, Isa isa) {
  std::vector<const MatmulKernel*> out;
  for (const MatmulKernel* kernel : registry()) {
    if (kernel->format == format && kernel->isa <= isa) out.push_back(kernel);
  }
  return out;
}

std::vector<const MatmulKernel*> matmul_kernels_all() { return registry(); }

const MatmulKernel* matmul_kernel_find(std::string_view name) {
  for (const MatmulKernel* kernel : registry()) {
    if (kernel->name == name) return kernel;
  }
  return nullptr;
}

std::string matmul_results_class(const MatmulKernel& kernel) {
  // "<format>.<isa>.<strategy>[.<tile>]"
  const std::string name(kernel.name);
  const std::string format(ir::weight_format_name(kernel.format));
  const size_t first = name.find('.');
  const size_t second = first == std::string::npos ? first : name.find('.', first + 1);
  if (second == std::string::npos) return name;  // "<format>.scalar"
  const std::string isa = name.substr(first + 1, second - first - 1);
  std::string strategy = name.substr(second + 1);
  if (strategy == "panel") return format + ".panel";
  if (strategy.starts_with("dq.")) strategy = strategy.substr(3);
  const bool tile_shape = strategy.size() == 3 && strategy[1] == 'x';  // "6x4"
  if (tile_shape) return format + "." + isa + ".tiles";
  if (strategy.starts_with("q8dot")) return format + "." + isa + ".q8dot";
  return name;
}

void matmul(const MatmulKernel& kernel, const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n,
            const float* bias, float* y) {
  KILN_CHECK(m >= 0 && n >= 0 && k > 0);
  KILN_CHECK(ir::weight_format_fits(kernel.format, n, k));
  KILN_CHECK(kernel.isa <= isa_detect());
  if (m == 0 || n == 0) return;
  kernel.fn(x, m, k, w, n, bias, y);
}

void* detail::matmul_scratch(size_t bytes, int slot) {
  constexpr int kSlots = 3;
  struct Buffer {
    std::unique_ptr<void, FreeDeleter> data;
    size_t size = 0;
  };
  thread_local Buffer buffers[kSlots];
  KILN_CHECK(slot >= 0 && slot < kSlots);
  Buffer& buf = buffers[slot];
  if (buf.size < bytes) {
    const size_t size = (std::max(bytes, buf.size * 3 / 2) + 63) / 64 * 64;
    buf.data.reset(std::aligned_alloc(64, size));
    KILN_CHECK(buf.data != nullptr);
    buf.size = size;
  }
  return buf.data.get();
}

}  // namespace kiln::cpu
