// Reads float32 .npy files (NumPy format 1.0/2.0, C order, little-endian) for tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::testing {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

inline NpyArray npy_read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  char magic[8];
  in.read(magic, 8);
  if (std::string(magic + 1, 5) != "NUMPY") throw std::runtime_error(path + ": not a .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (header.find("'<f4'") == std::string::npos) throw std::runtime_error(path + ": not float32");
  if (header.find("'fortran_order': False") == std::string::npos) throw std::runtime_error(path + ": not C order");
  NpyArray a;
  const size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  std::string dims = header.substr(open + 1, close - open - 1);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t end = dims.find(',', pos);
    if (end == std::string::npos) end = dims.size();
    std::string item = dims.substr(pos, end - pos);
    if (item.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(item));
    pos = end + 1;
  }
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  a.data.resize(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(n * 4));
  if (!in) throw std::runtime_error(path + ": truncated");
  return a;
}

}  // namespace kiln::testing
