// Every registered matmul kernel against a double-precision reference that multiplies by the
// dequantised weights (ir::weight_dequantize_row_at), over odd sizes, with and without bias.
//
// Tolerances, per output element y[i, j], with mag = sum_t |x[i, t] * w[j, t]| + |bias[j]|:
//   float-exact kernels (scalar, RxC, dq.RxC): |y - ref| <= 1e-5 * mag. Float sums of k terms
//     in a few independent accumulators stay near sqrt(k) * 2^-24 * mag (about 4e-6 * mag at
//     k = 5125); a single dropped or doubled term (about mag / k) is far above the bound.
//   bf16 dot-product kernels round each activation to bf16 (8 significant bits), which moves
//     the output by at most 2^-8 * mag; the test adds that (plus 1%) to the float term.
//   q8dot kernels (and integer panel kernels) also round the activations: each block of 32 is stored as d * q with
//     d = max|x| / 127, so |x - d * q| <= d / 2 = max|x_block| / 254 per element, and the
//     output moves by at most sum_blocks (max|x_block| / 254) * sum_{t in block} |w[j, t]|
//     (about 0.4% of mag for uniform data). The test computes that bound exactly, adds 1% for
//     the rounding of 1 / d, then adds the float term above.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/quantize_activations.h"
#include "base/half.h"
#include "ir/weight_format.h"

namespace kiln::cpu {
namespace {

using ir::WeightFormat;

constexpr WeightFormat kAllFormats[] = {WeightFormat::kF32,        WeightFormat::kF16,        WeightFormat::kBF16,
                                        WeightFormat::kI8Channel,  WeightFormat::kI8Group32,  WeightFormat::kI8Group128,
                                        WeightFormat::kI4Group32,  WeightFormat::kI4Group128,
                                        WeightFormat::kF16Panel8,  WeightFormat::kBF16Panel8,
                                        WeightFormat::kI8ChannelPanel8, WeightFormat::kI4Group32Panel8,
                                        WeightFormat::kF8E4M3};

std::vector<float> random_vector(size_t size, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(size);
  for (float& f : v) f = dist(rng);
  return v;
}

// One problem: inputs, stored weights, and the reference with its error bounds.
struct Case {
  int64_t m = 0, k = 0, n = 0;
  std::vector<float> x;          // [m, k]
  std::vector<std::byte> w;      // [n, k] stored
  std::vector<float> bias;       // [n]
  std::vector<double> ref;       // [m, n], without bias
  std::vector<double> mag;       // [m, n]: sum |x * w|
  std::vector<double> q8_bound;  // [m, n]: activation-rounding bound
};

std::unique_ptr<Case> make_case(WeightFormat format, int64_t m, int64_t k, int64_t n, uint32_t seed) {
  auto c = std::make_unique<Case>();
  c->m = m;
  c->k = k;
  c->n = n;
  c->x = random_vector(static_cast<size_t>(m * k), seed);
  const std::vector<float> wf = random_vector(static_cast<size_t>(n * k), seed + 1);
  c->bias = random_vector(static_cast<size_t>(n), seed + 2);
  c->w.resize(static_cast<size_t>(n) * ir::weight_format_row_bytes(format, k));
  ir::weight_quantize(format, wf.data(), n, k, c->w.data());
  std::vector<float> wd(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) ir::weight_dequantize_row_at(format, c->w.data(), n, k, j, wd.data() + j * k);
  const int64_t blocks = (k + kQ8Block - 1) / kQ8Block;
  std::vector<double> xmax(static_cast<size_t>(m * blocks), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t t = 0; t < k; ++t) {
      double& v = xmax[static_cast<size_t>(i * blocks + t / kQ8Block)];
      v = std::max(v, std::fabs(static_cast<double>(c->x[static_cast<size_t>(i * k + t)])));
    }
  }
  c->ref.assign(static_cast<size_t>(m * n), 0.0);
  c->mag.assign(static_cast<size_t>(m * n), 0.0);
  c->q8_bound.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = c->x.data() + i * k;
    for (int64_t j = 0; j < n; ++j) {
      const float* wj = wd.data() + j * k;
      double s = 0.0, mg = 0.0, qb = 0.0, wblock = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        const double p = static_cast<double>(xi[t]) * static_cast<double>(wj[t]);
        s += p;
        mg += std::fabs(p);
        wblock += std::fabs(static_cast<double>(wj[t]));
        if ((t + 1) % kQ8Block == 0 || t + 1 == k) {
          qb += xmax[static_cast<size_t>(i * blocks + t / kQ8Block)] / 254.0 * wblock;
          wblock = 0.0;
        }
      }
      c->ref[static_cast<size_t>(i * n + j)] = s;
      c->mag[static_cast<size_t>(i * n + j)] = mg;
      c->q8_bound[static_cast<size_t>(i * n + j)] = qb;
    }
  }
  return c;
}

