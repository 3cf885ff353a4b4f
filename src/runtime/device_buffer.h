// DeviceBuffer: a block of memory a backend owns on its device — host memory for the CPU
// backend, GPU memory for a GPU backend. The runtime holds KV-cache storage in one (KvCache) and
// passes its pointers to the backend that made it; only that backend dereferences them.
// HostBuffer is the host-memory kind: zeroed, 64-byte aligned; from 2 MiB up, an anonymous
// mapping aligned to 2 MiB with huge pages requested.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace kiln::runtime {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  // Where the bytes live: "host", or the backend's device name ("cuda:0").
  virtual std::string device() const = 0;
};

class HostBuffer final : public DeviceBuffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  std::string device() const override { return "host"; }

 private:
  std::unique_ptr<std::byte[]> storage_;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;  // data_ is a mapping of bytes_ (map_zeroed_huge)
};

}  // namespace kiln::runtime
