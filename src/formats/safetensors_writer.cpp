#include "formats/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/half.h"

namespace kiln::formats {
namespace {

Status validate_specs(const std::vector<TensorSpec>& tensors) {
  std::set<std::string> names;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) return invalid_argument("safetensors writer: a tensor has an empty name");
    if (t.name == "__metadata__") {
      return invalid_argument("safetensors writer: \"__metadata__\" is reserved, not a tensor name");
    }
    if (!names.insert(t.name).second) {
      return invalid_argument("safetensors writer: tensor '" + t.name + "' is declared twice");
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return invalid_argument("safetensors writer: tensor '" + t.name + "' has negative shape " +
                                shape_to_string(t.shape));
      }
    }
  }
  return Status::ok();
}

}  // namespace

uint64_t tensor_spec_bytes(const TensorSpec& spec) {
  uint64_t n = tensor_dtype_size(spec.dtype);
  for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string safetensors_header(const std::vector<TensorSpec>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = tensor_spec_bytes(t);
    header[t.name] = {{"dtype", std::string(tensor_dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json;
}

void floats_to_tensor_bytes(std::span<const float> src, TensorDType dtype, std::byte* out) {
  switch (dtype) {
    case TensorDType::kF32:
      if (!src.empty()) std::memcpy(out, src.data(), src.size() * sizeof(float));
      return;
    case TensorDType::kF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = float_to_fp16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case TensorDType::kBF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = float_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default:
      KILN_CHECK(false && "floats_to_tensor_bytes: only F32, F16 and BF16");
  }
}

std::vector<std::byte> floats_to_tensor_bytes(std::span<const float> src, TensorDType dtype) {
  std::vector<std::byte> out(src.size() * tensor_dtype_size(dtype));
  floats_to_tensor_bytes(src, dtype, out.data());
  return out;
}

SafetensorsWriter::~SafetensorsWriter() { abandon(); }

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      total_(other.total_),
      written_(other.written_) {}

SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
    total_ = other.total_;
    written_ = other.written_;
  }
  return *this;
}

void SafetensorsWriter::abandon() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(path_.c_str());
}

Expected<SafetensorsWriter> SafetensorsWriter::create(
    const std::string& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  KILN_RETURN_IF_ERROR(validate_specs(tensors));
  SafetensorsWriter writer;
  writer.path_ = path;
  for (const TensorSpec& t : tensors) writer.total_ += tensor_spec_bytes(t);
  writer.file_ = std::fopen(path.c_str(), "wb");
  if (writer.file_ == nullptr) {
    return io_error("cannot create " + path + ": " + std::strerror(errno));
  }
  const std::string header = safetensors_header(tensors, metadata);
  if (std::fwrite(header.data(), 1, header.size(), writer.file_) != header.size()) {
    return io_error("cannot write " + path + ": " + std::strerror(errno));
  }
  return writer;
}

Status SafetensorsWriter::append(std::span<const std::byte> bytes) {
  if (file_ == nullptr) return internal_error("safetensors writer: append after finish");
  if (bytes.size() > total_ - written_) {
    return invalid_argument(path_ + ": appending " + std::to_string(bytes.size()) +
                            " bytes would exceed the " + std::to_string(total_) +
                            " bytes the header declares");
  }
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    return io_error("cannot write " + path_ + ": " + std::strerror(errno));
  }
  written_ += bytes.size();
  return Status::ok();
}

Status SafetensorsWriter::finish() {
  if (file_ == nullptr) return internal_error("safetensors writer: finish called twice");
  if (written_ != total_) {
    return invalid_argument(path_ + ": only " + std::to_string(written_) + " of the " +
                            std::to_string(total_) + " declared data bytes were written");
  }
  std::FILE* f = std::exchange(file_, nullptr);
  if (std::fclose(f) != 0) {
    const int err = errno;
    std::remove(path_.c_str());
    return io_error("cannot write " + path_ + ": " + std::strerror(err));
  }
  return Status::ok();
}

Status write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorBytes& t : tensors) specs.push_back(t.spec);
  KILN_RETURN_IF_ERROR(validate_specs(specs));
  for (const TensorBytes& t : tensors) {
    if (t.data.size() != tensor_spec_bytes(t.spec)) {
      return invalid_argument("safetensors writer: tensor '" + t.spec.name + "' has " +
                              std::to_string(t.data.size()) + " bytes but its shape needs " +
                              std::to_string(tensor_spec_bytes(t.spec)));
    }
  }
  KILN_ASSIGN_OR_RETURN(SafetensorsWriter writer, SafetensorsWriter::create(path, std::move(specs), metadata));
  for (const TensorBytes& t : tensors) KILN_RETURN_IF_ERROR(writer.append(t.data));
  return writer.finish();
}

}  // namespace kiln::formats