// Sizes: odd m (131: past the 128 rows from which the bf16 dot kernel packs its panels, small
// k * n only), and k, n from {7, 83, 769, 5125} (group formats: k a multiple of the group,
// from {G, 3 * 32 or 3 * 128, 768, about 5120}; panel formats: n the next multiple of 8,
// integer panels k a multiple of 32, bf16 panels k even); the largest products are left out to keep the suite fast
// (the reference runs in double).
// Under AddressSanitizer (about 10x slower) the cap is lower; every size still appears.
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kMaxProduct = 2'000'000;
#else
constexpr int64_t kMaxProduct = 40'000'000;
#endif

std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes(WeightFormat format) {
  const int g = format == WeightFormat::kI8ChannelPanel8 ? 32 : ir::weight_format_group(format);
  std::vector<int64_t> ks;
  if (g == 0) ks = {7, 83, 769, 5125};
  if (format == WeightFormat::kBF16Panel8) ks = {6, 84, 770, 5126};  // even k
  if (format == WeightFormat::kF8E4M3) ks = {16, 96, 768, 5120};      // k % 16 == 0
  if (g == 32) ks = {32, 96, 768, 5152};
  if (g == 128) ks = {128, 384, 768, 5248};
  const int64_t rm = ir::weight_format_row_multiple(format);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
  for (int64_t m : {1, 3, 7, 83, 131}) {
    for (int64_t k : ks) {
      for (int64_t n0 : {7, 83, 769, 5125}) {
        const int64_t n = (n0 + rm - 1) / rm * rm;
        if (m * k * n > kMaxProduct || (m == 131 && k * n > 100'000)) continue;
        out.emplace_back(m, k, n);
      }
    }
  }
  return out;
}

// Cases per format, built once and shared by all kernels of the format.
const std::vector<std::unique_ptr<Case>>& cases(WeightFormat format) {
  static std::map<WeightFormat, std::vector<std::unique_ptr<Case>>> cache;
  auto it = cache.find(format);
  if (it != cache.end()) return it->second;
  std::vector<std::unique_ptr<Case>> built;
  uint32_t seed = 1000 * (static_cast<uint32_t>(format) + 1);
  for (auto [m, k, n] : shapes(format)) built.push_back(make_case(format, m, k, n, seed += 7));
  return cache.emplace(format, std::move(built)).first->second;
}

// Kernels that quantise activations to int8 (q8dot, and the SIMD kernels of integer panels).
bool is_q8dot(const MatmulKernel& kernel) {
  if (kernel.name.find("q8dot") != std::string_view::npos) return true;
  return kernel.isa != Isa::kScalar && ir::weight_format_is_panel(kernel.format) &&
         ir::weight_format_is_quantized(kernel.format);
}

// The bf16 dot-product kernels round each activation to bf16: |x - bf16(x)| <= 2^-8 |x|.
bool rounds_activations_to_bf16(const MatmulKernel& kernel) { return kernel.isa == Isa::kAvx512Bf16; }

// Runs `kernel` on `c` with a NaN-poisoned output; returns the number of elements out of bounds
// (reporting the first few).
int check_case(const MatmulKernel& kernel, const Case& c, bool with_bias) {
  std::vector<float> y(static_cast<size_t>(c.m * c.n), std::numeric_limits<float>::quiet_NaN());
  matmul(kernel, c.x.data(), c.m, c.k, c.w.data(), c.n, with_bias ? c.bias.data() : nullptr, y.data());
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      const auto e = static_cast<size_t>(i * c.n + j);
      const double b = with_bias ? c.bias[static_cast<size_t>(j)] : 0.0;
      const double want = c.ref[e] + b;
      double tol = 1e-5 * (c.mag[e] + std::fabs(b)) + 1e-30;
      if (is_q8dot(kernel)) tol += 1.01 * c.q8_bound[e];
      if (rounds_activations_to_bf16(kernel)) tol += 1.01 * std::ldexp(c.mag[e], -8);
      const double got = y[e];
      if (!(std::fabs(got - want) <= tol)) {
        if (++bad <= 3) {
          ADD_FAILURE() << kernel.name << " m=" << c.m << " k=" << c.k << " n=" << c.n << " bias=" << with_bias
                        << " y[" << i << "," << j << "] = " << got << ", want " << want << " +- " << tol;
        }
      }
    }
  }
  return bad;
}

