// ONNX's recurrent ops, in double, one (direction, batch row) sequence at a time:
//   LSTM: X, W [dirs, 4H, I], R [dirs, 4H, H], B [dirs, 8H], sequence_lens [batch], initial_h,
//         initial_c [dirs, batch, H], P [dirs, 3H] -> Y [seq, dirs, batch, H], Y_h, Y_c [dirs, batch, H]
//         gates in the order i, o, f, c (P: i, o, f); input_forget couples f = 1 - i.
//   GRU:  W [dirs, 3H, I], R [dirs, 3H, H], B [dirs, 6H], ... -> Y, Y_h; gates z, r, h;
//         linear_before_reset applies r after the recurrent product (and its bias).
//   RNN:  W [dirs, H, I], R [dirs, H, H], B [dirs, 2H], ... -> Y, Y_h.
// X is [seq, batch, I] (layout 0) or [batch, seq, I] (layout 1, and then Y is [batch, seq, dirs, H]
// and the states [batch, dirs, H]). A reverse direction reads each row's sequence from its own
// last step (sequence_lens); steps past a row's length leave Y zero and its state as it was.
// `clip` bounds every activation's input. Activations and their alpha / beta follow the
// translator's complete lists (formats/onnx/onnx_ops_recurrent.cpp).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

struct Activation {
  std::string name;
  double alpha = 0.0, beta = 0.0;

  double operator()(double x) const {
    if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "Tanh") return std::tanh(x);
    if (name == "Relu") return std::max(x, 0.0);
    if (name == "Affine") return alpha * x + beta;
    if (name == "LeakyRelu") return x >= 0.0 ? x : alpha * x;
    if (name == "ThresholdedRelu") return x > alpha ? x : 0.0;
    if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
    if (name == "HardSigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
    if (name == "Elu") return x >= 0.0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "Softsign") return x / (1.0 + std::fabs(x));
    return std::log1p(std::exp(x));  // Softplus
  }
};

// ONNX's defaults for the parameters an activation takes, and which of them it takes.
struct Params {
  bool alpha, beta;
  double default_alpha, default_beta;
};

Params params_of(const std::string& name) {
  if (name == "LeakyRelu") return {true, false, 0.01, 0.0};
  if (name == "HardSigmoid") return {true, true, 0.2, 0.5};
  if (name == "Affine") return {true, true, 1.0, 0.0};
  if (name == "ScaledTanh") return {true, true, 1.0, 1.0};
  if (name == "ThresholdedRelu" || name == "Elu") return {true, false, 1.0, 0.0};
  return {false, false, 0.0, 0.0};
}

// activation_alpha and activation_beta are consumed in order by the activations that take them
// (as ONNX Runtime reads them): [Sigmoid, LeakyRelu, ScaledTanh] with alpha [0.2, 0.7] gives
// LeakyRelu 0.2 and ScaledTanh 0.7.
std::vector<Activation> activations(const ir::Node& n) {
  std::vector<Activation> out;
  std::stringstream in(n.attr_str("activations"));
  const std::vector<double> alpha = n.attr_floats("activation_alpha"), beta = n.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (std::string name; std::getline(in, name, ',');) {
    const Params p = params_of(name);
    Activation a{name, p.default_alpha, p.default_beta};
    if (p.alpha && next_alpha < alpha.size()) a.alpha = alpha[next_alpha++];
    if (p.beta && next_beta < beta.size()) a.beta = beta[next_beta++];
    out.push_back(a);
  }
  return out;
}

