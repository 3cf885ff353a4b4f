#include "runtime/device_sampling.h"

#include <algorithm>
#include <cfloat>
#include <limits>
#include <string>
#include <utility>

namespace kiln::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Keeps every value whose key is above `tau` and, in id order, the values whose key equals tau
// while the count (or mass) of those kept before is below `need`; sets the rest to `dropped`.
template <typename KeyFn>
void keep_above_and_first_ties(std::span<float> v, KeyFn key, uint32_t tau, uint64_t need, float dropped,
                               bool by_mass) {
  uint64_t ties = 0;  // count or mass of the ties kept before this one
  for (float& x : v) {
    const uint32_t k = key(x);
    if (k > tau) continue;
    if (k == tau && ties < need) {
      ties += by_mass ? device_sampling_mass(x) : 1;
      continue;
    }
    x = dropped;
  }
}

}  // namespace

void SamplingBatch::clear() {
  rows.clear();
  bias_tokens.clear();
  bias_values.clear();
  penalty_tokens.clear();
  penalty_counts.clear();
  mask_words.clear();
  mask_stride = 0;
  host_rows.clear();
}

RowSampling& SamplingBatch::add_row() {
  RowSampling& row = rows.emplace_back();
  row.bias_begin = static_cast<int32_t>(bias_tokens.size());
  row.penalty_begin = static_cast<int32_t>(penalty_tokens.size());
  return row;
}

void SamplingBatch::set_mask(RowSampling& row, std::span<const uint64_t> words) {
  KILN_CHECK(mask_stride == 0 || static_cast<size_t>(mask_stride) == words.size());
  mask_stride = static_cast<int32_t>(words.size());
  row.mask_begin = static_cast<int32_t>(mask_words.size());
  mask_words.insert(mask_words.end(), words.begin(), words.end());
}

Status validate(const SamplingBatch& batch, int64_t num_rows) {
  if (static_cast<int64_t>(batch.rows.size()) != num_rows) {
    return invalid_argument("the step has " + std::to_string(num_rows) + " logits rows but " +
                            std::to_string(batch.rows.size()) + " sampling rows");
  }
  if (batch.bias_tokens.size() != batch.bias_values.size() ||
      batch.penalty_tokens.size() != batch.penalty_counts.size()) {
    return invalid_argument("sampling lists of unequal lengths");
  }
  const auto in_list = [](int64_t begin, int64_t count, size_t size) {
    return begin >= 0 && count >= 0 && begin + count <= static_cast<int64_t>(size);
  };
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    const RowSampling& p = batch.rows[r];
    const std::string which = "sampling row " + std::to_string(r) + ": ";
    if (!in_list(p.bias_begin, p.bias_count, batch.bias_tokens.size()) ||
        !in_list(p.penalty_begin, p.penalty_count, batch.penalty_tokens.size())) {
      return invalid_argument(which + "list range outside the batch's lists");
    }
    if (p.mask_begin >= 0 && (batch.mask_stride <= 0 ||
                              static_cast<int64_t>(p.mask_begin) + batch.mask_stride >
                                  static_cast<int64_t>(batch.mask_words.size()))) {
      return invalid_argument(which + "mask range outside the batch's mask words");
    }
    if (p.mask_begin < -1) return invalid_argument(which + "mask_begin");
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return invalid_argument(which + "temperature");
    if (p.top_k < 0) return invalid_argument(which + "top_k");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return invalid_argument(which + "top_p");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return invalid_argument(which + "min_p");
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty) ||
        !std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
      return invalid_argument(which + "penalties");
    }
    if (!(p.uniform >= 0.0 && p.uniform < 1.0)) return invalid_argument(which + "uniform outside [0, 1)");
    for (int32_t j = 0; j < p.penalty_count; ++j) {
      if (batch.penalty_counts[static_cast<size_t>(p.penalty_begin + j)] < 0) {
        return invalid_argument(which + "negative count");
      }
    }
  }
  for (size_t i = 0; i < batch.host_rows.size(); ++i) {
    const int32_t r = batch.host_rows[i];
    if (r < 0 || r >= num_rows || (i > 0 && r <= batch.host_rows[i - 1])) {
      return invalid_argument("host row " + std::to_string(r) + " is out of order or outside the step's " +
                              std::to_string(num_rows) + " rows");
    }
  }
  return Status::ok();
}