class MatmulKernelTest : public ::testing::TestWithParam<const MatmulKernel*> {};

TEST_P(MatmulKernelTest, MatchesReferenceOnOddSizes) {
  const MatmulKernel& kernel = *GetParam();
  if (kernel.isa > isa_detect()) {
    GTEST_SKIP() << "this CPU lacks " << isa_name(kernel.isa) << " (it supports " << isa_name(isa_detect()) << ")";
  }
  for (const auto& c : cases(kernel.format)) {
    for (bool with_bias : {false, true}) {
      ASSERT_EQ(check_case(kernel, *c, with_bias), 0);
    }
  }
}

// Same results whatever the thread count (blocks are split differently).
TEST_P(MatmulKernelTest, IndependentOfThreadCount) {
  const MatmulKernel& kernel = *GetParam();
  if (kernel.isa > isa_detect()) {
    GTEST_SKIP() << "this CPU lacks " << isa_name(kernel.isa) << " (it supports " << isa_name(isa_detect()) << ")";
  }
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    for (const auto& c : cases(kernel.format)) {
      if (c->m == 7 && (c->n == 83 || c->n == 88)) {
        EXPECT_EQ(check_case(kernel, *c, true), 0) << "threads=" << threads;
      }
    }
  }
  omp_set_num_threads(saved);
}