const Tensor* optional(const TensorInputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

Status recurrent(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const std::string& op = n.op;
  const int64_t G = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const int64_t H = n.attr_int("hidden_size", 0), layout = n.attr_int("layout", 0);
  const std::string direction = n.attr_str("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const Tensor &x = *in[0], &w = *in[1], &r = *in[2];
  if (x.rank() != 3) return tensor_error(n, "X must be 3-D, got " + ir::shape_to_string(x.shape()));
  const int64_t seq = x.shape()[layout == 0 ? 0 : 1], batch = x.shape()[layout == 0 ? 1 : 0], I = x.shape()[2];
  if (w.shape() != Shape{dirs, G * H, I}) {
    return tensor_error(n, "W must be " + ir::shape_to_string({dirs, G * H, I}) + ", got " + ir::shape_to_string(w.shape()));
  }
  if (r.shape() != Shape{dirs, G * H, H}) {
    return tensor_error(n, "R must be " + ir::shape_to_string({dirs, G * H, H}) + ", got " + ir::shape_to_string(r.shape()));
  }
  const Tensor *b = optional(in, 3), *lens = optional(in, 4), *h0 = optional(in, 5);
  const Tensor* c0 = op == "LSTM" ? optional(in, 6) : nullptr;
  const Tensor* p = op == "LSTM" ? optional(in, 7) : nullptr;
  const Shape state = layout == 0 ? Shape{dirs, batch, H} : Shape{batch, dirs, H};
  if (b != nullptr && b->shape() != Shape{dirs, 2 * G * H}) return tensor_error(n, "B must be " + ir::shape_to_string({dirs, 2 * G * H}));
  if (lens != nullptr && lens->numel() != batch) return tensor_error(n, "sequence_lens must have one entry a batch row");
  if (h0 != nullptr && h0->shape() != state) return tensor_error(n, "initial_h must be " + ir::shape_to_string(state));
  if (c0 != nullptr && c0->shape() != state) return tensor_error(n, "initial_c must be " + ir::shape_to_string(state));
  if (p != nullptr && p->shape() != Shape{dirs, 3 * H}) return tensor_error(n, "P must be " + ir::shape_to_string({dirs, 3 * H}));
  const std::vector<Activation> fns = activations(n);
  if (static_cast<int64_t>(fns.size()) != dirs * (G == 4 ? 3 : G == 3 ? 2 : 1)) return tensor_error(n, "activations do not match the direction");
  const double clip = n.attr_float("clip", 0.0);
  const auto clipped = [clip](double v) { return clip > 0.0 ? std::clamp(v, -clip, clip) : v; };
  const bool input_forget = n.attr_int("input_forget", 0) != 0, lbr = n.attr_int("linear_before_reset", 0) != 0;

  const std::vector<double> xv = ir::tensor_to_f64(x), wv = ir::tensor_to_f64(w), rv = ir::tensor_to_f64(r);
  const std::vector<double> bv = b ? ir::tensor_to_f64(*b) : std::vector<double>(static_cast<size_t>(dirs * 2 * G * H), 0.0);
  const std::vector<double> pv = p ? ir::tensor_to_f64(*p) : std::vector<double>(static_cast<size_t>(dirs * 3 * H), 0.0);
  const Shape y_shape = layout == 0 ? Shape{seq, dirs, batch, H} : Shape{batch, seq, dirs, H};
  std::vector<double> y(static_cast<size_t>(ir::shape_numel(y_shape)), 0.0);
  std::vector<double> yh(static_cast<size_t>(dirs * batch * H), 0.0), yc(yh.size(), 0.0);
  // Offsets of X[t, row], Y[t, d, row] and a state's [d, row] in the layout.
  const auto x_at = [&](int64_t t, int64_t row) { return layout == 0 ? (t * batch + row) * I : (row * seq + t) * I; };
  const auto y_at = [&](int64_t t, int64_t d, int64_t row) {
    return layout == 0 ? ((t * dirs + d) * batch + row) * H : ((row * seq + t) * dirs + d) * H;
  };
  const auto s_at = [&](int64_t d, int64_t row) { return layout == 0 ? (d * batch + row) * H : (row * dirs + d) * H; };

  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), gates(static_cast<size_t>(G * H)),
      rec(static_cast<size_t>(G * H)), rh(static_cast<size_t>(H));
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const double* W = wv.data() + d * G * H * I;
    const double* R = rv.data() + d * G * H * H;
    const double* Wb = bv.data() + d * 2 * G * H;
    const double* Rb = Wb + G * H;
    const double* P = pv.data() + d * 3 * H;
    const Activation* f = fns.data() + d * (G == 4 ? 3 : G == 3 ? 2 : 1);
    for (int64_t row = 0; row < batch; ++row) {
      const int64_t len = lens != nullptr ? std::clamp<int64_t>(ir::tensor_get_i64(*lens, row), 0, seq) : seq;
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = h0 != nullptr ? ir::tensor_get_f64(*h0, s_at(d, row) + j) : 0.0;
        c[static_cast<size_t>(j)] = c0 != nullptr ? ir::tensor_get_f64(*c0, s_at(d, row) + j) : 0.0;
      }
      for (int64_t k = 0; k < len; ++k) {
        const int64_t t = reverse ? len - 1 - k : k;
        const double* xt = xv.data() + x_at(t, row);
        for (int64_t g = 0; g < G * H; ++g) {
          double s = Wb[g], q = Rb[g];
          for (int64_t i = 0; i < I; ++i) s += xt[i] * W[g * I + i];
          for (int64_t i = 0; i < H; ++i) q += h[static_cast<size_t>(i)] * R[g * H + i];
          gates[static_cast<size_t>(g)] = s;
          rec[static_cast<size_t>(g)] = q;
        }
        if (G == 4) {
          for (int64_t j = 0; j < H; ++j) {
            const auto at = [&](int64_t gate) { return gates[static_cast<size_t>(gate * H + j)] + rec[static_cast<size_t>(gate * H + j)]; };
            const double cp = c[static_cast<size_t>(j)];
            const double ig = f[0](clipped(at(0) + P[j] * cp));
            const double fg = input_forget ? 1.0 - ig : f[0](clipped(at(2) + P[2 * H + j] * cp));
            const double cand = f[1](clipped(at(3)));
            const double cn = fg * cp + ig * cand;
            const double og = f[0](clipped(at(1) + P[H + j] * cn));
            c[static_cast<size_t>(j)] = cn;
            h[static_cast<size_t>(j)] = og * f[2](cn);
          }
        } else if (G == 3) {
          for (int64_t j = 0; j < H; ++j) {
            const size_t z = static_cast<size_t>(j), rr = static_cast<size_t>(H + j);
            gates[z] = f[0](clipped(gates[z] + rec[z]));
            gates[rr] = f[0](clipped(gates[rr] + rec[rr]));
          }
          if (!lbr) {
            // (r * h) R_h^T + Rb_h
            for (int64_t j = 0; j < H; ++j) rh[static_cast<size_t>(j)] = gates[static_cast<size_t>(H + j)] * h[static_cast<size_t>(j)];
            for (int64_t j = 0; j < H; ++j) {
              double q = Rb[2 * H + j];
              for (int64_t i = 0; i < H; ++i) q += rh[static_cast<size_t>(i)] * R[(2 * H + j) * H + i];
              rec[static_cast<size_t>(2 * H + j)] = q;
            }
          }
          for (int64_t j = 0; j < H; ++j) {
            const double rg = gates[static_cast<size_t>(H + j)], recur = rec[static_cast<size_t>(2 * H + j)];
            const double cand = f[1](clipped(gates[static_cast<size_t>(2 * H + j)] + (lbr ? rg * recur : recur)));
            const double z = gates[static_cast<size_t>(j)];
            h[static_cast<size_t>(j)] = (1.0 - z) * cand + z * h[static_cast<size_t>(j)];
          }
        } else {
          for (int64_t j = 0; j < H; ++j) h[static_cast<size_t>(j)] = f[0](clipped(gates[static_cast<size_t>(j)] + rec[static_cast<size_t>(j)]));
        }
        std::copy(h.begin(), h.end(), y.begin() + y_at(t, d, row));
      }
      std::copy(h.begin(), h.end(), yh.begin() + s_at(d, row));
      std::copy(c.begin(), c.end(), yc.begin() + s_at(d, row));
    }
  }
  const auto make = [&](const Shape& shape, const std::vector<double>& v) {
    Tensor t(x.dtype(), shape);
    for (size_t i = 0; i < v.size(); ++i) ir::tensor_set_f64(t, static_cast<int64_t>(i), v[i]);
    return t;
  };
  if (!out.empty()) out[0] = make(y_shape, y);
  if (out.size() > 1) out[1] = make(state, yh);
  if (out.size() > 2) out[2] = make(state, yc);
  return Status::ok();
}

}  // namespace

void register_tensor_recurrent_kernels(TensorKernelTable& table) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) table[op] = recurrent;
}

}  // namespace kiln::cpu
