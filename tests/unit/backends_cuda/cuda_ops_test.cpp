// Every CUDA kernel against the CPU backend's kernel (or a double-precision reference for the
// matrix products) over odd sizes, each dtype the kernels read, and the shapes that choose
// different code paths (vector and scalar loads, decode and prefill attention).
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <numeric>

#include "backends/cpu/layers/attention.h"
#include "backends/cpu/layers/elementwise.h"
#include "backends/cpu/layers/embedding.h"
#include "backends/cpu/layers/norm.h"
#include "backends/cpu/layers/rope.h"
#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/gemm/cuda_dequant.h"
#include "backends/cuda/gemm/cuda_gemm.h"
#include "backends/cuda/gemm/cuda_gemm_dq.h"
#include "backends/cuda/gemm/cuda_gemv.h"
#include "backends/cuda/gemm/cuda_matmul.h"
#include "backends/cuda/layers/cuda_elementwise.h"
#include "backends/cuda/layers/cuda_embedding.h"
#include "backends/cuda/layers/cuda_norm.h"
#include "backends/cuda/layers/cuda_rope.h"
#include "base/half.h"
#include "ir/position_encoding.h"
#include "unit/backends_cuda/cuda_test_support.h"

namespace kiln::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::rel_error;

constexpr int64_t kSizes[] = {7, 83, 769, 5125};

// Every weight format the CUDA backend reads: the float ones, the CPU's integer row formats and fp8.
constexpr ir::WeightFormat kRowFormats[] = {
    ir::WeightFormat::kF32,        ir::WeightFormat::kF16,       ir::WeightFormat::kBF16,
    ir::WeightFormat::kI8Channel,  ir::WeightFormat::kI8Group32, ir::WeightFormat::kI8Group128,
    ir::WeightFormat::kI4Group32,  ir::WeightFormat::kI4Group128, ir::WeightFormat::kF8E4M3};

TEST(CudaElementwise, MatchesCpu) {
  KILN_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    const auto a = random_floats(static_cast<size_t>(n), 1, -6.0f, 6.0f);
    const auto b = random_floats(static_cast<size_t>(n), 2, -6.0f, 6.0f);
    DeviceArray<float> da(a), db(b), dy(static_cast<size_t>(n));
    std::vector<float> want(static_cast<size_t>(n));
    cpu::add(a.data(), b.data(), n, want.data());
    launch_add(da.get(), db.get(), n, dy.get(), nullptr);
    EXPECT_EQ(dy.download(), want) << "add " << n;
    cpu::mul(a.data(), b.data(), n, want.data());
    launch_mul(da.get(), db.get(), n, dy.get(), nullptr);
    EXPECT_EQ(dy.download(), want) << "mul " << n;
    cpu::silu(a.data(), n, want.data());
    launch_silu(da.get(), n, dy.get(), nullptr);
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "silu " << n;
    cpu::gelu_tanh(a.data(), n, want.data());
    launch_gelu_tanh(da.get(), n, dy.get(), nullptr);
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "gelu_tanh " << n;
    // silu_mul: [m, 2 * inter] -> [m, inter]; widths of four (vector kernel) and odd ones.
    for (const int64_t inter : {n, 4 * n}) {
      const int64_t m = 3;
      const auto x = random_floats(static_cast<size_t>(m * 2 * inter), 3, -6.0f, 6.0f);
      DeviceArray<float> dx(x), dz(static_cast<size_t>(m * inter));
      std::vector<float> z(static_cast<size_t>(m * inter));
      cpu::silu_mul(x.data(), m, inter, z.data());
      launch_silu_mul(dx.get(), m, inter, dz.get(), nullptr);
      EXPECT_LE(rel_error(dz.download(), z), 1e-6) << "silu_mul " << inter;
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Kernels launch while the kernel before them still runs (cuda_launch.cuh): each must wait for
// its predecessor's writes. A chain of 64 rounds of v = I * (v + 1), the identity product a GEMV
// of 512 blocks and the add 16 blocks, on a non-blocking stream with no synchronisation
// between launches, ends at v + 64 exactly only if every kernel read what the one before wrote.
TEST(CudaLaunch, DependentKernelsReadTheirPredecessorsWrites) {
  KILN_REQUIRE_GPU();
  constexpr int64_t n = 4096;
  constexpr int kRounds = 64;
  std::vector<float> identity(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) identity[static_cast<size_t>(i * n + i)] = 1.0f;
  std::vector<float> v0(static_cast<size_t>(n));
  std::iota(v0.begin(), v0.end(), 0.0f);
  DeviceArray<float> w(identity), v(v0), u(static_cast<size_t>(n));
  DeviceArray<float> ones(std::vector<float>(static_cast<size_t>(n), 1.0f));
  cudaStream_t stream = nullptr;
  KILN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int r = 0; r < kRounds; ++r) {
    launch_add(v.get(), ones.get(), n, u.get(), stream);
    launch_gemv(ir::WeightFormat::kF32, u.get(), 1, n, w.get(), n, nullptr, v.get(), stream);
  }
  KILN_CUDA_OK(cudaStreamSynchronize(stream));
  KILN_CUDA_OK(cudaStreamDestroy(stream));
  const std::vector<float> got = v.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], v0[static_cast<size_t>(i)] + kRounds) << i;
}

TEST(CudaElementwise, SplitAndBias) {
  KILN_REQUIRE_GPU();
  const int64_t m = 5, sizes[3] = {83, 7, 20}, width = 110;
  const auto x = random_floats(static_cast<size_t>(m * width), 4);
  DeviceArray<float> dx(x), o0(static_cast<size_t>(m * 83)), o1(static_cast<size_t>(m * 7)),
      o2(static_cast<size_t>(m * 20));
  SplitOutputs outs{{o0.get(), o1.get(), o2.get()}, {sizes[0], sizes[1], sizes[2]}, 3};
  launch_split(dx.get(), m, width, outs, nullptr);
  const std::vector<float> got[3] = {o0.download(), o1.download(), o2.download()};
  for (int64_t r = 0; r < m; ++r) {
    int64_t col = 0;
    for (int j = 0; j < 3; ++j) {
      for (int64_t c = 0; c < sizes[j]; ++c) {
        ASSERT_EQ(got[j][static_cast<size_t>(r * sizes[j] + c)], x[static_cast<size_t>(r * width + col + c)]);
      }
      col += sizes[j];
    }
  }
  const auto bias = random_floats(static_cast<size_t>(width), 5);
  DeviceArray<float> db(bias);
  launch_add_bias(dx.get(), m, width, db.get(), nullptr);
  const auto biased = dx.download();
  for (size_t i = 0; i < biased.size(); ++i) ASSERT_EQ(biased[i], x[i] + bias[i % static_cast<size_t>(width)]);
}

TEST(CudaNorm, MatchesCpu) {
  KILN_REQUIRE_GPU();
  for (int64_t h : kSizes) {
    const int64_t m = 7;
    const auto x = random_floats(static_cast<size_t>(m * h), 6, -4.0f, 4.0f);
    const auto w = random_floats(static_cast<size_t>(h), 7, 0.5f, 1.5f);
    const auto b = random_floats(static_cast<size_t>(h), 8);
    DeviceArray<float> dx(x), dw(w), db(b), dy(x.size());
    std::vector<float> want(x.size());
    cpu::rms_norm(x.data(), m, h, w.data(), 1e-5f, want.data());
    launch_rms_norm(dx.get(), m, h, dw.get(), 1e-5f, dy.get(), nullptr);
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "rms_norm h " << h;
    cpu::layer_norm(x.data(), m, h, w.data(), b.data(), 1e-5f, want.data());
    launch_layer_norm(dx.get(), m, h, dw.get(), db.get(), 1e-5f, dy.get(), nullptr);
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "layer_norm h " << h;
    // In place, as the graphs may plan it.
    launch_rms_norm(dx.get(), m, h, dw.get(), 1e-5f, dx.get(), nullptr);
    cpu::rms_norm(x.data(), m, h, w.data(), 1e-5f, want.data());
    EXPECT_LE(rel_error(dx.download(), want), 1e-6) << "rms_norm in place h " << h;
  }
}

