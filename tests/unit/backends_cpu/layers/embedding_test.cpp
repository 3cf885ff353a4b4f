#include "backends/cpu/layers/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

constexpr ir::WeightFormat kAllFormats[] = {
    ir::WeightFormat::kF32,       ir::WeightFormat::kF16,        ir::WeightFormat::kBF16,
    ir::WeightFormat::kI8Channel, ir::WeightFormat::kI8Group32,  ir::WeightFormat::kI8Group128,
    ir::WeightFormat::kI4Group32, ir::WeightFormat::kI4Group128, ir::WeightFormat::kF8E4M3,
};

// Largest error the format's rounding may leave on a weight of magnitude <= 1, relative to 1.
double format_tolerance(ir::WeightFormat f) {
  switch (f) {
    case ir::WeightFormat::kF32: return 0.0;
    case ir::WeightFormat::kF16: return 1.0 / 2048;
    case ir::WeightFormat::kBF16: return 1.0 / 256;
    case ir::WeightFormat::kI8Channel:
    case ir::WeightFormat::kI8Group32:
    case ir::WeightFormat::kI8Group128: return 0.5 / 127 + 1e-3;  // half a step, plus fp16 scale
    case ir::WeightFormat::kI4Group32:
    case ir::WeightFormat::kI4Group128: return 0.5 / 7 + 1e-3;
    case ir::WeightFormat::kF8E4M3: return 1.0 / 16 + 1e-6;  // half a step of 3 mantissa bits
    default: break;  // panel formats hold matmul weights only, never an embedding table
  }
  ADD_FAILURE() << "not an embedding format";
  return 0.0;
}

TEST(Embedding, EveryFormatMatchesReferenceDequantiser) {
  const int64_t vocab = 61, hidden = 256;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> table(static_cast<size_t>(vocab * hidden));
  for (float& v : table) v = dist(rng);
  // Repeats, the first and the last row, and enough tokens for the multi-threaded path.
  std::vector<int32_t> ids = {0, 60, 5, 5, 17, 0, 33};
  std::uniform_int_distribution<int32_t> id_dist(0, static_cast<int32_t>(vocab - 1));
  while (ids.size() < 200) ids.push_back(id_dist(rng));
  const auto t = static_cast<int64_t>(ids.size());

  for (ir::WeightFormat format : kAllFormats) {
    SCOPED_TRACE(std::string(ir::weight_format_name(format)));
    const size_t row_bytes = ir::weight_format_row_bytes(format, hidden);
    std::vector<std::byte> stored(row_bytes * static_cast<size_t>(vocab));
    ir::weight_quantize(format, table.data(), vocab, hidden, stored.data());

    std::vector<float> y(static_cast<size_t>(t * hidden), kNan);
    embedding(stored.data(), format, hidden, ids.data(), t, y.data());

    std::vector<float> row(static_cast<size_t>(hidden));
    for (int64_t i = 0; i < t; ++i) {
      const auto id = static_cast<size_t>(ids[static_cast<size_t>(i)]);
      ir::weight_dequantize_row(format, stored.data() + id * row_bytes, hidden, row.data());
      for (int64_t j = 0; j < hidden; ++j) {
        const float got = y[static_cast<size_t>(i * hidden + j)];
        ASSERT_EQ(got, row[static_cast<size_t>(j)]) << "token " << i << " dim " << j;
        // And close to the original weight, within what the format can represent.
        ASSERT_NEAR(got, table[id * hidden + static_cast<size_t>(j)], format_tolerance(format));
      }
    }
  }
}

TEST(Embedding, OddHiddenSizeForFloatFormats) {
  const int64_t vocab = 7, hidden = 83;
  std::vector<float> table(static_cast<size_t>(vocab * hidden));
  // Quarter steps below 64 need at most 8 significant bits: exact in f16 and bf16.
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i % 256) * 0.25f;
  const std::vector<int32_t> ids = {6, 0, 3};
  for (ir::WeightFormat format :
       {ir::WeightFormat::kF32, ir::WeightFormat::kF16, ir::WeightFormat::kBF16}) {
    std::vector<std::byte> stored(ir::weight_format_row_bytes(format, hidden) * vocab);
    ir::weight_quantize(format, table.data(), vocab, hidden, stored.data());
    std::vector<float> y(static_cast<size_t>(3 * hidden), kNan);
    embedding(stored.data(), format, hidden, ids.data(), 3, y.data());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < hidden; ++j) {
        ASSERT_EQ(y[static_cast<size_t>(i * hidden + j)],
                  table[static_cast<size_t>(ids[static_cast<size_t>(i)] * hidden + j)]);
      }
    }
  }
}

TEST(GatherRows, CopiesSelectedRows) {
  for (int64_t cols : {1, 7, 769, 5125}) {
    const int64_t rows_in = 11;
    std::vector<float> x(static_cast<size_t>(rows_in * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    const std::vector<int32_t> rows = {10, 0, 4, 4, 9, 1, 2, 3};
    std::vector<float> y(rows.size() * static_cast<size_t>(cols), kNan);
    gather_rows(x.data(), cols, rows.data(), static_cast<int64_t>(rows.size()), y.data());
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(y[r * static_cast<size_t>(cols) + static_cast<size_t>(c)],
                  x[static_cast<size_t>(rows[r] * cols + c)]);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
