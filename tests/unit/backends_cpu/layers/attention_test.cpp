#include "backends/cpu/layers/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "base/half.h"
#include "ir/position_encoding.h"

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 64;
  int64_t block_size = 16;
  int64_t window = 0;
  bool alibi = false;

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
  std::string str() const {
    return "heads " + std::to_string(num_heads) + "/" + std::to_string(num_kv_heads) + " dim " +
           std::to_string(head_dim) + " block " + std::to_string(block_size) + " window " +
           std::to_string(window) + (alibi ? " alibi" : "");
  }
};

// All tokens of one sequence: q: [len, num_heads*head_dim], k, v: [len, num_kv_heads*head_dim].
struct Seq {
  int64_t len = 0;
  std::vector<float> q, k, v;
};

Seq make_seq(const Shape& s, int64_t len, uint32_t seed, float q_gain = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Seq seq;
  seq.len = len;
  seq.q.resize(static_cast<size_t>(len * s.num_heads * s.head_dim));
  seq.k.resize(static_cast<size_t>(len * s.num_kv_heads * s.head_dim));
  seq.v.resize(seq.k.size());
  for (float& x : seq.q) x = q_gain * dist(rng);
  for (float& x : seq.k) x = dist(rng);
  for (float& x : seq.v) x = dist(rng);
  return seq;
}

// Dense attention in double over the whole sequence, for the query rows [first, len):
// out: [len, num_heads*head_dim] (rows before `first` left at 0).
std::vector<double> dense_reference(const Shape& s, const Seq& seq, int64_t first = 0) {
  const std::vector<float> slopes = s.alibi ? ir::alibi_slopes(s.num_heads) : std::vector<float>();
  const int64_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
  const int64_t q_row = s.num_heads * hd, kv_row = s.num_kv_heads * hd;
  std::vector<double> out(static_cast<size_t>(seq.len * q_row), 0.0);
  std::vector<double> p;
  for (int64_t pos = first; pos < seq.len; ++pos) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const float* q = seq.q.data() + pos * q_row + h * hd;
      const int64_t kvh = h / group;
      // HF Mistral: key kpos is visible from pos iff pos - kpos < window.
      int64_t lo = 0;
      while (s.window > 0 && pos - lo >= s.window) ++lo;
      p.assign(static_cast<size_t>(pos - lo + 1), 0.0);
      double max_score = -1e300;
      for (int64_t kp = lo; kp <= pos; ++kp) {
        const float* k = seq.k.data() + kp * kv_row + kvh * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
        double score = dot * s.scale();
        if (s.alibi) {
          score += static_cast<double>(slopes[static_cast<size_t>(h)]) *
                   static_cast<double>(kp - pos);
        }
        p[static_cast<size_t>(kp - lo)] = score;
        max_score = std::max(max_score, score);
      }
      double sum = 0.0;
      for (double& x : p) sum += (x = std::exp(x - max_score));
      for (int64_t kp = lo; kp <= pos; ++kp) {
        const float* v = seq.v.data() + kp * kv_row + kvh * hd;
        const double w = p[static_cast<size_t>(kp - lo)] / sum;
        double* o = out.data() + pos * q_row + h * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] += w * v[d];
      }
    }
  }
  return out;
}

