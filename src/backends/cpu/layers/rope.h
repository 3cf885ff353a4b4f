// Rotary position embedding (RoPE) for the CPU backend: the rotation, by the frequencies that
// ir/position_encoding.h computes for each rope type.
//
// Rotation is the "rotate half" form of HF Llama: within each head, dimension j < rotary_dim/2
// is paired with j + rotary_dim/2 and the pair is rotated by the angle pos * inv_freq[j].
// Dimensions from rotary_dim to head_dim pass through unchanged (partial rotary, as GPT-NeoX
// and Phi use it).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::cpu {

// x, y: [t, num_heads * head_dim] rows; positions: [t]; inv_freq: [rotary_dim / 2].
// y may equal x (in place); other overlaps are not allowed. rotary_dim is even, <= head_dim.
// The angle is float(pos) * inv_freq[j] in fp32, as HF computes it, then cos and sin.
void rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, float* y);

// The cosines and sines rope() computes (two libm calls per frequency, token and node), kept
// per position for fixed frequencies, so that a model's rope nodes look them up. Rows are
// computed as positions first need them (grow() doubles the table), with the very operations
// of rope(), so results are the same bits. Not thread-safe: grow from one thread.
class RopeTable {
 public:
  explicit RopeTable(std::vector<float> inv_freq) : inv_freq_(std::move(inv_freq)) {}
  // Makes rows [0, positions) available.
  void grow(int64_t positions);
  int64_t positions() const { return static_cast<int64_t>(cos_sin_.size() / (2 * inv_freq_.size())); }
  // [cos of the rotary_dim / 2 angles | their sines]; pos < positions().
  const float* row(int64_t pos) const { return cos_sin_.data() + pos * 2 * static_cast<int64_t>(inv_freq_.size()); }
  int64_t rotary_dim() const { return 2 * static_cast<int64_t>(inv_freq_.size()); }

 private:
  std::vector<float> inv_freq_;
  std::vector<float> cos_sin_;
};

// rope() with the angles from `table` (grown to cover the positions first).
void rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, const int32_t* positions,
          RopeTable& table, float* y);

}  // namespace kiln::cpu