// Each output row depends only on its own activation row: a row computed in a call of m rows
// equals, bit for bit, the same row computed alone (and in a call of 5 rows). The serving loop
// relies on it: a sequence's tokens must not depend on which other sequences share its step.
TEST_P(MatmulKernelTest, RowsDoNotDependOnTheOtherRows) {
  const MatmulKernel& kernel = *GetParam();
  if (kernel.isa > isa_detect()) {
    GTEST_SKIP() << "this CPU lacks " << isa_name(kernel.isa) << " (it supports " << isa_name(isa_detect()) << ")";
  }
  int compared = 0;
  for (const auto& c : cases(kernel.format)) {
    if (c->m < 7 || c->m * c->k * c->n > kMaxProduct / 4) continue;
    std::vector<float> all(static_cast<size_t>(c->m * c->n));
    matmul(kernel, c->x.data(), c->m, c->k, c->w.data(), c->n, c->bias.data(), all.data());
    for (int64_t rows : {int64_t{1}, int64_t{5}}) {
      for (int64_t i0 : {int64_t{0}, int64_t{2}, c->m - rows}) {
        std::vector<float> part(static_cast<size_t>(rows * c->n));
        matmul(kernel, c->x.data() + i0 * c->k, rows, c->k, c->w.data(), c->n, c->bias.data(), part.data());
        ASSERT_EQ(std::memcmp(part.data(), all.data() + i0 * c->n, part.size() * sizeof(float)), 0)
            << kernel.name << " m=" << c->m << " k=" << c->k << " n=" << c->n << ": rows " << i0 << ".."
            << i0 + rows - 1 << " computed " << rows << " at a time differ from the same rows in the whole call";
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

std::string kernel_test_name(const ::testing::TestParamInfo<const MatmulKernel*>& info) {
  std::string s(info.param->name);
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllKernels, MatmulKernelTest, ::testing::ValuesIn(matmul_kernels_all()), kernel_test_name);

TEST(MatmulRegistry, EveryFormatHasScalarAndAvx2Kernels) {
  for (WeightFormat format : kAllFormats) {
    const auto scalar = matmul_kernels(format, Isa::kScalar);
    ASSERT_FALSE(scalar.empty()) << ir::weight_format_name(format);
    for (const MatmulKernel* k : scalar) EXPECT_EQ(k->isa, Isa::kScalar);
    const auto avx2 = matmul_kernels(format, Isa::kAvx2);
    EXPECT_GT(avx2.size(), scalar.size()) << ir::weight_format_name(format);
    EXPECT_EQ(avx2.front()->isa, Isa::kAvx2) << "best guess first";
    const auto avx512 = matmul_kernels(format, Isa::kAvx512);
    EXPECT_EQ(avx512.front()->isa, Isa::kAvx512) << ir::weight_format_name(format);
  }
}

// The integer panel kernels of every ISA compute the same integer dot products and then the same
// float operations in the same order, so their outputs are identical bit for bit (decode- and
// prefill-sized calls, with bias).
TEST(MatmulRegistry, IntegerPanelKernelsAgreeBitForBitAcrossIsas) {
  if (isa_detect() < Isa::kAvx512) GTEST_SKIP() << "this CPU lacks avx512 (it supports " << isa_name(isa_detect()) << ")";
  for (WeightFormat format : {WeightFormat::kI8ChannelPanel8, WeightFormat::kI4Group32Panel8}) {
    const MatmulKernel* avx2 = matmul_kernel_find(std::string(ir::weight_format_name(format)) + ".avx2.panel");
    const MatmulKernel* avx512 = matmul_kernel_find(std::string(ir::weight_format_name(format)) + ".avx512.panel");
    ASSERT_NE(avx2, nullptr);
    ASSERT_NE(avx512, nullptr);
    int compared = 0;
    for (const auto& c : cases(format)) {
      std::vector<float> y2(static_cast<size_t>(c->m * c->n)), y512(y2.size(), -1.0f);
      matmul(*avx2, c->x.data(), c->m, c->k, c->w.data(), c->n, c->bias.data(), y2.data());
      matmul(*avx512, c->x.data(), c->m, c->k, c->w.data(), c->n, c->bias.data(), y512.data());
      ASSERT_EQ(std::memcmp(y2.data(), y512.data(), y2.size() * sizeof(float)), 0)
          << ir::weight_format_name(format) << " m=" << c->m << " k=" << c->k << " n=" << c->n;
      ++compared;
    }
    EXPECT_GT(compared, 10);
  }
}

// Kernels of one results class give the same bits as each other (select_kernels pairs a decode
// kernel with a prefill kernel of its class), on every case of their format, with bias.
TEST(MatmulRegistry, KernelsOfOneResultsClassAgreeBitForBit) {
  int compared = 0;
  for (WeightFormat format : kAllFormats) {
    std::map<std::string, std::vector<const MatmulKernel*>> classes;
    for (const MatmulKernel* k : matmul_kernels(format, isa_detect())) classes[matmul_results_class(*k)].push_back(k);
    for (const auto& [name, kernels] : classes) {
      for (size_t other = 1; other < kernels.size(); ++other) {
        for (const auto& c : cases(format)) {
          std::vector<float> y0(static_cast<size_t>(c->m * c->n)), y1(y0.size(), -1.0f);
          matmul(*kernels[0], c->x.data(), c->m, c->k, c->w.data(), c->n, c->bias.data(), y0.data());
          matmul(*kernels[other], c->x.data(), c->m, c->k, c->w.data(), c->n, c->bias.data(), y1.data());
          ASSERT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)), 0)
              << name << ": " << kernels[0]->name << " and " << kernels[other]->name << " differ at m=" << c->m
              << " k=" << c->k << " n=" << c->n;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 50);
}

TEST(MatmulRegistry, ResultsClassesFollowTheStrategy) {
  const std::pair<const char*, const char*> expected[] = {
      {"f32.avx512.6x4", "f32.avx512.tiles"},       {"f32.avx512.4x3", "f32.avx512.tiles"},
      {"bf16.avx512.dq.6x4", "bf16.avx512.tiles"},  {"f32.avx2.3x4", "f32.avx2.tiles"},
      {"bf16p8.avx2.panel", "bf16p8.panel"},        {"bf16p8.avx512.panel", "bf16p8.panel"},
      {"i4g32p8.avx512.panel", "i4g32p8.panel"},    {"i8c.avx2.q8dot.2x4", "i8c.avx2.q8dot"},
      {"bf16p8.avx512bf16.dot", "bf16p8.avx512bf16.dot"}, {"i4g32.scalar", "i4g32.scalar"},
  };
  for (const auto& [name, results] : expected) {
    const MatmulKernel* k = matmul_kernel_find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(matmul_results_class(*k), results) << name;
  }
}

TEST(MatmulRegistry, NamesAreUniqueAndFindable) {
  std::set<std::string_view> names;
  for (const MatmulKernel* k : matmul_kernels_all()) {
    EXPECT_TRUE(names.insert(k->name).second) << k->name;
    EXPECT_EQ(matmul_kernel_find(k->name), k);
    const std::string prefix = std::string(ir::weight_format_name(k->format)) + "." + std::string(isa_name(k->isa));
    EXPECT_EQ(k->name.substr(0, prefix.size()), prefix) << k->name;
  }
  EXPECT_EQ(matmul_kernel_find("i4g32.avx2.nonexistent"), nullptr);
  EXPECT_EQ(matmul_kernel_find(""), nullptr);
}

TEST(MatmulRegistry, EmptyOutputIsANoOp) {
  const MatmulKernel* k = matmul_kernels(WeightFormat::kF32, isa_active()).front();
  float x = 1.0f;
  float y = 42.0f;
  std::vector<std::byte> w(4);
  matmul(*k, &x, 0, 1, w.data(), 1, nullptr, &y);
  matmul(*k, &x, 1, 1, w.data(), 0, nullptr, &y);
  EXPECT_EQ(y, 42.0f);
}

// The stored formats round each weight to the nearest level: |w - dequant(quant(w))| <= s / 2
// with s the scale of the element's row or group (float formats: half an ulp of the format).
TEST(WeightQuantize, RoundTripErrorIsAtMostHalfAScale) {
  for (WeightFormat format : kAllFormats) {
    const int g = ir::weight_format_group(format);
    const int64_t rows = ir::weight_format_is_panel(format) ? 16 : 5;
    const bool f8 = format == WeightFormat::kF8E4M3;
    const int64_t cols = g == 128 ? 384 : (g == 32 || f8 || ir::weight_format_is_panel(format) ? 96 : 83);
    std::vector<float> w = random_vector(static_cast<size_t>(rows * cols), 77, -3.0f, 3.0f);
    w[5] = 0.0f;
    w[7] = 1e-4f;  // f8: below the smallest normal step of this weight's scale
    float tensor_amax = 0.0f;
    for (float v : w) tensor_amax = std::max(tensor_amax, std::fabs(v));
    std::vector<std::byte> stored(static_cast<size_t>(rows) * ir::weight_format_row_bytes(format, cols));
    ir::weight_quantize(format, w.data(), rows, cols, stored.data());
    std::vector<float> back(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      ir::weight_dequantize_row_at(format, stored.data(), rows, cols, r, back.data());
      const int64_t span = g == 0 ? cols : g;
      for (int64_t b0 = 0; b0 < cols; b0 += span) {
        float amax = 0.0f;
        for (int64_t t = b0; t < b0 + span; ++t) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + t)]));
        for (int64_t t = b0; t < b0 + span; ++t) {
          const float orig = w[static_cast<size_t>(r * cols + t)];
          double bound = 0.0;
          switch (ir::weight_format_base(format)) {
            case WeightFormat::kF32: bound = 0.0; break;
            case WeightFormat::kF16: bound = std::ldexp(std::fabs(orig), -11) + std::ldexp(1.0, -25); break;
            case WeightFormat::kBF16: bound = std::ldexp(std::fabs(orig), -8); break;
            case WeightFormat::kI8Channel: bound = amax / 127.0 / 2.0 * (1 + 1e-6); break;
            // fp16 scales: s is amax / q rounded to fp16 (relative error <= 2^-11); an element
            // may also clamp at q_max when the rounded scale came out smaller.
            case WeightFormat::kI8Group32:
            case WeightFormat::kI8Group128: bound = amax / 127.0 * (0.5 + 127.0 * std::ldexp(1.0, -11)) * (1 + 1e-3); break;
            case WeightFormat::kI4Group32:
            case WeightFormat::kI4Group128: bound = amax / 7.0 * (0.5 + 7.0 * std::ldexp(1.0, -11)) * (1 + 1e-3); break;
            // One scale s = amax / 448 for the whole weight: half a step of 3 mantissa bits
            // (2^-4 relative), or of the subnormal step s * 2^-9 below s * 2^-6.
            case WeightFormat::kF8E4M3: {
              const double step = std::ldexp(static_cast<double>(std::fabs(orig)), -4);
              bound = std::max(step, tensor_amax / 448.0 * std::ldexp(1.0, -10)) * (1 + 1e-6);
              break;
            }
            default: ADD_FAILURE() << "not a base format"; break;
          }
          EXPECT_LE(std::fabs(back[static_cast<size_t>(t)] - orig), bound)
              << ir::weight_format_name(format) << " row " << r << " col " << t;
        }
      }
    }
  }
}

