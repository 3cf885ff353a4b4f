// Elementwise tensor kernels: unary math and activations, broadcasting binary and variadic ops,
// comparisons and logic, Where, Clip, Cast / CastLike.
//   unary:   y[i] = f(x[i])                     y: shape of x
//   binary:  y[i] = f(a[bcast_a(i)], b[bcast_b(i)])   y: NumPy broadcast of a and b
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Tensor;

double attr(const ir::Node& n, const char* key, double fallback) { return n.attr_float(key, fallback); }

using UnaryFn = std::function<double(double)>;

// The op's function of one element, looked up once a node (its attributes read then, too).
Expected<UnaryFn> unary_fn(const ir::Node& n) {
  const std::string& op = n.op;
  if (op == "Abs") return UnaryFn([](double x) { return std::fabs(x); });
  if (op == "Neg") return UnaryFn([](double x) { return -x; });
  if (op == "Exp") return UnaryFn([](double x) { return std::exp(x); });
  if (op == "Log") return UnaryFn([](double x) { return std::log(x); });
  if (op == "Sqrt") return UnaryFn([](double x) { return std::sqrt(x); });
  if (op == "Reciprocal") return UnaryFn([](double x) { return 1.0 / x; });
  if (op == "Floor") return UnaryFn([](double x) { return std::floor(x); });
  if (op == "Ceil") return UnaryFn([](double x) { return std::ceil(x); });
  if (op == "Round") return UnaryFn([](double x) { return std::nearbyint(x); });
  if (op == "Sign") return UnaryFn([](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; });
  if (op == "Sin") return UnaryFn([](double x) { return std::sin(x); });
  if (op == "Cos") return UnaryFn([](double x) { return std::cos(x); });
  if (op == "Tan") return UnaryFn([](double x) { return std::tan(x); });
  if (op == "Asin") return UnaryFn([](double x) { return std::asin(x); });
  if (op == "Acos") return UnaryFn([](double x) { return std::acos(x); });
  if (op == "Atan") return UnaryFn([](double x) { return std::atan(x); });
  if (op == "Sinh") return UnaryFn([](double x) { return std::sinh(x); });
  if (op == "Cosh") return UnaryFn([](double x) { return std::cosh(x); });
  if (op == "Tanh") return UnaryFn([](double x) { return std::tanh(x); });
  if (op == "Asinh") return UnaryFn([](double x) { return std::asinh(x); });
  if (op == "Acosh") return UnaryFn([](double x) { return std::acosh(x); });
  if (op == "Atanh") return UnaryFn([](double x) { return std::atanh(x); });
  if (op == "Erf") return UnaryFn([](double x) { return std::erf(x); });
  if (op == "Sigmoid") return UnaryFn([](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  if (op == "Relu") return UnaryFn([](double x) { return x > 0 ? x : 0.0; });
  if (op == "Softplus") return UnaryFn([](double x) { return x > 30 ? x : std::log1p(std::exp(x)); });
  if (op == "Softsign") return UnaryFn([](double x) { return x / (1.0 + std::fabs(x)); });
  if (op == "Elu") {
    const double a = attr(n, "alpha", 1.0);
    return UnaryFn([a](double x) { return x >= 0 ? x : a * (std::exp(x) - 1.0); });
  }
  if (op == "Selu") {
    const double a = attr(n, "alpha", 1.67326319217681884765625), g = attr(n, "gamma", 1.05070102214813232421875);
    return UnaryFn([a, g](double x) { return x > 0 ? g * x : g * a * (std::exp(x) - 1.0); });
  }
  if (op == "Celu") {
    const double a = attr(n, "alpha", 1.0);
    return UnaryFn([a](double x) { return std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1.0)); });
  }
  if (op == "LeakyRelu") {
    const double a = attr(n, "alpha", 0.01);
    return UnaryFn([a](double x) { return x >= 0 ? x : a * x; });
  }
  if (op == "HardSigmoid") {
    const double a = attr(n, "alpha", 0.2), b = attr(n, "beta", 0.5);
    return UnaryFn([a, b](double x) { return std::clamp(a * x + b, 0.0, 1.0); });
  }
  if (op == "HardSwish") return UnaryFn([](double x) { return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0); });
  if (op == "Gelu") {
    if (n.attr_str("approximate", "none") == "tanh") {
      return UnaryFn([](double x) {
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      });
    }
    return UnaryFn([](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); });
  }
  if (op == "ThresholdedRelu") {
    const double a = attr(n, "alpha", 1.0);
    return UnaryFn([a](double x) { return x > a ? x : 0.0; });
  }
  if (op == "Shrink") {
    const double l = attr(n, "lambd", 0.5), b = attr(n, "bias", 0.0);
    return UnaryFn([l, b](double x) { return x < -l ? x + b : x > l ? x - b : 0.0; });
  }
  return tensor_error(n, "not a unary op");
}