TEST(CudaNorm, RowsHeldInRegistersAndResidualAddMatchCpu) {
  KILN_REQUIRE_GPU();
  // Multiples of 4 take the register kernels (one to eight float4 slices a thread); 8196 is past
  // them and 4098 is not a multiple of 4: both take the loop kernels.
  for (int64_t h : {int64_t{4}, int64_t{516}, int64_t{1028}, int64_t{4096}, int64_t{8192}, int64_t{8196},
                    int64_t{4098}}) {
    const int64_t m = 3;
    const size_t n = static_cast<size_t>(m * h);
    const auto a = random_floats(n, 30, -4.0f, 4.0f);
    const auto b = random_floats(n, 31, -4.0f, 4.0f);
    const auto w = random_floats(static_cast<size_t>(h), 32, 0.5f, 1.5f);
    std::vector<float> sum(n), want(n);
    cpu::add(a.data(), b.data(), static_cast<int64_t>(n), sum.data());
    cpu::rms_norm(sum.data(), m, h, w.data(), 1e-5f, want.data());
    DeviceArray<float> da(a), db(b), dw(w), dsum(n), dy(n);
    launch_add_rms_norm(da.get(), db.get(), m, h, dw.get(), 1e-5f, dsum.get(), dy.get(), nullptr);
    EXPECT_EQ(dsum.download(), sum) << "add h " << h;
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "add+rms_norm h " << h;
    // The sum written over the first input, as the graphs plan the residual stream.
    launch_add_rms_norm(da.get(), db.get(), m, h, dw.get(), 1e-5f, da.get(), dy.get(), nullptr);
    EXPECT_EQ(da.download(), sum) << "add in place h " << h;
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "add+rms_norm in place h " << h;
    launch_rms_norm(db.get(), m, h, dw.get(), 1e-5f, dy.get(), nullptr);
    cpu::rms_norm(b.data(), m, h, w.data(), 1e-5f, want.data());
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << "rms_norm h " << h;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The bits a 16-bit activation type rounds v to (round to nearest even).
uint16_t rounded_bits(float v, ActivationType t) {
  return t == ActivationType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
}

// Whether `got` holds exactly the fp32 values `want` rounded to t.
void expect_rounded(const std::vector<uint16_t>& got, const std::vector<float>& want, ActivationType t,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != rounded_bits(want[i], t);
  EXPECT_EQ(wrong, 0u) << what << (t == ActivationType::kBF16 ? " bf16" : " fp16");
}

TEST(CudaNorm, SixteenBitOutputIsTheFp32OutputRounded) {
  KILN_REQUIRE_GPU();
  // The register kernels (multiples of 4 up to 8192) and the loop kernels (4098).
  for (int64_t h : {int64_t{516}, int64_t{4096}, int64_t{4098}}) {
    const int64_t m = 3;
    const size_t n = static_cast<size_t>(m * h);
    const auto a = random_floats(n, 33, -4.0f, 4.0f);
    const auto b = random_floats(n, 34, -4.0f, 4.0f);
    const auto w = random_floats(static_cast<size_t>(h), 35, 0.5f, 1.5f);
    DeviceArray<float> da(a), db(b), dw(w), dsum(n), dy(n);
    DeviceArray<uint16_t> dy16(n);
    for (ActivationType t : {ActivationType::kF16, ActivationType::kBF16}) {
      const std::string what = "h " + std::to_string(h);
      launch_add_rms_norm(da.get(), db.get(), m, h, dw.get(), 1e-5f, dsum.get(), dy.get(), nullptr);
      const auto want = dy.download();
      launch_add_rms_norm(da.get(), db.get(), m, h, dw.get(), 1e-5f, dsum.get(), dy16.get(), nullptr, t);
      expect_rounded(dy16.download(), want, t, "add+rms_norm " + what);
      launch_rms_norm(da.get(), m, h, dw.get(), 1e-5f, dy.get(), nullptr);
      const auto want_norm = dy.download();
      launch_rms_norm(da.get(), m, h, dw.get(), 1e-5f, dy16.get(), nullptr, t);
      expect_rounded(dy16.download(), want_norm, t, "rms_norm " + what);
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaElementwise, SwigluSixteenBitOutputIsTheFp32OutputRounded) {
  KILN_REQUIRE_GPU();
  const int64_t m = 5, inter = 344;
  for (ActivationType t : {ActivationType::kF16, ActivationType::kBF16}) {
    const bool bf16 = t == ActivationType::kBF16;
    const auto xf = random_floats(static_cast<size_t>(m * 2 * inter), 36, -3.0f, 3.0f);
    std::vector<uint16_t> x(xf.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = rounded_bits(xf[i], t);
    DeviceArray<uint16_t> dx(x), dy16(static_cast<size_t>(m * inter));
    DeviceArray<float> dy(static_cast<size_t>(m * inter));
    launch_silu_mul_16(dx.get(), bf16, m, inter, dy.get(), nullptr);
    launch_silu_mul_16(dx.get(), bf16, m, inter, dy16.get(), nullptr, t);
    expect_rounded(dy16.download(), dy.download(), t, "silu_mul_16");
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaEmbedding, EveryRowFormatMatchesCpu) {
  KILN_REQUIRE_GPU();
  for (ir::WeightFormat f : kRowFormats) {
    for (int64_t hidden : {int64_t{83}, int64_t{769}, int64_t{256}}) {
      if (!ir::weight_format_fits(f, hidden)) continue;
      const int64_t vocab = 61, t = 9;
      const auto w = random_floats(static_cast<size_t>(vocab * hidden), 9);
      std::vector<std::byte> table(static_cast<size_t>(vocab) * ir::weight_format_row_bytes(f, hidden));
      ir::weight_quantize(f, w.data(), vocab, hidden, table.data());
      const std::vector<int32_t> ids = {0, 60, 3, 3, 17, 59, 1, 42, 8};
      DeviceArray<std::byte> dt(table);
      DeviceArray<int32_t> di(ids);
      DeviceArray<float> dy(static_cast<size_t>(t * hidden));
      std::vector<float> want(static_cast<size_t>(t * hidden));
      cpu::embedding(table.data(), f, hidden, ids.data(), t, want.data());
      launch_embedding(dt.get(), f, hidden, di.get(), t, dy.get(), nullptr);
      EXPECT_EQ(dy.download(), want) << ir::weight_format_name(f) << " hidden " << hidden;
    }
  }
  const auto x = random_floats(83 * 11, 10);
  const std::vector<int32_t> rows = {10, 0, 5};
  DeviceArray<float> dx(x), dy(83 * 3);
  DeviceArray<int32_t> dr(rows);
  std::vector<float> want(83 * 3);
  cpu::gather_rows(x.data(), 83, rows.data(), 3, want.data());
  launch_gather_rows(dx.get(), 83, dr.get(), 3, dy.get(), nullptr);
  EXPECT_EQ(dy.download(), want);
}

TEST(CudaRope, EveryTypeMatchesCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* type;
    int64_t heads, dim, rot;
  };
  const Case cases[] = {{"default", 4, 24, 24}, {"linear", 3, 64, 32}, {"llama3", 5, 128, 128}, {"dynamic", 2, 20, 12}};
  for (const Case& c : cases) {
    ir::RopeParams p;
    p.type = c.type;
    p.theta = 10000.0;
    p.factor = 2.0;
    p.original_max_position = 16;
    p.max_position = 8;
    const int64_t t = 37;
    std::vector<int32_t> positions(static_cast<size_t>(t));
    std::iota(positions.begin(), positions.end(), 3);
    const auto x = random_floats(static_cast<size_t>(t * c.heads * c.dim), 11, -3.0f, 3.0f);
    std::vector<float> want(x.size());
    // Two sequences for dynamic NTK: tokens [0, 20) with one table, [20, 37) with another.
    const auto inv_a = ir::rope_inv_freq(p, c.rot, 23);
    const auto inv_b = ir::rope_inv_freq(p, c.rot, 40);
    const bool dynamic = std::string(c.type) == "dynamic";
    const int64_t row = c.heads * c.dim;
    cpu::rope(x.data(), dynamic ? 20 : t, c.heads, c.dim, c.rot, positions.data(), inv_a.data(), want.data());
    if (dynamic) {
      cpu::rope(x.data() + 20 * row, t - 20, c.heads, c.dim, c.rot, positions.data() + 20, inv_b.data(),
                want.data() + 20 * row);
    }
    std::vector<float> tables = inv_a;
    tables.insert(tables.end(), inv_b.begin(), inv_b.end());
    std::vector<int32_t> token_seq(static_cast<size_t>(t), 0);
    std::fill(token_seq.begin() + 20, token_seq.end(), 1);
    DeviceArray<float> dx(x), dy(x.size()), dinv(tables);
    DeviceArray<int32_t> dpos(positions), dseq(token_seq);
    launch_rope(dx.get(), t, c.heads, c.dim, c.rot, dpos.get(), dinv.get(), dynamic ? dseq.get() : nullptr, dy.get(),
                nullptr);
    EXPECT_LE(rel_error(dy.download(), want), 1e-6) << c.type;
    launch_rope(dx.get(), t, c.heads, c.dim, c.rot, dpos.get(), dinv.get(), dynamic ? dseq.get() : nullptr, dx.get(),
                nullptr);
    EXPECT_LE(rel_error(dx.download(), want), 1e-6) << c.type << " in place";
  }
}

// Random activations x [m, k], a weight [n, k] quantised to format f, and a bias [n], from seeds
// seed, seed + 1 and seed + 2.
struct MatmulOperands {
  std::vector<float> x, bias;
  std::vector<std::byte> w;
};
MatmulOperands random_matmul_operands(ir::WeightFormat f, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  MatmulOperands o;
  o.x = random_floats(static_cast<size_t>(m * k), seed);
  const auto wf = random_floats(static_cast<size_t>(n * k), seed + 1);
  o.bias = random_floats(static_cast<size_t>(n), seed + 2);
  o.w.resize(static_cast<size_t>(n) * ir::weight_format_row_bytes(f, k));
  ir::weight_quantize(f, wf.data(), n, k, o.w.data());
  return o;
}

// y = x . W^T in double from the stored (rounded) weights.
std::vector<float> matmul_reference(const std::vector<float>& x, int64_t m, int64_t k, const std::vector<std::byte>& w,
                                    ir::WeightFormat f, int64_t n, const std::vector<float>& bias) {
  std::vector<float> row(static_cast<size_t>(k)), y(static_cast<size_t>(m * n));
  for (int64_t c = 0; c < n; ++c) {
    ir::weight_dequantize_row_at(f, w.data(), n, k, c, row.data());
    for (int64_t r = 0; r < m; ++r) {
      double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(c)];
      for (int64_t e = 0; e < k; ++e) s += static_cast<double>(x[static_cast<size_t>(r * k + e)]) * row[static_cast<size_t>(e)];
      y[static_cast<size_t>(r * n + c)] = static_cast<float>(s);
    }
  }
  return y;
}

// The float GEMVs launch while the kernel before them runs (cuda_launch.cuh) and every GEMV lets
// the next kernel launch once its warps have read their weights. A chain of 8 rounds of
// v = W (v + 1) through every format's batch-1 GEMV kernels, with no synchronisation between
// launches, must end at the same bits as the chain run one kernel at a time.
TEST(CudaLaunch, GemvChainEqualsTheChainRunOneKernelAtATime) {
  KILN_REQUIRE_GPU();
  constexpr int64_t n = 4096;
  constexpr int kRounds = 8;
  cudaStream_t stream = nullptr;
  KILN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceArray<float> ones(std::vector<float>(static_cast<size_t>(n), 1.0f)), u(static_cast<size_t>(n));
  for (ir::WeightFormat f : kRowFormats) {
    const auto operands = random_matmul_operands(f, 1, n, n, 40);
    DeviceArray<std::byte> w(operands.w);
    for (GemvVariant variant : {GemvVariant::kPlain, GemvVariant::kDeep, GemvVariant::kPair, GemvVariant::kQ8}) {
      auto chain = [&](bool one_at_a_time) {
        DeviceArray<float> v(operands.x);
        for (int r = 0; r < kRounds; ++r) {
          launch_add(v.get(), ones.get(), n, u.get(), stream);
          if (one_at_a_time) {
            EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          }
          launch_gemv(f, u.get(), 1, n, w.get(), n, nullptr, v.get(), stream, variant);
          if (one_at_a_time) {
            EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          }
        }
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        return v.download();
      };
      const std::vector<float> want = chain(true);
      EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float x) { return std::isfinite(x); }));
      EXPECT_EQ(chain(false), want) << ir::weight_format_name(f) << " variant " << static_cast<int>(variant);
    }
  }
  KILN_CUDA_OK(cudaStreamDestroy(stream));
}

TEST(CudaMatmul, EveryKernelMatchesDoubleReference) {
  KILN_REQUIRE_GPU();
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Shape {
    int64_t m, n, k;
  };
  // Odd shapes take the scalar paths (and the integer group formats skip widths they cannot
  // store); 1024, 4096 and 512 take the vector ones, 96 the scalar path of the 32-groups (an odd
  // block count). fp8 products take n and k in multiples of 16 (others fall back to the fp8 gemm).
  const Shape shapes[] = {{1, 83, 769}, {3, 7, 83},    {7, 769, 5125}, {1, 130, 1024}, {9, 83, 769},
                          {83, 129, 96}, {200, 64, 5125}, {1, 33, 4096},  {5, 130, 4096}, {1, 7, 96},
                          {9, 64, 512},  {130, 19, 1024}, {37, 80, 1024}};
  for (ir::WeightFormat f : kRowFormats) {
    for (const Shape& s : shapes) {
      if (!ir::weight_format_fits(f, s.k)) continue;
      const auto [x, bias, w] = random_matmul_operands(f, s.m, s.n, s.k, 12);
      const auto want = matmul_reference(x, s.m, s.k, w, f, s.n, bias);
      DeviceArray<float> dx(x), dbias(bias), dy(static_cast<size_t>(s.m * s.n));
      DeviceArray<std::byte> dw(w);
      const auto kernels = cuda_matmul_kernels(f, s.m);
      ASSERT_FALSE(kernels.empty()) << ir::weight_format_name(f) << " m " << s.m;
      for (const CudaMatmulKernel* kern : kernels) {
        DeviceArray<std::byte> scratch(matmul_scratch_bytes(*kern, s.m, s.n, s.k) + 16);
        ASSERT_TRUE(launch_matmul(*kern, handle, dx.get(), s.m, s.k, dw.get(), s.n, dbias.get(), dy.get(),
                                  scratch.get(), nullptr));
        // fp32 activations (and integer weights widened exactly): only summation order differs.
        // Rounded activations: fp16 2^-11, bf16 2^-8 per element (and for integer weights the
        // fp16 rounding of s * q), averaging over k terms. int8 activations (gemv_q8, m = 1):
        // up to 1/254 of each run of 16's largest, averaging likewise; fp8's gemv_h2 (the same
        // algorithm) fp16 activations and sums of 16. e4m3 activations (gemm_fp8): up to 2^-4 of
        // each activation.
        const bool q8 = kern->algo == CudaMatmulAlgo::kGemvQ8 && s.m == 1;
        const double tol = kern->algo == CudaMatmulAlgo::kGemmFp8         ? 8e-2
                           : q8                                           ? 1e-2
                           : !cuda_matmul_kernel_rounds_activations(*kern) ? 1e-5
                           : f == ir::WeightFormat::kBF16                 ? 1.5e-2
                                                                          : 2e-3;
        EXPECT_LE(rel_error(dy.download(), want), tol)
            << kern->name << " m " << s.m << " n " << s.n << " k " << s.k;
      }
    }
  }
  cublasDestroy(handle);
}

// The integer formats' gemm kernel: up to kGemmDqMaxRows rows, gemm_dq multiplies the operands of
// the widened copy's cuBLAS product (the same fp16 activations and, for the group formats, the same
// widened weights) in its own tiles, so only the order of the fp32 sums differs; i8c multiplies the
// integers and scales the sums, where the copy rounds each s * q to fp16 (about 2^-12 of each
// weight). More rows, and shapes gemm_dq does not take (an odd count of 128-groups), run as the
// widened copy's product, bit for bit.
TEST(CudaMatmul, IntegerGemmMatchesProductOfWidenedCopy) {
  KILN_REQUIRE_GPU();
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{8, 200, 256}, {37, 128, 1024}, {64, 300, 512}, {3, 64, 256},
                          {50, 33, 384}, {65, 64, 256},   {130, 77, 768}};
  for (ir::WeightFormat f : {ir::WeightFormat::kI8Channel, ir::WeightFormat::kI8Group32, ir::WeightFormat::kI8Group128,
                             ir::WeightFormat::kI4Group32, ir::WeightFormat::kI4Group128}) {
    const auto kernels = cuda_matmul_kernels(f, 128);
    ASSERT_EQ(kernels.size(), 2u);
    const CudaMatmulKernel& gemm = *kernels[1];
    ASSERT_EQ(gemm.algo, CudaMatmulAlgo::kDequantGemm);
    for (const Shape& s : shapes) {
      if (!ir::weight_format_fits(f, s.k)) continue;
      const auto [x, bias, w] = random_matmul_operands(f, s.m, s.n, s.k, 21);
      DeviceArray<float> dx(x), dbias(bias), want(static_cast<size_t>(s.m * s.n)), got(static_cast<size_t>(s.m * s.n));
      DeviceArray<std::byte> dw(w), wide(static_cast<size_t>(s.n * s.k) * 2);
      DeviceArray<std::byte> scratch(matmul_scratch_bytes(gemm, s.m, s.n, s.k) + 16);
      launch_dequantize(f, dw.get(), s.n, s.k, wide.get(), /*to_half=*/true, nullptr);
      ASSERT_TRUE(launch_gemm(handle, ir::WeightFormat::kF16, GemmActivations::kRounded, dx.get(), s.m, s.k, wide.get(),
                              s.n, dbias.get(), want.get(), scratch.get(), nullptr));
      ASSERT_TRUE(launch_matmul(gemm, handle, dx.get(), s.m, s.k, dw.get(), s.n, dbias.get(), got.get(),
                                scratch.get(), nullptr));
      const bool takes = gemm_dq_fits(f, s.m, s.k, dw.get());
      const std::string what = std::string(gemm.name) + " m " + std::to_string(s.m) + " n " + std::to_string(s.n) +
                               " k " + std::to_string(s.k);
      // k in steps of 128; the 128-groups' rows also in an even number of blocks (4-byte aligned rows).
      const bool g128 = f == ir::WeightFormat::kI4Group128 || f == ir::WeightFormat::kI8Group128;
      EXPECT_EQ(takes, s.m <= kGemmDqMaxRows && s.k % (g128 ? 256 : 128) == 0) << what;
      if (takes) {
        EXPECT_LE(rel_error(got.download(), want.download()), f == ir::WeightFormat::kI8Channel ? 1e-3 : 2e-6) << what;
      } else {
        EXPECT_EQ(got.download(), want.download()) << what << " runs as the widened copy's product";
      }
    }
  }
  cublasDestroy(handle);
}