// A panel format stores exactly its base format's values: every row read back from the panel
// layout equals the same row quantised in the base (row) format, and the two take equal space.
TEST(WeightQuantize, PanelFormatsHoldTheirBaseFormatsValues) {
  for (WeightFormat format : kAllFormats) {
    if (!ir::weight_format_is_panel(format)) continue;
    const WeightFormat base = ir::weight_format_base(format);
    EXPECT_EQ(ir::weight_format_panel(base), format);
    const int64_t rows = 24, cols = 160;
    EXPECT_FALSE(ir::weight_format_fits(format, 20, cols)) << "rows must be a multiple of 8";
    std::vector<float> w = random_vector(static_cast<size_t>(rows * cols), 91, -2.0f, 2.0f);
    ASSERT_EQ(ir::weight_format_row_bytes(format, cols), ir::weight_format_row_bytes(base, cols));
    std::vector<std::byte> panel(static_cast<size_t>(rows) * ir::weight_format_row_bytes(format, cols));
    std::vector<std::byte> plain(panel.size());
    ir::weight_quantize(format, w.data(), rows, cols, panel.data());
    ir::weight_quantize(base, w.data(), rows, cols, plain.data());
    EXPECT_NE(panel, plain) << "interleaved";
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      ir::weight_dequantize_row_at(format, panel.data(), rows, cols, r, a.data());
      ir::weight_dequantize_row_at(base, plain.data(), rows, cols, r, b.data());
      ASSERT_EQ(a, b) << ir::weight_format_name(format) << " row " << r;
    }
  }
}