Status unary(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (n.op == "Abs" || n.op == "Neg" || n.op == "Sign") {
    if (!ir::dtype_is_float(x.dtype())) {  // exact integer paths
      Tensor y(x.dtype(), x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t v = ir::tensor_get_i64(x, i);
        ir::tensor_set_i64(y, i, n.op == "Abs" ? (v < 0 ? -v : v) : n.op == "Neg" ? -v : (v > 0) - (v < 0));
      }
      out[0] = std::move(y);
      return Status::ok();
    }
  }
  KILN_ASSIGN_OR_RETURN(const UnaryFn f, unary_fn(n));
  Tensor y(x.dtype(), x.shape());
  if (x.dtype() == DType::kF32) {  // f64 arithmetic rounded to f32, as tensor_set_f64 does
    const float* xp = x.data<float>();
    float* yp = y.mutable_data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(f(static_cast<double>(xp[i])));
  } else {
    for (int64_t i = 0; i < x.numel(); ++i) ir::tensor_set_f64(y, i, f(ir::tensor_get_f64(x, i)));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status identity(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  out[0] = *in[0];
  if (n.op == "Dropout" && out.size() > 1) {
    Tensor mask(DType::kBool, in[0]->shape());
    for (int64_t i = 0; i < mask.numel(); ++i) mask.mutable_data<uint8_t>()[i] = 1;
    out[1] = std::move(mask);
  }
  if (n.op == "Dropout" && in.size() > 2 && in[2] != nullptr && ir::tensor_get_i64(*in[2], 0) != 0) {
    return tensor_error(n, "training mode is not supported");
  }
  return Status::ok();
}

Status predicate(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  Tensor y(DType::kBool, x.shape());
  const bool neg = n.attr_int("detect_negative", 1) != 0, pos = n.attr_int("detect_positive", 1) != 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = ir::tensor_get_f64(x, i);
    bool r;
    if (n.op == "IsNaN") {
      r = std::isnan(v);
    } else if (n.op == "IsInf") {
      r = std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    } else {  // Not
      r = v == 0.0;
    }
    y.mutable_data<uint8_t>()[i] = r ? 1 : 0;
  }
  out[0] = std::move(y);
  return Status::ok();
}

enum class Kind { kArith, kCompare, kLogic };

Kind kind_of(const std::string& op) {
  if (op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual") {
    return Kind::kCompare;
  }
  if (op == "And" || op == "Or" || op == "Xor") return Kind::kLogic;
  return Kind::kArith;
}

double float_binary(const ir::Node& n, double a, double b) {
  const std::string& op = n.op;
  if (op == "Add" || op == "Sum" || op == "Mean") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  if (op == "Pow") return std::pow(a, b);
  if (op == "Max") return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
  if (op == "Min") return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
  if (op == "Mod") {
    const double r = std::fmod(a, b);
    if (n.attr_int("fmod", 0) != 0) return r;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  if (op == "PRelu") return a < 0 ? a * b : a;
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "Greater") return a > b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "And") return (a != 0) && (b != 0);
  if (op == "Or") return (a != 0) || (b != 0);
  if (op == "Xor") return (a != 0) != (b != 0);
  return 0.0;
}

int64_t int_binary(const ir::Node& n, int64_t a, int64_t b, bool is_unsigned) {
  const std::string& op = n.op;
  if (op == "Add" || op == "Sum" || op == "Mean") return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  if (op == "Sub") return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  if (op == "Mul") return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  if (op == "Div") {
    if (b == 0) return 0;
    return is_unsigned ? static_cast<int64_t>(static_cast<uint64_t>(a) / static_cast<uint64_t>(b)) : a / b;
  }
  if (op == "Pow") {
    int64_t r = 1;
    for (int64_t i = 0; i < b; ++i) r *= a;
    return r;
  }
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Mod") {
    if (b == 0) return 0;
    const int64_t r = a % b;
    if (n.attr_int("fmod", 0) != 0) return r;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  if (op == "BitShift") {
    const auto ua = static_cast<uint64_t>(a);
    if (b >= 64) return 0;
    return static_cast<int64_t>(n.attr_str("direction") == "LEFT" ? ua << b : ua >> b);
  }
  if (op == "PRelu") return a < 0 ? a * b : a;
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "Greater") return a > b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "And") return (a != 0) && (b != 0);
  if (op == "Or") return (a != 0) || (b != 0);
  if (op == "Xor") return (a != 0) != (b != 0);
  return 0;
}

