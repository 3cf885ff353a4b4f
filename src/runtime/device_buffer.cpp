#include "runtime/device_buffer.h"

#include <cstdint>

namespace kiln::runtime {

HostBuffer::HostBuffer(size_t bytes) : storage_(new std::byte[bytes + 64]()), bytes_(bytes) {
  auto base = reinterpret_cast<uintptr_t>(storage_.get());
  data_ = reinterpret_cast<std::byte*>((base + 63) & ~uintptr_t{63});
}

}  // namespace kiln::runtime