// e4m3: every finite code reads back to itself; values round to the nearest code, ties to the
// even one; beyond 448 they saturate.
TEST(WeightQuantize, E4m3RoundsToNearestEvenAndSaturates) {
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(v)) {
      EXPECT_TRUE(b == 0x7f || b == 0xff) << b;
      continue;
    }
    if (b == 0x80) continue;  // -0 writes as +0's sign-flipped twin: checked below
    EXPECT_EQ(float_to_e4m3(v), b) << v;
  }
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38) << "tie between 1 and 1.125: the even code";
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a) << "tie between 1.125 and 1.25: the even code";
  EXPECT_EQ(float_to_e4m3(1.07f), 0x39);
  EXPECT_EQ(float_to_e4m3(3.0f * std::ldexp(1.0f, -10)), 0x02) << "subnormal tie at 1.5 steps: 2 steps";
  EXPECT_EQ(float_to_e4m3(500.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
}

// f8 keeps one scale for the whole weight, max|w| / 448, in the tail of every row.
TEST(WeightQuantize, F8StoresOneScaleForTheWholeWeight) {
  const int64_t rows = 6, cols = 48;
  std::vector<float> w = random_vector(static_cast<size_t>(rows * cols), 93, -0.5f, 0.5f);
  w[static_cast<size_t>(4 * cols + 9)] = -7.0f;
  EXPECT_FALSE(ir::weight_format_fits(WeightFormat::kF8E4M3, 40));
  ASSERT_EQ(ir::weight_format_row_bytes(WeightFormat::kF8E4M3, cols), static_cast<size_t>(cols + 16));
  std::vector<std::byte> stored(static_cast<size_t>(rows) * ir::weight_format_row_bytes(WeightFormat::kF8E4M3, cols));
  ir::weight_quantize(WeightFormat::kF8E4M3, w.data(), rows, cols, stored.data());
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* tail = stored.data() + static_cast<size_t>(r * (cols + 16) + cols);
    float s;
    std::memcpy(&s, tail, sizeof(float));
    EXPECT_EQ(s, 7.0f / 448.0f) << "row " << r;
    for (int i = 4; i < 16; ++i) EXPECT_EQ(tail[i], std::byte{0}) << "row " << r;
  }
  std::vector<float> back(static_cast<size_t>(cols));
  ir::weight_dequantize_row_at(WeightFormat::kF8E4M3, stored.data(), rows, cols, 4, back.data());
  EXPECT_EQ(back[9], -7.0f) << "the largest weight is exact";
}

