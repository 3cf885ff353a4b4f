#include "runtime/device_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

#include "base/mapped_file.h"

namespace kiln::runtime {
namespace {

// From here up, buffers are huge-page mappings: attention walks KV-cache blocks scattered over
// the pool, and 4 KiB pages would cost a TLB miss for nearly every block it reads. The kernel
// supplies zero pages as they are first touched, so a large pool costs neither a start-up
// memset nor memory it never uses.
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes >= kHugePage) {
    data_ = static_cast<std::byte*>(map_zeroed_huge(bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    mapped_ = true;
    return;
  }
  storage_.reset(new std::byte[bytes + 64]());
  auto base = reinterpret_cast<uintptr_t>(storage_.get());
  data_ = reinterpret_cast<std::byte*>((base + 63) & ~uintptr_t{63});
}

HostBuffer::~HostBuffer() {
  if (mapped_) munmap(data_, bytes_);
}

}  // namespace kiln::runtime
