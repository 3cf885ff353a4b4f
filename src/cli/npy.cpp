#include "cli/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

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

namespace kiln::cli {
namespace {

struct NpyType {
  ir::DType dtype;
  const char* descr;
};

constexpr NpyType kNpyTypes[] = {
    {ir::DType::kF32, "<f4"}, {ir::DType::kF64, "<f8"}, {ir::DType::kF16, "<f2"}, {ir::DType::kI8, "|i1"},
    {ir::DType::kU8, "|u1"},  {ir::DType::kI16, "<i2"}, {ir::DType::kU16, "<u2"}, {ir::DType::kI32, "<i4"},
    {ir::DType::kU32, "<u4"}, {ir::DType::kI64, "<i8"}, {ir::DType::kU64, "<u8"}, {ir::DType::kBool, "|b1"},
};

// The value of `key` in the header dict, as its raw text up to the next top-level comma/brace.
std::string header_field(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t p = header.find(':', k);
  if (p == std::string::npos) return "";
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') return header.substr(p, header.find(')', p) - p + 1);
  size_t e = p;
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  return header.substr(p, e - p);
}

}  // namespace

Expected<ir::Tensor> npy_read(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return not_found("cannot open " + path + ": " + std::strerror(errno));
  unsigned char pre[8];
  if (std::fread(pre, 1, 8, f.get()) != 8 || std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return invalid_argument(path + " is not a NumPy .npy file");
  }
  size_t header_len = 0;
  if (pre[6] == 1) {
    unsigned char b[2];
    if (std::fread(b, 1, 2, f.get()) != 2) return invalid_argument(path + ": truncated header");
    header_len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    if (std::fread(b, 1, 4, f.get()) != 4) return invalid_argument(path + ": truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<size_t>(b[3]) << 24);
  }
  if (header_len > (1u << 20)) return invalid_argument(path + ": header too long");
  std::string header(header_len, '\0');
  if (std::fread(header.data(), 1, header_len, f.get()) != header_len) return invalid_argument(path + ": truncated header");
  std::string descr = header_field(header, "descr");
  if (descr.size() >= 2) descr = descr.substr(1, descr.size() - 2);
  if (header_field(header, "fortran_order") != "False") return invalid_argument(path + ": Fortran-order arrays are not supported");
  std::optional<ir::DType> dtype;
  for (const auto& t : kNpyTypes) {
    if (descr == t.descr || (descr.size() == 3 && std::string(t.descr).substr(1) == descr.substr(1) && descr[0] == '='))
      dtype = t.dtype;
  }
  if (!dtype) return invalid_argument(path + ": unsupported array dtype '" + descr + "'");
  ir::Shape shape;
  const std::string dims = header_field(header, "shape");
  size_t p = 1;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size() || dims[p] == ')') break;
    size_t used = 0;
    try {
      shape.push_back(std::stoll(dims.substr(p), &used));
    } catch (const std::exception&) {
      return invalid_argument(path + ": malformed shape " + dims);
    }
    p += used;
  }
  ir::Tensor t(*dtype, shape);
  if (t.byte_size() && std::fread(t.mutable_bytes(), 1, t.byte_size(), f.get()) != t.byte_size()) {
    return invalid_argument(path + ": holds fewer elements than its shape " + ir::shape_to_string(shape) + " says");
  }
  return t;
}

Status npy_write(const std::string& path, const ir::Tensor& tensor) {
  const char* descr = nullptr;
  for (const auto& t : kNpyTypes) {
    if (t.dtype == tensor.dtype()) descr = t.descr;
  }
  if (descr == nullptr) return invalid_argument("cannot write " + std::string(ir::dtype_name(tensor.dtype())) + " as .npy");
  std::string dims;
  for (size_t i = 0; i < tensor.shape().size(); ++i) dims += (i ? ", " : "") + std::to_string(tensor.shape()[i]);
  if (tensor.shape().size() == 1) dims += ",";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) return io_error("cannot write " + path + ": " + std::strerror(errno));
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const auto len = static_cast<uint16_t>(header.size());
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  const bool ok = std::fwrite(magic, 1, 8, f.get()) == 8 && std::fwrite(len_le, 1, 2, f.get()) == 2 &&
                  std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
                  std::fwrite(tensor.bytes(), 1, tensor.byte_size(), f.get()) == tensor.byte_size();
  if (!ok) return io_error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace kiln::cli