// Activation quantisation: every code path gives the same bytes, and |x - d q| <= d / 2.
TEST(QuantizeActivations, PathsAgreeAndErrorIsAtMostHalfAScale) {
  for (int64_t cols : {7, 32, 83, 96, 5125}) {
    const int64_t rows = 3;
    std::vector<float> x = random_vector(static_cast<size_t>(rows * cols), 5, -4.0f, 4.0f);
    for (int64_t t = 0; t < std::min<int64_t>(cols, 32); ++t) x[static_cast<size_t>(t)] = 0.0f;  // an all-zero block
    std::vector<std::byte> a(q8_rows_bytes(rows, cols) + 64), b(q8_rows_bytes(rows, cols) + 64);
    auto aligned = [](std::vector<std::byte>& v) {
      auto p = reinterpret_cast<uintptr_t>(v.data());
      return reinterpret_cast<void*>((p + 63) / 64 * 64);
    };
    const Q8Rows qa = q8_rows_view(aligned(a), rows, cols);
    const Q8Rows qb = q8_rows_view(aligned(b), rows, cols);
    for (int64_t r = 0; r < rows; ++r) q8_quantize_row(x.data() + r * cols, r, qa, Isa::kScalar);
    for (int64_t r = 0; r < rows; ++r) q8_quantize_row(x.data() + r * cols, r, qb, isa_detect());
    ASSERT_EQ(std::memcmp(qa.q, qb.q, static_cast<size_t>(rows * qa.q_stride())), 0) << cols;
    ASSERT_EQ(std::memcmp(qa.d, qb.d, static_cast<size_t>(rows * qa.blocks) * sizeof(float)), 0) << cols;
    ASSERT_EQ(std::memcmp(qa.sum, qb.sum, static_cast<size_t>(rows * qa.blocks) * sizeof(int32_t)), 0) << cols;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t blk = 0; blk < qa.blocks; ++blk) {
        const float d = qa.d[r * qa.blocks + blk];
        int32_t sum = 0;
        for (int64_t t = blk * kQ8Block; t < (blk + 1) * kQ8Block; ++t) {
          const int8_t q = qa.q[r * qa.q_stride() + t];
          sum += q;
          EXPECT_LE(std::abs(q), 127);
          if (t >= cols) {
            EXPECT_EQ(q, 0) << "padding";
            continue;
          }
          EXPECT_LE(std::fabs(x[static_cast<size_t>(r * cols + t)] - d * q), d / 2 * (1 + 1e-6) + 1e-30);
        }
        EXPECT_EQ(sum, qa.sum[r * qa.blocks + blk]);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