bool is_unsigned(DType d) { return d == DType::kU8 || d == DType::kU16 || d == DType::kU32 || d == DType::kU64; }

// y = op(full, part) where `full` has y's shape and `part` broadcasts to it (its dims, aligned
// right, equal y's or are 1). y is cut at the longest run of innermost dims over which `part` is
// either laid out as y is or one value; each block of that run is one vectorisable loop, and
// `part`'s offset is found once per block. Per-channel ([1, C, 1, 1]) and per-feature ([D])
// operands are single blocks of H x W or D elements.
template <typename Op>
void f32_broadcast_blocks(const float* full, const float* part, const ir::Shape& part_shape, const ir::Shape& shape,
                          float* py, Op op) {
  const size_t r = shape.size();
  std::vector<int64_t> pd(r, 1);
  for (size_t i = 0; i < part_shape.size(); ++i) pd[r - part_shape.size() + i] = part_shape[i];
  size_t s = r;
  bool same = true, one = true;
  while (s > 0) {
    const size_t d = s - 1;
    const bool eq = pd[d] == shape[d], unit = pd[d] == 1;
    if (!((same && eq) || (one && unit))) break;
    same = same && eq;
    one = one && unit;
    --s;
  }
  int64_t inner = 1;
  for (size_t d = s; d < r; ++d) inner *= shape[d];
  int64_t outer = 1;
  for (size_t d = 0; d < s; ++d) outer *= shape[d];
  // part's stride in each outer dim (0 where it broadcasts).
  std::vector<int64_t> stride(s, 0);
  int64_t step = same ? inner : 1;
  for (size_t d = s; d-- > 0;) {
    stride[d] = pd[d] == 1 ? 0 : step;
    step *= pd[d];
  }
  parallel_for(0, outer, outer * inner > (1 << 16) && outer > 1, [&](int64_t o) {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(s) - 1, rest = o; d >= 0; --d) {
      off += (rest % shape[static_cast<size_t>(d)]) * stride[static_cast<size_t>(d)];
      rest /= shape[static_cast<size_t>(d)];
    }
    const float* fo = full + o * inner;
    float* yo = py + o * inner;
    if (same) {
      const float* po = part + off;
      for (int64_t i = 0; i < inner; ++i) yo[i] = op(fo[i], po[i]);
    } else {
      const float v = part[off];
      for (int64_t i = 0; i < inner; ++i) yo[i] = op(fo[i], v);
    }
  });
}

// y = op(a, b) in f32 for the four arithmetic ops real models are full of; false for other ops.
// Broadcasting: equal shapes, one side broadcast to the other's shape (in blocks), or
// per-element offsets when both sides broadcast.
template <typename Op>
void f32_binary(const Tensor& a, const Tensor& b, Tensor& y, Op op) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.mutable_data<float>();
  const int64_t count = y.numel();
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
    parallel_for(0, count, count > (1 << 16), [&](int64_t i) { py[i] = op(pa[i], pb[i]); });
  } else if (a.shape() == y.shape() && b.numel() == 1) {
    const float s = pb[0];
    for (int64_t i = 0; i < count; ++i) py[i] = op(pa[i], s);
  } else if (b.shape() == y.shape() && a.numel() == 1) {
    const float s = pa[0];
    for (int64_t i = 0; i < count; ++i) py[i] = op(s, pb[i]);
  } else if (a.shape() == y.shape() && count > 0) {
    f32_broadcast_blocks(pa, pb, b.shape(), y.shape(), py, op);
  } else if (b.shape() == y.shape() && count > 0) {
    f32_broadcast_blocks(pb, pa, a.shape(), y.shape(), py, [op](float full, float part) { return op(part, full); });
  } else {
    const std::vector<int64_t> oa = tensor_broadcast_offsets(a.shape(), y.shape());
    const std::vector<int64_t> ob = tensor_broadcast_offsets(b.shape(), y.shape());
    for (int64_t i = 0; i < count; ++i) py[i] = op(pa[oa[static_cast<size_t>(i)]], pb[ob[static_cast<size_t>(i)]]);
  }
}