// A paged cache shared by a set of sequences, each with its own block table drawn from a
// shuffled pool, so a sequence's blocks are scattered and out of order. The cache starts as NaN:
// reading a slot that was never written poisons the output.
class PagedHarness {
 public:
  // element: what the cache holds (floats unless told).
  PagedHarness(const Shape& shape, std::vector<const Seq*> seqs, uint32_t seed, KvCacheDtype element = KvCacheDtype::kF32)
      : shape_(shape), seqs_(std::move(seqs)), element_(element) {
    int64_t needed = 0;
    for (const Seq* s : seqs_) needed += (s->len + shape.block_size - 1) / shape.block_size;
    num_blocks_ = needed + 3;
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks_));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
    size_t next = 0;
    for (const Seq* s : seqs_) {
      std::vector<int32_t> table;
      for (int64_t i = 0; i < (s->len + shape.block_size - 1) / shape.block_size; ++i) {
        table.push_back(pool[next++]);
      }
      tables_.push_back(std::move(table));
      outputs_.emplace_back(static_cast<size_t>(s->len * shape.num_heads * shape.head_dim), kNan);
      progress_.push_back(0);
    }
    const auto cache_size =
        static_cast<size_t>(num_blocks_ * shape.block_size * shape.num_kv_heads * shape.head_dim);
    const bool f32 = element == KvCacheDtype::kF32, bf16 = element == KvCacheDtype::kBF16, e4m3 = element == KvCacheDtype::kFP8;
    cache_k_.assign(f32 ? cache_size : 0, kNan);
    cache_v_.assign(f32 ? cache_size : 0, kNan);
    cache_k16_.assign(bf16 ? cache_size : 0, float_to_bf16(kNan));
    cache_v16_.assign(bf16 ? cache_size : 0, float_to_bf16(kNan));
    cache_k8_.assign(e4m3 ? cache_size : 0, float_to_e4m3(kNan));
    cache_v8_.assign(e4m3 ? cache_size : 0, float_to_e4m3(kNan));
    slopes_ = shape.alibi ? ir::alibi_slopes(shape.num_heads) : std::vector<float>();
  }

  // Feeds the next `count` tokens of each listed sequence as one ragged step. q, k and v travel
  // in one fused buffer, [t, (heads + 2 kv_heads) * head_dim], as a fused QKV matmul leaves them.
  void step(const std::vector<std::pair<int, int64_t>>& parts) {
    const int64_t hd = shape_.head_dim;
    const int64_t q_cols = shape_.num_heads * hd, kv_cols = shape_.num_kv_heads * hd;
    const int64_t stride = q_cols + 2 * kv_cols;
    int64_t t = 0;
    for (const auto& [s, n] : parts) t += n;
    std::vector<float> qkv(static_cast<size_t>(t * stride), kNan);
    std::vector<int32_t> query_start = {0};
    std::vector<int32_t> context_len;
    std::vector<const int32_t*> tables;
    int64_t row = 0;
    for (const auto& [s, n] : parts) {
      const Seq& seq = *seqs_[static_cast<size_t>(s)];
      const int64_t first = progress_[static_cast<size_t>(s)];
      for (int64_t i = 0; i < n; ++i, ++row) {
        float* dst = qkv.data() + row * stride;
        std::copy_n(seq.q.data() + (first + i) * q_cols, q_cols, dst);
        std::copy_n(seq.k.data() + (first + i) * kv_cols, kv_cols, dst + q_cols);
        std::copy_n(seq.v.data() + (first + i) * kv_cols, kv_cols, dst + q_cols + kv_cols);
      }
      query_start.push_back(static_cast<int32_t>(row));
      context_len.push_back(static_cast<int32_t>(first));
      tables.push_back(tables_[static_cast<size_t>(s)].data());
    }
    std::vector<float> out(static_cast<size_t>(t * q_cols), kNan);
    const AttentionBatch batch{static_cast<int64_t>(parts.size()), query_start.data(),
                               context_len.data(), tables.data()};
    AttentionShape shape;
    shape.num_heads = shape_.num_heads;
    shape.num_kv_heads = shape_.num_kv_heads;
    shape.head_dim = hd;
    shape.scale = shape_.scale();
    shape.sliding_window = shape_.window;
    shape.alibi_slopes = shape_.alibi ? slopes_.data() : nullptr;
    attention(qkv.data(), stride, qkv.data() + q_cols, stride, qkv.data() + q_cols + kv_cols,
              stride, batch, shape, layer(), out.data());
    row = 0;
    for (const auto& [s, n] : parts) {
      auto& dst = outputs_[static_cast<size_t>(s)];
      std::copy_n(out.data() + row * q_cols, n * q_cols,
                  dst.data() + progress_[static_cast<size_t>(s)] * q_cols);
      progress_[static_cast<size_t>(s)] += n;
      row += n;
    }
  }

  // Writes the next `count` tokens of sequence s into the cache without attending.
  void store_only(int s, int64_t count) {
    const Seq& seq = *seqs_[static_cast<size_t>(s)];
    const int64_t first = progress_[static_cast<size_t>(s)];
    const int64_t kv_cols = shape_.num_kv_heads * shape_.head_dim;
    const int32_t query_start[2] = {0, static_cast<int32_t>(count)};
    const auto context = static_cast<int32_t>(first);
    const int32_t* table = tables_[static_cast<size_t>(s)].data();
    const AttentionBatch batch{1, query_start, &context, &table};
    kv_cache_store(seq.k.data() + first * kv_cols, kv_cols, seq.v.data() + first * kv_cols, kv_cols,
                   batch, shape_.num_kv_heads, shape_.head_dim, layer());
    progress_[static_cast<size_t>(s)] += count;
  }

  const std::vector<float>& output(int s) const { return outputs_[static_cast<size_t>(s)]; }
  // The cached key of sequence s at position pos, element e of its kv row, as a float.
  float cached_key(int s, int64_t pos, int64_t e) const {
    const int64_t block = tables_[static_cast<size_t>(s)][static_cast<size_t>(pos / shape_.block_size)];
    const auto i = static_cast<size_t>((block * shape_.block_size + pos % shape_.block_size) *
                                           shape_.num_kv_heads * shape_.head_dim + e);
    switch (element_) {
      case KvCacheDtype::kBF16: return bf16_to_float(cache_k16_[i]);
      case KvCacheDtype::kFP8: return e4m3_to_float(cache_k8_[i]);
      case KvCacheDtype::kF32: break;
    }
    return cache_k_[i];
  }
  // The same element as its stored byte, for an e4m3 cache.
  uint8_t cached_key_byte(int s, int64_t pos, int64_t e) const {
    const int64_t block = tables_[static_cast<size_t>(s)][static_cast<size_t>(pos / shape_.block_size)];
    return cache_k8_.at(static_cast<size_t>((block * shape_.block_size + pos % shape_.block_size) *
                                                shape_.num_kv_heads * shape_.head_dim + e));
  }

 private:
  KvCacheLayer layer() {
    switch (element_) {
      case KvCacheDtype::kBF16:
        return KvCacheLayer{cache_k16_.data(), cache_v16_.data(), num_blocks_, shape_.block_size, element_};
      case KvCacheDtype::kFP8:
        return KvCacheLayer{cache_k8_.data(), cache_v8_.data(), num_blocks_, shape_.block_size, element_};
      case KvCacheDtype::kF32: break;
    }
    return KvCacheLayer{cache_k_.data(), cache_v_.data(), num_blocks_, shape_.block_size};
  }

  Shape shape_;
  std::vector<const Seq*> seqs_;
  int64_t num_blocks_ = 0;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> outputs_;
  std::vector<int64_t> progress_;
  KvCacheDtype element_ = KvCacheDtype::kF32;
  std::vector<float> cache_k_, cache_v_, slopes_;
  std::vector<uint16_t> cache_k16_, cache_v16_;
  std::vector<uint8_t> cache_k8_, cache_v8_;
};