TEST(CudaMatmul, ProductOfRoundedActivationsEqualsProductThatRoundsThem) {
  KILN_REQUIRE_GPU();
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int64_t m = 37, n = 80, k = 1024;
  for (ir::WeightFormat f : {ir::WeightFormat::kF16, ir::WeightFormat::kBF16}) {
    for (const CudaMatmulKernel* kern : cuda_matmul_kernels(f, 128)) {
      const ActivationType t = matmul_input_type(*kern);
      if (t == ActivationType::kF32) {
        EXPECT_FALSE(launch_matmul_16_in(*kern, handle, nullptr, m, k, nullptr, n, nullptr, nullptr, false, nullptr))
            << kern->name << " reads fp32 activations";
        continue;
      }
      EXPECT_EQ(t, f == ir::WeightFormat::kBF16 ? ActivationType::kBF16 : ActivationType::kF16) << kern->name;
      const auto x = random_floats(static_cast<size_t>(m * k), 42);
      const auto wf = random_floats(static_cast<size_t>(n * k), 43);
      const auto bias = random_floats(static_cast<size_t>(n), 44);
      std::vector<std::byte> w(static_cast<size_t>(n) * ir::weight_format_row_bytes(f, k));
      ir::weight_quantize(f, wf.data(), n, k, w.data());
      std::vector<uint16_t> x16(x.size());
      for (size_t i = 0; i < x.size(); ++i) x16[i] = rounded_bits(x[i], t);
      DeviceArray<float> dx(x), dbias(bias), want(static_cast<size_t>(m * n)), got(static_cast<size_t>(m * n));
      DeviceArray<uint16_t> dx16(x16), want16(static_cast<size_t>(m * n)), got16(static_cast<size_t>(m * n));
      DeviceArray<std::byte> dw(w), scratch(matmul_scratch_bytes(*kern, m, n, k) + 16);
      ASSERT_TRUE(launch_matmul(*kern, handle, dx.get(), m, k, dw.get(), n, dbias.get(), want.get(), scratch.get(),
                                nullptr));
      ASSERT_TRUE(launch_matmul_16_in(*kern, handle, dx16.get(), m, k, dw.get(), n, dbias.get(), got.get(), false,
                                      nullptr));
      EXPECT_EQ(got.download(), want.download()) << kern->name;
      ASSERT_TRUE(launch_gemm_16_out(*kern, handle, dx.get(), m, k, dw.get(), n, want16.get(), scratch.get(), nullptr));
      ASSERT_TRUE(launch_matmul_16_in(*kern, handle, dx16.get(), m, k, dw.get(), n, nullptr, got16.get(), true,
                                      nullptr));
      EXPECT_EQ(got16.download(), want16.download()) << kern->name << " 16-bit output";
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cublasDestroy(handle);
}

TEST(CudaMatmul, GemvWithSwigluMatchesProductThenSilu) {
  KILN_REQUIRE_GPU();
  struct Shape {
    int64_t m, inter, k;
  };
  const Shape shapes[] = {{1, 83, 769}, {3, 130, 1024}, {7, 64, 5125}, {2, 9, 83}, {1, 40, 4096}, {4, 17, 96}};
  for (ir::WeightFormat f : kRowFormats) {
    for (const Shape& s : shapes) {
      if (!ir::weight_format_fits(f, s.k)) continue;
      const int64_t n = 2 * s.inter;
      const auto [x, bias, w] = random_matmul_operands(f, s.m, n, s.k, 33);
      const auto product = matmul_reference(x, s.m, s.k, w, f, n, bias);
      std::vector<float> want(static_cast<size_t>(s.m * s.inter));
      cpu::silu_mul(product.data(), s.m, s.inter, want.data());
      DeviceArray<float> dx(x), dbias(bias);
      DeviceArray<std::byte> dw(w);
      for (GemvVariant variant : {GemvVariant::kPlain, GemvVariant::kDeep, GemvVariant::kPair, GemvVariant::kQ8}) {
        DeviceArray<float> dy(want.size());
        launch_gemv_silu_mul(f, dx.get(), s.m, s.k, dw.get(), s.inter, dbias.get(), dy.get(), nullptr, variant);
        // kQ8 reduces the activations of batch-1 steps of integer and fp8 weights (see above).
        const bool q8 = variant == GemvVariant::kQ8 && s.m == 1 && ir::weight_format_is_quantized(f);
        EXPECT_LE(rel_error(dy.download(), want), q8 ? 1e-2 : 1e-5)
            << ir::weight_format_name(f) << " m " << s.m << " inter " << s.inter << " k " << s.k << " variant "
            << static_cast<int>(variant);
      }
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Batched steps of a rounded half-precision gate/up product write it in the weights' type and
// SwiGLU widens it: against the fp32 product then SwiGLU, one more rounding of gate and up.
TEST(CudaMatmul, HalfProductThenSwigluMatchesFp32Product) {
  KILN_REQUIRE_GPU();
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Shape {
    int64_t m, inter, k;
  };
  const Shape shapes[] = {{8, 84, 768}, {37, 40, 96}, {130, 256, 1024}};
  for (ir::WeightFormat f : {ir::WeightFormat::kF16, ir::WeightFormat::kBF16}) {
    for (const CudaMatmulKernel* kern : cuda_matmul_kernels(f, 128)) {
      if (!gemm_16_out_supports(*kern)) continue;
      for (const Shape& s : shapes) {
        const int64_t n = 2 * s.inter;
        const auto x = random_floats(static_cast<size_t>(s.m * s.k), 36);
        const auto wf = random_floats(static_cast<size_t>(n * s.k), 37);
        std::vector<std::byte> w(static_cast<size_t>(n) * ir::weight_format_row_bytes(f, s.k));
        ir::weight_quantize(f, wf.data(), n, s.k, w.data());
        DeviceArray<float> dx(x), product(static_cast<size_t>(s.m * n)), want(static_cast<size_t>(s.m * s.inter)),
            got(static_cast<size_t>(s.m * s.inter));
        DeviceArray<std::byte> dw(w), scratch(matmul_scratch_bytes(*kern, s.m, n, s.k) + 16),
            product16(static_cast<size_t>(s.m * n) * 2);
        ASSERT_TRUE(launch_matmul(*kern, handle, dx.get(), s.m, s.k, dw.get(), n, nullptr, product.get(),
                                  scratch.get(), nullptr));
        launch_silu_mul(product.get(), s.m, s.inter, want.get(), nullptr);
        ASSERT_TRUE(launch_gemm_16_out(*kern, handle, dx.get(), s.m, s.k, dw.get(), n, product16.get(), scratch.get(),
                                       nullptr));
        launch_silu_mul_16(product16.get(), f == ir::WeightFormat::kBF16, s.m, s.inter, got.get(), nullptr);
        // Gate and up rounded once more: 2^-11 (fp16) or 2^-8 (bf16) each.
        EXPECT_LE(rel_error(got.download(), want.download()), f == ir::WeightFormat::kBF16 ? 1.6e-2 : 2e-3)
            << kern->name << " m " << s.m << " inter " << s.inter << " k " << s.k;
      }
    }
  }
  const CudaMatmulKernel* split = cuda_matmul_kernels(ir::WeightFormat::kF16, 128)[0];
  EXPECT_FALSE(gemm_16_out_supports(*split)) << "fp32-accurate products keep fp32 outputs";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cublasDestroy(handle);
}

TEST(CudaMatmul, KernelListsSplitDecodeFromPrefill) {
  // Needs no GPU: the lists the build chooses from.
  for (ir::WeightFormat f : {ir::WeightFormat::kF32, ir::WeightFormat::kF16, ir::WeightFormat::kBF16}) {
    const auto decode = cuda_matmul_kernels(f, 1);
    const auto prefill = cuda_matmul_kernels(f, 128);
    ASSERT_EQ(decode.size(), f == ir::WeightFormat::kF32 ? 1u : 3u);
    EXPECT_EQ(decode[0]->algo, CudaMatmulAlgo::kGemv) << "an untimed build takes the plain gemv";
    if (decode.size() > 1) {
      EXPECT_EQ(decode[1]->algo, CudaMatmulAlgo::kGemvDeep);
      EXPECT_EQ(decode[2]->algo, CudaMatmulAlgo::kGemvPair);
    }
    ASSERT_FALSE(prefill.empty());
    EXPECT_EQ(prefill[0]->algo, CudaMatmulAlgo::kGemmSplit) << "an untimed build keeps fp32 activations";
    for (const auto* k : prefill) EXPECT_FALSE(cuda_matmul_kernel_is_gemv(*k)) << k->name;
    EXPECT_EQ(cuda_matmul_kernel_find(decode[0]->name), decode[0]);
  }
  for (ir::WeightFormat f : {ir::WeightFormat::kI8Channel, ir::WeightFormat::kI8Group32, ir::WeightFormat::kI4Group32,
                             ir::WeightFormat::kI4Group128}) {
    const auto decode = cuda_matmul_kernels(f, 1);
    const auto prefill = cuda_matmul_kernels(f, 128);
    ASSERT_EQ(decode.size(), 2u);
    EXPECT_EQ(decode[0]->algo, CudaMatmulAlgo::kGemv) << "an untimed build keeps fp32 activations";
    EXPECT_EQ(decode[1]->algo, CudaMatmulAlgo::kGemvQ8);
    ASSERT_EQ(prefill.size(), 2u);
    EXPECT_EQ(prefill[0]->algo, CudaMatmulAlgo::kDequantSgemm) << "an untimed build keeps fp32 activations";
    EXPECT_TRUE(cuda_matmul_kernel_rounds_activations(*prefill[1]));
  }
  const auto f8_decode = cuda_matmul_kernels(ir::WeightFormat::kF8E4M3, 1);
  const auto f8_prefill = cuda_matmul_kernels(ir::WeightFormat::kF8E4M3, 128);
  ASSERT_EQ(f8_decode.size(), 2u);
  EXPECT_EQ(f8_decode[0]->algo, CudaMatmulAlgo::kGemv) << "an untimed build keeps fp32 activations";
  EXPECT_EQ(f8_decode[1]->name, "f8.cuda.gemv_h2");
  ASSERT_EQ(f8_prefill.size(), 3u);
  EXPECT_EQ(f8_prefill[0]->algo, CudaMatmulAlgo::kDequantSgemm) << "an untimed build keeps fp32 activations";
  EXPECT_EQ(f8_prefill[2]->algo, CudaMatmulAlgo::kGemmFp8);
  EXPECT_TRUE(cuda_matmul_kernel_rounds_activations(*f8_prefill[2]));
  EXPECT_TRUE(cuda_matmul_kernels(ir::WeightFormat::kF16Panel8, 128).empty());
  EXPECT_TRUE(cuda_matmul_kernels(ir::WeightFormat::kI4Group32Panel8, 1).empty());
}

struct AttnCase {
  int num_heads, num_kv_heads, head_dim, window;
  bool alibi;
};

// What the caches of a test hold.
enum class Cache { kF32, kBF16, kE4M3 };
const char* cache_name(Cache c) { return c == Cache::kBF16 ? " bf16 cache" : c == Cache::kE4M3 ? " e4m3 cache" : ""; }

// One layer's K and V pools of random earlier entries, on the host (for cpu::attention) and on the
// device, holding floats, bf16 values or e4m3 bytes (the same random floats, rounded).
class TwoCaches {
 public:
  TwoCaches(size_t n, uint32_t seed, Cache cache) : cache_(cache) {
    for (int kv = 0; kv < 2; ++kv) {
      f_[kv] = random_floats(n, seed + static_cast<uint32_t>(kv));
      h_[kv].resize(cache == Cache::kBF16 ? n : 0);
      for (size_t i = 0; i < h_[kv].size(); ++i) h_[kv][i] = float_to_bf16(f_[kv][i]);
      b_[kv].resize(cache == Cache::kE4M3 ? n : 0);
      for (size_t i = 0; i < b_[kv].size(); ++i) b_[kv][i] = float_to_e4m3(f_[kv][i]);
      df_[kv] = std::make_unique<DeviceArray<float>>(cache == Cache::kF32 ? f_[kv] : std::vector<float>{});
      dh_[kv] = std::make_unique<DeviceArray<uint16_t>>(h_[kv]);
      db_[kv] = std::make_unique<DeviceArray<uint8_t>>(b_[kv]);
    }
  }
  cpu::KvCacheLayer host(int num_blocks, int block_size) {
    switch (cache_) {
      case Cache::kBF16: return {h_[0].data(), h_[1].data(), num_blocks, block_size, cpu::KvCacheDtype::kBF16};
      case Cache::kE4M3: return {b_[0].data(), b_[1].data(), num_blocks, block_size, cpu::KvCacheDtype::kFP8};
      case Cache::kF32: break;
    }
    return {f_[0].data(), f_[1].data(), num_blocks, block_size};
  }
  PagedKv device(int block_size, const int32_t* tables, int stride) const {
    switch (cache_) {
      case Cache::kBF16: return {dh_[0]->get(), dh_[1]->get(), block_size, tables, stride, KvCacheDtype::kBF16};
      case Cache::kE4M3: return {db_[0]->get(), db_[1]->get(), block_size, tables, stride, KvCacheDtype::kFP8};
      case Cache::kF32: break;
    }
    return {df_[0]->get(), df_[1]->get(), block_size, tables, stride};
  }
  // After the same step was stored on both: the device pools equal the host's, bit for bit.
  void expect_device_equals_host() const {
    for (int kv = 0; kv < 2; ++kv) {
      const char* what = kv == 0 ? "keys" : "values";
      switch (cache_) {
        case Cache::kBF16: EXPECT_EQ(dh_[kv]->download(), h_[kv]) << what; break;
        case Cache::kE4M3: EXPECT_EQ(db_[kv]->download(), b_[kv]) << what; break;
        case Cache::kF32: EXPECT_EQ(df_[kv]->download(), f_[kv]) << what; break;
      }
    }
  }

 private:
  Cache cache_;
  std::vector<float> f_[2];
  std::vector<uint16_t> h_[2];
  std::vector<uint8_t> b_[2];
  std::unique_ptr<DeviceArray<float>> df_[2];
  std::unique_ptr<DeviceArray<uint16_t>> dh_[2];
  std::unique_ptr<DeviceArray<uint8_t>> db_[2];
};

// A ragged step of three sequences (a prefill chunk after 5 cached tokens, a decode token after
// 37, a 40-token prompt) against cpu::attention, through the rows kernel and, where the head
// size allows, the tiles kernel; and a decode step of three sequences.
// With a bf16 or e4m3 cache, the caches hold such values on both sides.
void check_attention(const AttnCase& c, const std::vector<int32_t>& context = {5, 37, 0},
                     const std::vector<int32_t>& news = {19, 1, 40}, Cache cache = Cache::kF32) {
  const bool bf16 = cache == Cache::kBF16;
  const int block_size = 4;
  int num_blocks = 0;
  for (size_t s = 0; s < 3; ++s) num_blocks += (context[s] + news[s] + block_size - 1) / block_size;
  const int64_t kv_row = int64_t{c.num_kv_heads} * c.head_dim, q_row = int64_t{c.num_heads} * c.head_dim;
  const size_t layer_floats = static_cast<size_t>(num_blocks * block_size * kv_row);
  // Block tables: a shuffled pool, each sequence taking the blocks its positions need.
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(15));
  const int stride = num_blocks;
  std::vector<int32_t> tables(3 * stride, -1);
  size_t next = 0;
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b * block_size < context[static_cast<size_t>(s)] + news[static_cast<size_t>(s)]; ++b) {
      tables[static_cast<size_t>(s * stride + b)] = pool[next++];
    }
  }
  std::vector<const int32_t*> table_ptrs = {tables.data(), tables.data() + stride, tables.data() + 2 * stride};
  std::vector<int32_t> query_start = {0}, token_seq, positions;
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < news[static_cast<size_t>(s)]; ++i) {
      token_seq.push_back(s);
      positions.push_back(context[static_cast<size_t>(s)] + i);
    }
    query_start.push_back(static_cast<int32_t>(token_seq.size()));
  }
  const auto t = static_cast<int64_t>(token_seq.size());
  const auto q = random_floats(static_cast<size_t>(t * q_row), 16, -2.0f, 2.0f);
  const auto k = random_floats(static_cast<size_t>(t * kv_row), 17);
  const auto v = random_floats(static_cast<size_t>(t * kv_row), 18);
  // Earlier tokens' keys and values already in the cache.
  TwoCaches caches(layer_floats, 19, cache);
  const std::vector<float> slopes = c.alibi ? ir::alibi_slopes(c.num_heads) : std::vector<float>{};

  DeviceArray<float> dq(q), dk(k), dv(v), dslopes(slopes);
  DeviceArray<int32_t> dtables(tables), dseq(token_seq), dpos(positions);

  cpu::AttentionShape cs{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                         c.window, c.alibi ? slopes.data() : nullptr};
  const cpu::AttentionBatch batch{3, query_start.data(), context.data(), table_ptrs.data()};
  std::vector<float> want(static_cast<size_t>(t * q_row));
  cpu::attention(q.data(), q_row, k.data(), kv_row, v.data(), kv_row, batch, cs, caches.host(num_blocks, block_size),
                 want.data());

  AttentionShape gs{c.num_heads, c.num_kv_heads, c.head_dim, cs.scale, c.window, c.alibi ? dslopes.get() : nullptr};
  const PagedKv kv = caches.device(block_size, dtables.get(), stride);
  const StepTokens tokens{dseq.get(), dpos.get()};
  DeviceArray<float> out(static_cast<size_t>(t * q_row));
  launch_kv_cache_store(dk.get(), dv.get(), t, kv_row, tokens, kv, nullptr);
  const std::string what = "heads " + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) + " dim " +
                           std::to_string(c.head_dim) + " window " + std::to_string(c.window) +
                           (c.alibi ? " alibi" : "") + cache_name(cache);
  SCOPED_TRACE(what);
  caches.expect_device_equals_host();  // the step's keys and values, stored alike
  launch_attention_rows(dq.get(), t, tokens, gs, kv, out.get(), nullptr);
  EXPECT_LE(rel_error(out.download(), want), 2e-6) << "rows kernel, " << what;
  if (attention_tiles_supported(c.head_dim)) {
    // The step's rows in tiles of up to `rows` rows of one sequence, on the device.
    auto make_tiles = [&](int rows) {
      std::vector<AttentionTile> tiles;
      for (int s = 0; s < 3; ++s) {
        for (int r = query_start[static_cast<size_t>(s)]; r < query_start[static_cast<size_t>(s) + 1]; r += rows) {
          tiles.push_back({s, r, std::min(rows, query_start[static_cast<size_t>(s) + 1] - r), 0});
        }
      }
      std::vector<int32_t> tile_ints(tiles.size() * 4);
      std::memcpy(tile_ints.data(), tiles.data(), tile_ints.size() * 4);
      return DeviceArray<int32_t>(tile_ints);
    };
    DeviceArray<int32_t> dtiles = make_tiles(kAttentionTileRows);
    DeviceArray<float> out2(static_cast<size_t>(t * q_row));
    launch_attention_tiles(dq.get(), reinterpret_cast<const AttentionTile*>(dtiles.get()),
                           static_cast<int64_t>(dtiles.size() / 4), tokens, gs, kv, out2.get(), nullptr);
    EXPECT_LE(rel_error(out2.download(), want), 2e-6) << "tiles kernel, " << what;
    if (attention_mma_supported(c.head_dim)) {
      for (int rows : {kAttentionTileRows, 64, attention_mma_tile_rows(kv.element)}) {
        DeviceArray<int32_t> mtiles = make_tiles(rows);
        DeviceArray<float> out3(static_cast<size_t>(t * q_row));
        const auto* mt = reinterpret_cast<const AttentionTile*>(mtiles.get());
        const auto num_mt = static_cast<int64_t>(mtiles.size() / 4);
        launch_attention_mma(dq.get(), mt, num_mt, tokens, gs, kv, out3.get(), ActivationType::kF32, nullptr);
        // fp32 cache: fp16 products, q, k, v and the softmax numerators each rounded (2^-11). bf16
        // cache: bf16 products, k and v exact, q and the numerators rounded (2^-9). e4m3 cache:
        // fp16 products, k and v exact (e4m3 values are fp16 values).
        const auto got = out3.download();
        EXPECT_LE(rel_error(got, want), bf16 ? 1e-2 : 4e-3) << "tensor-core kernel, tiles of " << rows << ", " << what;
        // The 16-bit outputs that a rounded o product reads: the fp32 output rounded.
        if (attention_16_out_supported(c.head_dim)) {
          DeviceArray<uint16_t> out16(got.size());
          for (ActivationType type : {ActivationType::kF16, ActivationType::kBF16}) {
            launch_attention_mma(dq.get(), mt, num_mt, tokens, gs, kv, out16.get(), type, nullptr);
            expect_rounded(out16.download(), got, type, "tensor-core kernel, " + what);
          }
        }
      }
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
}

TEST(CudaAttention, RaggedBatchMatchesCpu) {
  KILN_REQUIRE_GPU();
  ASSERT_TRUE(attention_init());
  const AttnCase cases[] = {{4, 2, 24, 0, false}, {6, 1, 16, 5, false}, {4, 4, 7, 0, false}, {8, 2, 128, 0, true},
                            {6, 6, 20, 9, true},  {2, 1, 256, 0, false}, {5, 1, 64, 3, false}};
  for (const AttnCase& c : cases) check_attention(c);
}

TEST(CudaAttention, Bf16CacheMatchesCpuBf16Cache) {
  KILN_REQUIRE_GPU();
  ASSERT_TRUE(attention_init());
  // Both sides read the same bf16 values widened exactly: the tolerances of the fp32 cache hold.
  const AttnCase cases[] = {{4, 2, 24, 0, false}, {4, 4, 7, 0, false}, {8, 2, 128, 0, true}, {2, 1, 256, 0, false},
                            {5, 1, 64, 3, false}};
  for (const AttnCase& c : cases) check_attention(c, {5, 37, 0}, {19, 1, 40}, Cache::kBF16);
}

TEST(CudaAttention, E4m3CacheMatchesCpuE4m3Cache) {
  KILN_REQUIRE_GPU();
  ASSERT_TRUE(attention_init());
  // Both sides store the step's keys and values with the same rounding and read the same e4m3
  // values widened exactly: the tolerances of the fp32 cache hold.
  const AttnCase cases[] = {{4, 2, 24, 0, false}, {4, 4, 7, 0, false}, {8, 2, 128, 0, true}, {2, 1, 256, 0, false},
                            {5, 1, 64, 3, false}, {6, 2, 96, 5, false}, {2, 1, 32, 0, true}};
  for (const AttnCase& c : cases) check_attention(c, {5, 37, 0}, {19, 1, 40}, Cache::kE4M3);
  for (const AttnCase& c : cases) check_attention(c, {150, 3, 0}, {100, 1, 170}, Cache::kE4M3);
}

TEST(CudaAttention, LongPrefillChunksMatchCpu) {
  KILN_REQUIRE_GPU();
  ASSERT_TRUE(attention_init());
  // Prompts past one key tile of every kernel (32 and 64 keys), chunks after cached context.
  EXPECT_TRUE(attention_mma_supported(128) && attention_mma_supported(64) && attention_mma_supported(96));
  EXPECT_FALSE(attention_mma_supported(80) || attention_mma_supported(256));
  const AttnCase cases[] = {{4, 2, 64, 0, false}, {4, 4, 128, 0, false}, {6, 2, 96, 50, false}, {4, 1, 64, 0, true},
                            {2, 1, 32, 70, true}};
  for (const AttnCase& c : cases) check_attention(c, {150, 3, 0}, {100, 1, 170});
  // Over a bf16 or e4m3 cache the tensor-core kernel takes tiles of 128 rows, two row fragments a warp.
  EXPECT_EQ(attention_mma_tile_rows(KvCacheDtype::kBF16), 128);
  EXPECT_EQ(attention_mma_tile_rows(KvCacheDtype::kF32), 64);
  EXPECT_EQ(attention_mma_tile_rows(KvCacheDtype::kFP8), 128);
  for (const AttnCase& c : cases) check_attention(c, {150, 3, 0}, {100, 1, 170}, Cache::kBF16);
}

// One decode token after 3000 cached positions: the rows kernel's chunks (1024 keys) and their
// online-softmax join, and the split decode kernel.
void check_long_decode(Cache cache) {
  SCOPED_TRACE(std::string("cache:") + cache_name(cache));
  const int heads = 4, kv_heads = 2, dim = 64, block_size = 16, ctx = 3000;
  const int blocks = (ctx + 1 + block_size - 1) / block_size;
  const int64_t kv_row = kv_heads * dim, q_row = heads * dim;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(21));
  TwoCaches caches(static_cast<size_t>(blocks * block_size * kv_row), 22, cache);
  const auto q = random_floats(static_cast<size_t>(q_row), 24, -3.0f, 3.0f);
  const auto k = random_floats(static_cast<size_t>(kv_row), 25);
  const auto v = random_floats(static_cast<size_t>(kv_row), 26);
  DeviceArray<float> dq(q), dk(k), dv(v), out(static_cast<size_t>(q_row));
  DeviceArray<int32_t> dtable(table), dseq(std::vector<int32_t>{0}), dpos(std::vector<int32_t>{ctx});
  const std::vector<int32_t> query_start = {0, 1}, context = {ctx};
  const int32_t* tp = table.data();
  const cpu::AttentionShape cs{heads, kv_heads, dim, 0.125f, 0, nullptr};
  std::vector<float> want(static_cast<size_t>(q_row));
  cpu::attention(q.data(), q_row, k.data(), kv_row, v.data(), kv_row, {1, query_start.data(), context.data(), &tp}, cs,
                 caches.host(blocks, block_size), want.data());
  const PagedKv kv = caches.device(block_size, dtable.get(), blocks);
  const StepTokens tokens{dseq.get(), dpos.get()};
  launch_kv_cache_store(dk.get(), dv.get(), 1, kv_row, tokens, kv, nullptr);
  const AttentionShape gs{heads, kv_heads, dim, 0.125f, 0, nullptr};
  launch_attention_rows(dq.get(), 1, tokens, gs, kv, out.get(), nullptr);
  EXPECT_LE(rel_error(out.download(), want), 2e-6) << "rows kernel";
  // Split decode: one split, and 3 or 16 joined by the combining kernel.
  for (int splits : {1, 3, 16}) {
    DeviceArray<float> partial(attention_split_partial_floats(1, heads, dim, splits));
    DeviceArray<float> out2(static_cast<size_t>(q_row));
    launch_attention_split(dq.get(), 1, tokens, gs, kv, splits, partial.get(), out2.get(), ActivationType::kF32,
                           nullptr);
    // Summation order alone; over 3000 keys it reaches 2.6e-6 with the bf16 cache's values.
    EXPECT_LE(rel_error(out2.download(), want), cache == Cache::kF32 ? 2e-6 : 4e-6) << splits << " splits";
  }
}

