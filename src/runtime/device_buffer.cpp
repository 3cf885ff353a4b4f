#include "runtime/device_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <new>

namespace kiln::runtime {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` of zeroed memory at a 2 MiB-aligned address, with huge pages requested: attention
// walks KV-cache blocks scattered over the pool, and 4 KiB pages would cost a TLB miss for
// nearly every block it reads. The kernel supplies zero pages as they are first touched, so a
// large pool costs neither a start-up memset nor memory it never uses.
std::byte* map_zeroed(size_t bytes) {
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* area = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(area, aligned - start);
  const uintptr_t end = aligned + size;
  if (start + size + kHugePage > end) munmap(reinterpret_cast<void*>(end), start + size + kHugePage - end);
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<std::byte*>(aligned);
}

}  // namespace

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes >= kHugePage) {
    data_ = map_zeroed(bytes);
    mapped_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    return;
  }
  storage_.reset(new std::byte[bytes + 64]());
  auto base = reinterpret_cast<uintptr_t>(storage_.get());
  data_ = reinterpret_cast<std::byte*>((base + 63) & ~uintptr_t{63});
}

HostBuffer::~HostBuffer() {
  if (mapped_ > 0) munmap(data_, mapped_);
}

}  // namespace kiln::runtime