bool f32_arith(const std::string& op, const Tensor& a, const Tensor& b, Tensor& y) {
  if (op == "Add") f32_binary(a, b, y, [](float u, float v) { return u + v; });
  else if (op == "Sub") f32_binary(a, b, y, [](float u, float v) { return u - v; });
  else if (op == "Mul") f32_binary(a, b, y, [](float u, float v) { return u * v; });
  else if (op == "Div") f32_binary(a, b, y, [](float u, float v) { return u / v; });
  else return false;
  return true;
}

// y = op(a, b) with broadcasting; `result` is the output dtype.
Expected<Tensor> broadcast_binary(const ir::Node& n, const Tensor& a, const Tensor& b, DType result) {
  if (n.op != "Pow" && n.op != "PRelu" && kind_of(n.op) != Kind::kLogic && a.dtype() != b.dtype()) {
    return tensor_error(n, "input dtypes " + std::string(ir::dtype_name(a.dtype())) + " and " +
                               std::string(ir::dtype_name(b.dtype())) + " differ");
  }
  KILN_ASSIGN_OR_RETURN(ir::Shape shape, tensor_broadcast_shape(n, {a.shape(), b.shape()}));
  Tensor y = Tensor::uninitialized(result, shape);  // every path below writes every element
  const int64_t count = y.numel();
  if (a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && result == DType::kF32 && f32_arith(n.op, a, b, y)) {
    return y;
  }
  if (a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && result == DType::kF32 && a.shape() == b.shape()) {
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.mutable_data<float>();
    for (int64_t i = 0; i < count; ++i) py[i] = static_cast<float>(float_binary(n, pa[i], pb[i]));
    return y;
  }
  const std::vector<int64_t> oa = tensor_broadcast_offsets(a.shape(), shape);
  const std::vector<int64_t> ob = tensor_broadcast_offsets(b.shape(), shape);
  if (a.dtype() == DType::kBool && b.dtype() == DType::kBool && kind_of(n.op) == Kind::kLogic) {
    // Attention masks: the op resolved once, not per element.
    const auto* pa = a.data<uint8_t>();
    const auto* pb = b.data<uint8_t>();
    auto* py = y.mutable_data<uint8_t>();
    const int which = n.op == "And" ? 0 : n.op == "Or" ? 1 : 2;
    for (int64_t i = 0; i < count; ++i) {
      const bool u = pa[oa[static_cast<size_t>(i)]] != 0, v = pb[ob[static_cast<size_t>(i)]] != 0;
      py[i] = static_cast<uint8_t>(which == 0 ? u && v : which == 1 ? u || v : u != v);
    }
    return y;
  }
  const bool use_float = ir::dtype_is_float(a.dtype()) || ir::dtype_is_float(b.dtype());
  const bool uns = is_unsigned(a.dtype());
  for (int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<size_t>(i);
    if (use_float) {
      ir::tensor_set_f64(y, i, float_binary(n, ir::tensor_get_f64(a, oa[k]), ir::tensor_get_f64(b, ob[k])));
    } else {
      ir::tensor_set_i64(y, i, int_binary(n, ir::tensor_get_i64(a, oa[k]), ir::tensor_get_i64(b, ob[k]), uns));
    }
  }
  return y;
}

Status binary(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const DType result = kind_of(n.op) == Kind::kArith ? in[0]->dtype() : DType::kBool;
  KILN_ASSIGN_OR_RETURN(out[0], broadcast_binary(n, *in[0], *in[1], result));
  return Status::ok();
}

Status variadic(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  Tensor acc = *in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(acc, broadcast_binary(n, acc, *in[i], in[0]->dtype()));
  }
  if (n.op == "Mean") {
    Tensor y(acc.dtype(), acc.shape());
    for (int64_t i = 0; i < y.numel(); ++i) {
      ir::tensor_set_f64(y, i, ir::tensor_get_f64(acc, i) / static_cast<double>(in.size()));
    }
    acc = std::move(y);
  } else if (in.size() == 1) {
    Tensor y(acc.dtype(), acc.shape());
    if (y.byte_size()) std::copy(acc.bytes(), acc.bytes() + acc.byte_size(), y.mutable_bytes());
    acc = std::move(y);
  }
  out[0] = std::move(acc);
  return Status::ok();
}