TEST(CudaAttention, LongContextDecodeMatchesCpu) {
  KILN_REQUIRE_GPU();
  check_long_decode(Cache::kF32);
  check_long_decode(Cache::kBF16);
  check_long_decode(Cache::kE4M3);
}

// A batched decode step: six sequences of very different lengths, one token each, through the
// split decode kernels (one split; 4 or 64 joined, with splits that get no keys), against
// cpu::attention.
// Head sizes 64 and 128 take the grouped kernel, 96 the general one.
void check_batch_decode(const AttnCase& c, Cache cache) {
  const std::vector<int32_t> context = {0, 5, 40, 130, 700, 2100};
  const int block_size = 16, ns = static_cast<int>(context.size());
  SCOPED_TRACE("dim " + std::to_string(c.head_dim) + " window " + std::to_string(c.window) +
               (c.alibi ? " alibi" : "") + cache_name(cache));
  const int64_t kv_row = int64_t{c.num_kv_heads} * c.head_dim, q_row = int64_t{c.num_heads} * c.head_dim;
  int num_blocks = 0;
  for (int32_t n : context) num_blocks += (n + 1 + block_size - 1) / block_size;
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(31));
  const int stride = num_blocks;
  std::vector<int32_t> tables(static_cast<size_t>(ns * stride), -1), token_seq, positions, query_start = {0};
  size_t next = 0;
  for (int s = 0; s < ns; ++s) {
    for (int b = 0; b * block_size < context[static_cast<size_t>(s)] + 1; ++b) {
      tables[static_cast<size_t>(s * stride + b)] = pool[next++];
    }
    token_seq.push_back(s);
    positions.push_back(context[static_cast<size_t>(s)]);
    query_start.push_back(s + 1);
  }
  std::vector<const int32_t*> table_ptrs;
  for (int s = 0; s < ns; ++s) table_ptrs.push_back(tables.data() + s * stride);
  TwoCaches caches(static_cast<size_t>(num_blocks * block_size * kv_row), 32, cache);
  const auto q = random_floats(static_cast<size_t>(ns * q_row), 33, -3.0f, 3.0f);
  const auto k = random_floats(static_cast<size_t>(ns * kv_row), 34);
  const auto v = random_floats(static_cast<size_t>(ns * kv_row), 35);
  const std::vector<float> slopes = c.alibi ? ir::alibi_slopes(c.num_heads) : std::vector<float>{};
  const cpu::AttentionShape cs{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), c.window,
                               c.alibi ? slopes.data() : nullptr};
  std::vector<float> want(static_cast<size_t>(ns * q_row));
  cpu::attention(q.data(), q_row, k.data(), kv_row, v.data(), kv_row, {ns, query_start.data(), context.data(), table_ptrs.data()},
                 cs, caches.host(num_blocks, block_size), want.data());
  DeviceArray<float> dq(q), dk(k), dv(v), dslopes(slopes);
  DeviceArray<int32_t> dtables(tables), dseq(token_seq), dpos(positions);
  const PagedKv kv = caches.device(block_size, dtables.get(), stride);
  const StepTokens tokens{dseq.get(), dpos.get()};
  launch_kv_cache_store(dk.get(), dv.get(), ns, kv_row, tokens, kv, nullptr);
  const AttentionShape gs{c.num_heads, c.num_kv_heads, c.head_dim, cs.scale, c.window, c.alibi ? dslopes.get() : nullptr};
  for (int splits : {1, 4, 64}) {
    DeviceArray<float> partial(attention_split_partial_floats(ns, c.num_heads, c.head_dim, splits));
    DeviceArray<float> out(static_cast<size_t>(ns * q_row));
    launch_attention_split(dq.get(), ns, tokens, gs, kv, splits, partial.get(), out.get(), ActivationType::kF32,
                           nullptr);
    // Summation order alone (up to 2100 keys).
    const auto got = out.download();
    EXPECT_LE(rel_error(got, want), 4e-6) << splits << " splits";
    // The 16-bit outputs that a rounded o product reads: the fp32 output rounded.
    if (attention_16_out_supported(c.head_dim)) {
      DeviceArray<uint16_t> out16(got.size());
      for (ActivationType type : {ActivationType::kF16, ActivationType::kBF16}) {
        launch_attention_split(dq.get(), ns, tokens, gs, kv, splits, partial.get(), out16.get(), type, nullptr);
        expect_rounded(out16.download(), got, type, std::to_string(splits) + " splits");
      }
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaAttention, BatchedDecodeMatchesCpu) {
  KILN_REQUIRE_GPU();
  ASSERT_TRUE(attention_init());
  const AttnCase cases[] = {{4, 2, 128, 0, false}, {4, 4, 64, 300, false}, {4, 1, 128, 0, true}, {2, 1, 96, 0, false}};
  for (const AttnCase& c : cases) {
    for (Cache cache : {Cache::kF32, Cache::kBF16, Cache::kE4M3}) check_batch_decode(c, cache);
  }
}

}  // namespace
}  // namespace kiln::cuda
