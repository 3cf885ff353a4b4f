#include "cli/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kiln::cli {

Status npy_write_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape) {
  // Python tuple syntax: (N,) for one dimension, (A, B) for more.
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + header_len(2) + header, padded with spaces to a multiple of 64, ending in \n.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) return io_error("cannot write " + path + ": " + std::strerror(errno));
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t len = static_cast<uint16_t>(header.size());
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f.get()) == 8 && std::fwrite(len_le, 1, 2, f.get()) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            std::fwrite(data.data(), sizeof(float), data.size(), f.get()) == data.size();
  if (!ok) return io_error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace kiln::cli