Status where(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &c = *in[0], &a = *in[1], &b = *in[2];
  if (a.dtype() != b.dtype()) return tensor_error(n, "X and Y dtypes differ");
  KILN_ASSIGN_OR_RETURN(ir::Shape shape, tensor_broadcast_shape(n, {c.shape(), a.shape(), b.shape()}));
  Tensor y(a.dtype(), shape);
  const auto oc = tensor_broadcast_offsets(c.shape(), shape), oa = tensor_broadcast_offsets(a.shape(), shape),
             ob = tensor_broadcast_offsets(b.shape(), shape);
  const size_t es = ir::dtype_size(a.dtype());
  for (int64_t i = 0; i < y.numel(); ++i) {
    const auto k = static_cast<size_t>(i);
    const bool take_a = ir::tensor_get_i64(c, oc[k]) != 0;
    const std::byte* src = take_a ? a.bytes() + static_cast<size_t>(oa[k]) * es : b.bytes() + static_cast<size_t>(ob[k]) * es;
    std::copy(src, src + es, y.mutable_bytes() + k * es);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status clip(const ir::Node& /*n*/, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  Tensor y(x.dtype(), x.shape());
  if (ir::dtype_is_float(x.dtype())) {
    const double lo = in.size() > 1 && in[1] ? ir::tensor_get_f64(*in[1], 0) : -std::numeric_limits<double>::infinity();
    const double hi = in.size() > 2 && in[2] ? ir::tensor_get_f64(*in[2], 0) : std::numeric_limits<double>::infinity();
    if (x.dtype() == DType::kF32) {
      const float* xp = x.data<float>();
      float* yp = y.mutable_data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(std::min(std::max(double(xp[i]), lo), hi));
    } else {
      for (int64_t i = 0; i < x.numel(); ++i) ir::tensor_set_f64(y, i, std::min(std::max(ir::tensor_get_f64(x, i), lo), hi));
    }
  } else {
    const int64_t lo = in.size() > 1 && in[1] ? ir::tensor_get_i64(*in[1], 0) : INT64_MIN;
    const int64_t hi = in.size() > 2 && in[2] ? ir::tensor_get_i64(*in[2], 0) : INT64_MAX;
    for (int64_t i = 0; i < x.numel(); ++i) ir::tensor_set_i64(y, i, std::min(std::max(ir::tensor_get_i64(x, i), lo), hi));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status cast_to(const Tensor& x, DType to, Tensor& y) {
  y = Tensor(to, x.shape());
  const bool float_src = ir::dtype_is_float(x.dtype());
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (float_src) {
      ir::tensor_set_f64(y, i, ir::tensor_get_f64(x, i));
    } else if (ir::dtype_is_float(to)) {
      ir::tensor_set_f64(y, i, x.dtype() == DType::kU64 ? static_cast<double>(static_cast<uint64_t>(ir::tensor_get_i64(x, i)))
                                                         : static_cast<double>(ir::tensor_get_i64(x, i)));
    } else {
      ir::tensor_set_i64(y, i, ir::tensor_get_i64(x, i));
    }
  }
  return Status::ok();
}

Status cast(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  std::optional<DType> to = n.op == "CastLike" ? std::optional<DType>(in[1]->dtype()) : ir::dtype_from_name(n.attr_str("to"));
  if (!to) return tensor_error(n, "unknown target dtype '" + n.attr_str("to") + "'");
  return cast_to(*in[0], *to, out[0]);
}

}  // namespace

void register_tensor_elementwise_kernels(TensorKernelTable& table) {
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin",
                         "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh",
                         "Erf", "Sigmoid", "Relu", "Softplus", "Softsign", "Elu", "Selu", "Celu", "LeakyRelu",
                         "HardSigmoid", "HardSwish", "Gelu", "ThresholdedRelu", "Shrink"}) {
    table[op] = unary;
  }
  table["Identity"] = identity;
  table["Dropout"] = identity;
  for (const char* op : {"IsNaN", "IsInf", "Not"}) table[op] = predicate;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "PRelu", "Equal", "Less",
                         "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}) {
    table[op] = binary;
  }
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) table[op] = variadic;
  table["Where"] = where;
  table["Clip"] = clip;
  table["Cast"] = cast;
  table["CastLike"] = cast;
}

}  // namespace kiln::cpu