// Runs fn once per kernel path this CPU has (scalar always, AVX2 and AVX-512 where supported).
void for_each_isa(const std::function<void()>& fn) {
  std::vector<Isa> isas = {Isa::kScalar};
  if (isa_detect() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (isa_detect() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  for (Isa isa : isas) {
    SCOPED_TRACE(std::string("isa ") + std::string(isa_name(isa)));
    ASSERT_TRUE(isa_override(isa).is_ok());
    fn();
    ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  }
}

void expect_matches_reference(const std::vector<float>& got, const std::vector<double>& want,
                              size_t first = 0, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = first; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

TEST(Attention, PrefillMatchesDenseReference) {
  for_each_isa([] {
    for (int64_t ratio : {1, 2, 4}) {
      for (int64_t head_dim : {64, 80, 128}) {
        for (int64_t block_size : {16, 1}) {
          Shape s;
          s.num_kv_heads = 2;
          s.num_heads = 2 * ratio;
          s.head_dim = head_dim;
          s.block_size = block_size;
          SCOPED_TRACE(s.str());
          const Seq seq =
              make_seq(s, 37, static_cast<uint32_t>(ratio * 1000 + head_dim + block_size));
          PagedHarness run(s, {&seq}, 1);
          run.step({{0, seq.len}});
          expect_matches_reference(run.output(0), dense_reference(s, seq));
        }
      }
    }
  });
}

TEST(Attention, StepSplitsGiveIdenticalBits) {
  for_each_isa([] {
    for (int64_t block_size : {16, 1}) {
      for (int64_t window : {0, 6}) {
        Shape s;
        s.num_heads = 8;
        s.num_kv_heads = 2;
        s.head_dim = 80;
        s.block_size = block_size;
        s.window = window;
        SCOPED_TRACE(s.str());
        const Seq seq = make_seq(s, 45, 77);
        PagedHarness whole(s, {&seq}, 2);
        whole.step({{0, 45}});
        expect_matches_reference(whole.output(0), dense_reference(s, seq));

        PagedHarness singles(s, {&seq}, 3);
        for (int i = 0; i < 45; ++i) singles.step({{0, 1}});
        EXPECT_EQ(singles.output(0), whole.output(0)) << "one token per step";

        PagedHarness chunks(s, {&seq}, 4);
        for (int64_t n : {7, 1, 16, 3, 18}) chunks.step({{0, n}});
        EXPECT_EQ(chunks.output(0), whole.output(0)) << "chunked prefill";
      }
    }
  });
}

TEST(Attention, RaggedBatchMatchesEachSequenceAlone) {
  for_each_isa([] {
    for (int64_t block_size : {16, 1}) {
      for (int variant = 0; variant < 3; ++variant) {
        Shape s;
        s.num_heads = 4;
        s.num_kv_heads = 1;
        s.head_dim = 64;
        s.block_size = block_size;
        s.window = variant == 1 ? 9 : 0;
        s.alibi = variant == 2;
        SCOPED_TRACE(s.str());
        const Seq a = make_seq(s, 29, 10), b = make_seq(s, 3, 11), c = make_seq(s, 52, 12);
        PagedHarness batched(s, {&a, &b, &c}, 5);
        batched.step({{0, 10}, {1, 1}, {2, 20}});
        batched.step({{2, 17}, {0, 1}});
        batched.step({{1, 2}, {0, 18}, {2, 1}});
        batched.step({{2, 14}});
        const Seq* seqs[] = {&a, &b, &c};
        for (int i = 0; i < 3; ++i) {
          PagedHarness alone(s, {seqs[i]}, static_cast<uint32_t>(20 + i));
          alone.step({{0, seqs[i]->len}});
          EXPECT_EQ(batched.output(i), alone.output(0)) << "sequence " << i;
          expect_matches_reference(batched.output(i), dense_reference(s, *seqs[i]));
        }
      }
    }
  });
}

TEST(Attention, SlidingWindowMatchesReference) {
  for_each_isa([] {
    for (int64_t block_size : {16, 1}) {
      for (int64_t window : {1, 5, 16, 17, 100}) {
        Shape s;
        s.num_heads = 4;
        s.num_kv_heads = 2;
        s.head_dim = 128;
        s.block_size = block_size;
        s.window = window;
        SCOPED_TRACE(s.str());
        const Seq seq = make_seq(s, 40, static_cast<uint32_t>(window));
        PagedHarness run(s, {&seq}, 6);
        for (int64_t n : {13, 1, 26}) run.step({{0, n}});
        expect_matches_reference(run.output(0), dense_reference(s, seq));
        if (window == 1) {
          // Each token sees only itself: the output is its own value row, exactly.
          const int64_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
          for (int64_t pos = 0; pos < seq.len; ++pos) {
            for (int64_t h = 0; h < s.num_heads; ++h) {
              for (int64_t d = 0; d < hd; ++d) {
                ASSERT_EQ(run.output(0)[static_cast<size_t>((pos * s.num_heads + h) * hd + d)],
                          seq.v[static_cast<size_t>((pos * s.num_kv_heads + h / group) * hd + d)]);
              }
            }
          }
        }
      }
    }
  });
}

TEST(Attention, AlibiMatchesReference) {
  for_each_isa([] {
    for (int64_t window : {0, 9}) {
      Shape s;
      s.num_heads = 6;  // not a power of two: exercises the interleaved slopes
      s.num_kv_heads = 3;
      s.head_dim = 80;
      s.block_size = 16;
      s.window = window;
      s.alibi = true;
      SCOPED_TRACE(s.str());
      const Seq seq = make_seq(s, 33, 99);
      PagedHarness run(s, {&seq}, 7);
      run.step({{0, 20}});
      run.step({{0, 13}});
      expect_matches_reference(run.output(0), dense_reference(s, seq));
    }
  });
}

TEST(Attention, LongContextDecode) {
  // Decode after 3000 cached tokens, with sharp scores (a large query gain), so the softmax
  // spans many orders of magnitude and the exponential's accuracy over its range shows.
  for_each_isa([] {
    Shape s;
    s.num_heads = 4;
    s.num_kv_heads = 1;
    s.head_dim = 128;
    s.block_size = 16;
    const Seq seq = make_seq(s, 3001, 5, 8.0f);
    PagedHarness run(s, {&seq}, 8);
    run.store_only(0, 2999);
    run.step({{0, 1}});
    run.step({{0, 1}});
    const auto want = dense_reference(s, seq, 2999);
    const size_t first = static_cast<size_t>(2999 * s.num_heads * s.head_dim);
    expect_matches_reference(run.output(0), want, first, 2e-5);
  });
}

TEST(Attention, ThreadCountDoesNotChangeBits) {
  // How a kv head's query heads are split into tasks depends on the thread count; the bits must
  // not. A decode row (few tasks, heads split) and a prefill (many tasks, heads kept together).
  // AVX-512 takes up to four heads of 64 (two of 128) at once: groups of 4, 7 and 2 heads are
  // split as 4, 4+3 and 2, or one head a task with many threads; 80 goes one head at a time.
  for_each_isa([] {
    for (auto [num_heads, head_dim] : {std::pair<int64_t, int64_t>{8, 64}, {14, 64}, {4, 128}, {14, 128}, {6, 80}}) {
      Shape s;
      s.num_heads = num_heads;
      s.num_kv_heads = 2;
      s.head_dim = head_dim;
      SCOPED_TRACE(s.str());
      const Seq seq = make_seq(s, 40, 31);
      std::vector<std::vector<float>> results;
      const int saved = omp_get_max_threads();
      for (int threads : {1, 3, 8, 14}) {
        omp_set_num_threads(threads);
        PagedHarness run(s, {&seq}, 9);
        run.step({{0, 38}});
        run.step({{0, 1}});
        run.step({{0, 1}});
        results.push_back(run.output(0));
      }
      omp_set_num_threads(saved);
      for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << "run " << i;
      expect_matches_reference(results[0], dense_reference(s, seq));
    }
  });
}

// Every kernel path this CPU has, AVX-512 included.
std::vector<Isa> isas_here() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (isa_detect() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (isa_detect() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

// A narrow cache element and the value it stores for x.
struct NarrowElement {
  KvCacheDtype element;
  const char* name;
  float (*round)(float);
};
const NarrowElement kNarrowElements[] = {
    {KvCacheDtype::kBF16, "bf16", [](float x) { return bf16_to_float(float_to_bf16(x)); }},
    {KvCacheDtype::kFP8, "e4m3", [](float x) { return e4m3_to_float(float_to_e4m3(x)); }},
};

TEST(Attention, NarrowCacheGivesTheBitsOfAnFp32CacheHoldingTheRoundedValues) {
  // A bf16 or e4m3 cache stores each key and value rounded to nearest even and widens it exactly
  // when read; the arithmetic is the fp32 path's. So with keys and values that are already such
  // values, both caches give the same bits on the SIMD paths (head_dim 80: AVX-512 falls back).
  for (const NarrowElement& narrow : kNarrowElements) {
    for (Isa isa : isas_here()) {
      SCOPED_TRACE(std::string(narrow.name) + " isa " + std::string(isa_name(isa)));
      ASSERT_TRUE(isa_override(isa).is_ok());
      for (int64_t head_dim : {64, 80, 128}) {
        Shape s;
        s.num_heads = 6;
        s.num_kv_heads = 2;
        s.head_dim = head_dim;
        s.block_size = 16;
        SCOPED_TRACE(s.str());
        Seq seq = make_seq(s, 41, static_cast<uint32_t>(head_dim));
        for (auto* x : {&seq.k, &seq.v}) {
          for (float& f : *x) f = narrow.round(f);
        }
        PagedHarness f32(s, {&seq}, 5), cached(s, {&seq}, 5, narrow.element);
        for (PagedHarness* run : {&f32, &cached}) {
          run->step({{0, 37}});
          run->step({{0, 1}});
          run->step({{0, 3}});
        }
        if (isa == Isa::kScalar) {
          // The portable loops leave the order of their reductions to the compiler's vectoriser,
          // which may differ between the element types: close, not bit-equal.
          const std::vector<float>& want = f32.output(0);
          expect_matches_reference(cached.output(0), std::vector<double>(want.begin(), want.end()), 0, 1e-5);
        } else {
          EXPECT_EQ(cached.output(0), f32.output(0));
        }
      }
      ASSERT_TRUE(isa_override(std::nullopt).is_ok());
    }
  }
}

TEST(Attention, NarrowCacheStoresRoundedValuesAndStaysCloseToTheReference) {
  Shape s;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  const Seq seq = make_seq(s, 33, 12);
  const int64_t kv_cols = s.num_kv_heads * s.head_dim;
  for (const NarrowElement& narrow : kNarrowElements) {
    for (Isa isa : isas_here()) {
      SCOPED_TRACE(std::string(narrow.name) + " isa " + std::string(isa_name(isa)));
      ASSERT_TRUE(isa_override(isa).is_ok());
      PagedHarness run(s, {&seq}, 3, narrow.element);
      run.step({{0, 32}});
      run.step({{0, 1}});
      for (int64_t pos = 0; pos < seq.len; ++pos) {
        for (int64_t e = 0; e < kv_cols; ++e) {
          const float want = seq.k[static_cast<size_t>(pos * kv_cols + e)];
          ASSERT_EQ(run.cached_key(0, pos, e), narrow.round(want)) << pos << " " << e;
        }
      }
      // bf16 keeps 8 bits of mantissa, e4m3 4: the outputs move by about 2^-8 (2^-4) of their
      // scale, not more.
      expect_matches_reference(run.output(0), dense_reference(s, seq), 0,
                               narrow.element == KvCacheDtype::kBF16 ? 2e-2 : 8e-2);
      ASSERT_TRUE(isa_override(std::nullopt).is_ok());
    }
  }
}

TEST(Attention, E4m3CacheStoresEveryValueAsTheScalarConversionDoes) {
  // The stores convert 16 floats at a time on AVX-512: every byte must be float_to_e4m3's, at
  // ties, at the subnormal boundary, past 448 (saturated), at infinities and NaN.
  Shape s;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 64;
  Seq seq = make_seq(s, 20, 4);
  std::vector<float> special = {0.0f, -0.0f, 448.0f, -448.0f, 449.0f, 464.0f, 465.0f, 1e6f, -1e30f,
                                std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                kNan, 0x1p-6f, 0x1p-7f, 0x1p-9f, 0x1p-10f, 0x3p-11f, 0x1p-11f, 1e-30f,
                                1.0625f, 1.1875f, -1.0625f, 0x1.fp-7f, 0x1.ep-7f, 0x1.1p-6f, 240.0f, 232.0f};
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> bits;
  while (special.size() < seq.k.size()) special.push_back(std::bit_cast<float>(bits(rng)));
  std::copy(special.begin(), special.end(), seq.k.begin());
  for (Isa isa : isas_here()) {
    SCOPED_TRACE(std::string("isa ") + std::string(isa_name(isa)));
    ASSERT_TRUE(isa_override(isa).is_ok());
    PagedHarness run(s, {&seq}, 1, KvCacheDtype::kFP8);
    run.store_only(0, seq.len);
    for (int64_t pos = 0; pos < seq.len; ++pos) {
      for (int64_t e = 0; e < s.head_dim; ++e) {
        const float x = seq.k[static_cast<size_t>(pos * s.head_dim + e)];
        ASSERT_EQ(run.cached_key_byte(0, pos, e), float_to_e4m3(x)) << x;
      }
    }
    ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  }
}

}  // namespace
}  // namespace kiln::cpu
