// Device sampling: the next-token choice a backend makes on its own device, so that a step
// returns one token id per logits row instead of the rows themselves. The caller (the serving
// engine, the generator) describes each row's choice in a SamplingBatch: the same knobs as
// llm::Sampler (logit bias, repetition / presence / frequency penalties, temperature, top-k,
// top-p, min-p) plus the row's random draw, which the caller takes from the sequence's own
// generator, so a seed means the same thing on every backend.
//
// The algorithm, for one row a[vocab] of logits (sample_row() below is its host reference; a
// device kernel computes the same values with the same operations, so both give the same token):
//   1. NaN -> -inf; with a token mask (structured outputs), the tokens it does not allow -> -inf;
//      a[t] += bias for each (t, bias); each penalty token once: repetition
//      (a > 0 ? a / r : a * r), then, when generated c > 0 times, a -= fma(frequency, c, presence).
//   2. m = max a, first at `argmax`. m = -inf: no token (-1). Temperature 0: argmax.
//      m = +inf: the +inf tokens share everything (they become 0, the others -inf; m = 0).
//   3. top-k: keep the k largest a, ties to lower ids.
//   4. weights w = exp((a - m) / T) by device_sampling_exp() (1 at the maximum, 0 below e^-87),
//      and each weight's mass, the fixed-point floor(w * 2^44): sums of masses are exact integers,
//      so no summation order can change a decision.
//   5. min-p: drop w < min_p. top-p: with M the mass after top-k, keep the smallest most-likely-
//      first set (ties to lower ids) whose mass reaches ceil(top_p * M); all of it if the
//      tokens left hold less.
//   6. the draw: with K the kept mass, r = min(floor(uniform * K), K - 1); the token is the first,
//      in id order, whose cumulative mass exceeds r.
// It draws from the same distribution as llm::Sampler, up to weights below 2^-44 of the largest
// (never drawn here). The two walk their candidates in different orders, so a given draw may
// pick different tokens from the two: device sampling reproduces its own seeds exactly.
//
// Ownership: a SamplingBatch is plain data the caller fills and owns; a backend copies it to its
// device during run_step_sampled().
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/status.h"

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::runtime {

// One logits row's choice. Plain data with a fixed layout: backends copy an array of them as is.
struct RowSampling {
  float temperature = 0.0f;  // 0 = greedy (argmax after bias and penalties)
  int32_t top_k = 0;         // 0 or >= vocab = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t bias_begin = 0, bias_count = 0;        // entries of SamplingBatch::bias_*
  int32_t penalty_begin = 0, penalty_count = 0;  // entries of SamplingBatch::penalty_*
  int32_t mask_begin = -1;  // the row's first word in SamplingBatch::mask_words; -1: every token allowed
  double uniform = 0.0;     // the row's draw in [0, 1); unused when greedy
};

// The rows of one step, in logits-row order, and the sparse lists they point into.
struct SamplingBatch {
  std::vector<RowSampling> rows;
  std::vector<int32_t> bias_tokens;
  std::vector<float> bias_values;
  // Each row's distinct penalty tokens: with the repetition penalty on, every token of its prompt
  // and generated text; else the generated ones. Count: times generated (0: in the prompt only).
  std::vector<int32_t> penalty_tokens;
  std::vector<int32_t> penalty_counts;
  // The allowed tokens of masked rows, mask_stride words a row: bit t % 64 of word t / 64 set
  // when token t may be chosen; a token beyond the row's words is not allowed.
  std::vector<uint64_t> mask_words;
  int32_t mask_stride = 0;
  // Rows whose logits the caller also wants on the host, ascending (a row whose choice needs
  // logprobs: the caller samples it there; the device's choice for it is dropped).
  std::vector<int32_t> host_rows;

  void clear();
  // Appends a greedy row whose lists start at the lists' current ends.
  RowSampling& add_row();
  // Gives `row` the mask `words` (every masked row of a batch has as many words).
  void set_mask(RowSampling& row, std::span<const uint64_t> words);
};

// What a sampled step returns: one token id a row (-1: the row had no finite logit) and the
// logits of the batch's host_rows, as the model produced them; host memory, valid until the
// backend's next step.
struct SampledStep {
  std::span<const int32_t> ids;   // [num_rows]
  std::span<const float> logits;  // [host_rows.size(), vocab]
};

// Checks a batch against a step of `num_rows` rows: one entry per row, list and mask ranges
// inside the lists, parameters in range, host rows ascending and in the step. Token ids outside the
// vocabulary are ignored by sampling, as llm::Sampler ignores them. kInvalidArgument naming the
// row and field.
Status validate(const SamplingBatch& batch, int64_t num_rows);

// A float's bits and back, on host and device alike.
KILN_HOST_DEVICE inline uint32_t device_sampling_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
#endif
}
KILN_HOST_DEVICE inline float device_sampling_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
#endif
}

// e^x for x <= 0, from fma, rint and exact scalings only, so host and device compute the same
// float: exactly 1 at 0, within 2 ulp elsewhere, 0 below -87 (and for NaN).
KILN_HOST_DEVICE inline float device_sampling_exp(float x) {
  if (!(x >= -87.0f)) return 0.0f;
  const float n = rintf(x * 1.44269504f);  // x / ln 2, to the nearest integer in [-126, 0]
  float r = fmaf(n, -0.693145751953125f, x);  // ln 2 in two parts: the high one exact in 16 bits
  r = fmaf(n, -1.428606765330187e-06f, r);    // |r| <= ln 2 / 2
  float p = 1.0f / 720.0f;                    // Taylor series of e^r to r^6: error below r^7 / 5040
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return p * device_sampling_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);  // p 2^n
}

// A weight's fixed-point mass, floor(w * 2^44) for w in [0, 1].
KILN_HOST_DEVICE inline uint64_t device_sampling_mass(float w) { return static_cast<uint64_t>(w * 0x1p44f); }

// Unsigned keys in the order of the floats they come from (-inf lowest), for radix selection.
KILN_HOST_DEVICE inline uint32_t device_sampling_key(float v) {
  const uint32_t bits = device_sampling_bits(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Whether row `p` of `batch` allows token `t` (no mask: every token).
KILN_HOST_DEVICE inline bool device_sampling_allowed(const RowSampling& p, const uint64_t* mask_words,
                                                     int32_t mask_stride, int64_t t) {
  if (p.mask_begin < 0) return true;
  if (t >= static_cast<int64_t>(mask_stride) * 64) return false;
  return ((mask_words[p.mask_begin + (t >> 6)] >> (t & 63)) & 1u) != 0;
}

// The reference: steps 1-6 above for row `r` of `batch`, on the host. `logits` [vocab] is
// overwritten (with the weights). Returns the token, or -1 when every logit is -inf or NaN.
int32_t sample_row(std::span<float> logits, const SamplingBatch& batch, size_t r);

}  // namespace kiln::runtime
