#include "ir/tensor.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "base/half.h"

namespace kiln::ir {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

namespace {

constexpr size_t kStorageAlign = 64;

// Storage of `bytes` bytes starting on a cache line, so that the kernels' vector loads of a row
// that starts on one do not straddle two lines; zero-filled when asked. The block comes from the
// ordinary allocator with a line to spare (an aligned allocation takes another path in glibc,
// which faults pages in again on every run of a graph), and the tensor points into it.
std::shared_ptr<std::byte[]> line_aligned_storage(size_t bytes, bool zero) {
  std::shared_ptr<std::byte[]> block = zero ? std::make_shared<std::byte[]>(bytes + kStorageAlign)
                                            : std::make_shared_for_overwrite<std::byte[]>(bytes + kStorageAlign);
  const auto at = reinterpret_cast<uintptr_t>(block.get());
  const size_t skip = (kStorageAlign - at % kStorageAlign) % kStorageAlign;
  return std::shared_ptr<std::byte[]>(block, block.get() + skip);
}

}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)), numel_(shape_numel(shape_)) {
  // One spare element keeps data_ non-null for empty tensors.
  owned_ = line_aligned_storage(byte_size() + dtype_size(dtype_), true);
  data_ = owned_.get();
}

Tensor Tensor::uninitialized(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.owned_ = line_aligned_storage(t.byte_size() + dtype_size(dtype), false);
  t.data_ = t.owned_.get();
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, std::span<const std::byte> bytes) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  KILN_CHECK(bytes.size() == t.byte_size());
  t.data_ = bytes.data();
  return t;
}

std::byte* Tensor::mutable_bytes() {
  KILN_CHECK(owned_ != nullptr);
  return const_cast<std::byte*>(data_);
}

Tensor Tensor::reshaped(Shape shape) const {
  KILN_CHECK(shape_numel(shape) == numel());
  Tensor t = *this;
  t.shape_ = std::move(shape);  // same element count
  return t;
}

namespace {

template <typename T>
T load(const std::byte* p, int64_t i) {
  T v;
  std::memcpy(&v, p + static_cast<size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(std::byte* p, int64_t i, T v) {
  std::memcpy(p + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
}

}  // namespace

double tensor_get_f64(const Tensor& t, int64_t i) {
  const std::byte* p = t.bytes();
  switch (t.dtype()) {
    case DType::kF32: return load<float>(p, i);
    case DType::kF64: return load<double>(p, i);
    case DType::kF16: return fp16_to_float(load<uint16_t>(p, i));
    case DType::kBF16: return bf16_to_float(load<uint16_t>(p, i));
    case DType::kI8: return load<int8_t>(p, i);
    case DType::kU8: return load<uint8_t>(p, i);
    case DType::kI16: return load<int16_t>(p, i);
    case DType::kU16: return load<uint16_t>(p, i);
    case DType::kI32: return load<int32_t>(p, i);
    case DType::kU32: return load<uint32_t>(p, i);
    case DType::kI64: return static_cast<double>(load<int64_t>(p, i));
    case DType::kU64: return static_cast<double>(load<uint64_t>(p, i));
    case DType::kBool: return load<uint8_t>(p, i) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

int64_t tensor_get_i64(const Tensor& t, int64_t i) {
  const std::byte* p = t.bytes();
  switch (t.dtype()) {
    case DType::kI64: return load<int64_t>(p, i);
    case DType::kU64: return static_cast<int64_t>(load<uint64_t>(p, i));
    case DType::kI32: return load<int32_t>(p, i);
    case DType::kU32: return load<uint32_t>(p, i);
    case DType::kI16: return load<int16_t>(p, i);
    case DType::kU16: return load<uint16_t>(p, i);
    case DType::kI8: return load<int8_t>(p, i);
    case DType::kU8: return load<uint8_t>(p, i);
    case DType::kBool: return load<uint8_t>(p, i) != 0 ? 1 : 0;
    default: {
      const double v = tensor_get_f64(t, i);
      // Float to integer as C casts do (towards zero); NaN and out-of-range become 0 / the limit.
      if (!(v == v)) return 0;
      if (v >= 9.2233720368547758e18) return INT64_MAX;
      if (v <= -9.2233720368547758e18) return INT64_MIN;
      return static_cast<int64_t>(v);
    }
  }
}

void tensor_set_f64(Tensor& t, int64_t i, double v) {
  std::byte* p = t.mutable_bytes();
  switch (t.dtype()) {
    case DType::kF32: store<float>(p, i, static_cast<float>(v)); return;
    case DType::kF64: store<double>(p, i, v); return;
    case DType::kF16: store<uint16_t>(p, i, float_to_fp16(static_cast<float>(v))); return;
    case DType::kBF16: store<uint16_t>(p, i, float_to_bf16(static_cast<float>(v))); return;
    case DType::kBool: store<uint8_t>(p, i, v != 0.0 ? 1 : 0); return;
    default: tensor_set_i64(t, i, v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX
                                       : v <= -9.2233720368547758e18 ? INT64_MIN : static_cast<int64_t>(v));
  }
}

void tensor_set_i64(Tensor& t, int64_t i, int64_t v) {
  std::byte* p = t.mutable_bytes();
  switch (t.dtype()) {
    case DType::kI64: store<int64_t>(p, i, v); return;
    case DType::kU64: store<uint64_t>(p, i, static_cast<uint64_t>(v)); return;
    case DType::kI32: store<int32_t>(p, i, static_cast<int32_t>(v)); return;
    case DType::kU32: store<uint32_t>(p, i, static_cast<uint32_t>(v)); return;
    case DType::kI16: store<int16_t>(p, i, static_cast<int16_t>(v)); return;
    case DType::kU16: store<uint16_t>(p, i, static_cast<uint16_t>(v)); return;
    case DType::kI8: store<int8_t>(p, i, static_cast<int8_t>(v)); return;
    case DType::kU8: store<uint8_t>(p, i, static_cast<uint8_t>(v)); return;
    case DType::kBool: store<uint8_t>(p, i, v != 0 ? 1 : 0); return;
    default: tensor_set_f64(t, i, static_cast<double>(v));
  }
}

std::vector<double> tensor_to_f64(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32) {
    const float* p = t.data<float>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = tensor_get_f64(t, static_cast<int64_t>(i));
  return out;
}

std::vector<int64_t> tensor_to_i64(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = tensor_get_i64(t, static_cast<int64_t>(i));
  return out;
}

WeightEntry weight_entry_from_tensor(const Tensor& t) {
  WeightEntry entry;
  entry.shape = t.shape();
  entry.dtype = t.dtype();
  if (t.dtype() == DType::kF32) {
    entry.load = [t]() -> Expected<std::vector<float>> {
      return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    };
  } else {
    entry.load_bytes = [t]() -> Expected<std::vector<std::byte>> {
      return std::vector<std::byte>(t.bytes(), t.bytes() + t.byte_size());
    };
  }
  return entry;
}

}  // namespace kiln::ir