int32_t sample_row(std::span<float> a, const SamplingBatch& batch, size_t r) {
  const RowSampling& p = batch.rows[r];
  const auto vocab = static_cast<int64_t>(a.size());
  const auto in_row = [&](int32_t t) { return t >= 0 && t < vocab; };

  // Step 1.
  for (float& x : a) x = std::isnan(x) ? -kInf : x;
  if (p.mask_begin >= 0) {
    for (int64_t t = 0; t < vocab; ++t) {
      if (!device_sampling_allowed(p, batch.mask_words.data(), batch.mask_stride, t)) a[static_cast<size_t>(t)] = -kInf;
    }
  }
  for (int32_t j = p.bias_begin; j < p.bias_begin + p.bias_count; ++j) {
    const int32_t t = batch.bias_tokens[static_cast<size_t>(j)];
    if (in_row(t)) a[static_cast<size_t>(t)] += batch.bias_values[static_cast<size_t>(j)];
  }
  for (int32_t j = p.penalty_begin; j < p.penalty_begin + p.penalty_count; ++j) {
    const int32_t t = batch.penalty_tokens[static_cast<size_t>(j)];
    if (!in_row(t)) continue;
    float x = a[static_cast<size_t>(t)];
    if (p.repetition_penalty != 1.0f) x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    const int32_t c = batch.penalty_counts[static_cast<size_t>(j)];
    if (c > 0) x -= fmaf(p.frequency_penalty, static_cast<float>(c), p.presence_penalty);
    a[static_cast<size_t>(t)] = x;
  }

  // Step 2.
  float m = -kInf;
  int32_t argmax = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (a[static_cast<size_t>(i)] > m) {
      m = a[static_cast<size_t>(i)];
      argmax = static_cast<int32_t>(i);
    }
  }
  if (m == -kInf) return -1;
  if (p.temperature == 0.0f) return argmax;
  if (m == kInf) {
    for (float& x : a) x = x == kInf ? 0.0f : -kInf;
    m = 0.0f;
  }

  // Step 3: the k-th largest key, then the ties at it in id order.
  if (p.top_k > 0 && p.top_k < vocab) {
    const auto k = static_cast<size_t>(p.top_k);
    std::vector<uint32_t> keys;
    for (float x : a) {
      if (x > -kInf) keys.push_back(device_sampling_key(x));
    }
    if (k < keys.size()) {
      std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(), std::greater<>());
      const uint32_t tau = keys[k - 1];
      const auto above =
          static_cast<uint64_t>(std::count_if(keys.begin(), keys.end(), [&](uint32_t x) { return x > tau; }));
      keep_above_and_first_ties(a, device_sampling_key, tau, k - above, -kInf, false);
    }
  }

  // Step 4.
  const float scale = std::min(1.0f / p.temperature, FLT_MAX);
  uint64_t total = 0;
  for (float& x : a) {
    x = x == -kInf ? 0.0f : device_sampling_exp((x - m) * scale);
    total += device_sampling_mass(x);
  }

  // Step 5. Weights are >= 0, so their bits are keys in their order.
  if (p.min_p > 0.0f) {
    for (float& x : a) x = x < p.min_p ? 0.0f : x;
  }
  if (p.top_p < 1.0f) {
    const auto target = static_cast<uint64_t>(std::ceil(static_cast<double>(p.top_p) * static_cast<double>(total)));
    std::vector<std::pair<uint32_t, uint64_t>> kept;  // (key, mass)
    uint64_t left = 0;
    for (float x : a) {
      const uint64_t mass = device_sampling_mass(x);
      if (mass == 0) continue;
      kept.emplace_back(device_sampling_key(x), mass);
      left += mass;
    }
    if (left >= target) {
      std::sort(kept.begin(), kept.end(), std::greater<>());
      size_t i = 0;  // the first token, most likely first, at which the mass reaches the target
      for (uint64_t before = 0; before + kept[i].second < target; ++i) before += kept[i].second;
      uint64_t above = 0;
      for (const auto& [key, mass] : kept) above += key > kept[i].first ? mass : 0;
      keep_above_and_first_ties(a, device_sampling_key, kept[i].first, target - above, 0.0f, true);
    }
  }

  // Step 6.
  uint64_t kept_mass = 0;
  for (float x : a) kept_mass += device_sampling_mass(x);
  if (kept_mass == 0) return argmax;  // not reached: the largest weight is 1
  auto u = static_cast<uint64_t>(p.uniform * static_cast<double>(kept_mass));
  u = std::min(u, kept_mass - 1);
  uint64_t cumulative = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    cumulative += device_sampling_mass(a[static_cast<size_t>(i)]);
    if (cumulative > u) return static_cast<int32_t>(i);
  }
  return argmax;
}

}  // namespace kiln::runtime
