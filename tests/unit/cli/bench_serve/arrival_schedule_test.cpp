// Statistics of the arrival process of `kiln bench serve`: gaps with mean 1/rate, the spread a
// gamma distribution of the given shape has, Poisson counts per window, determinism by seed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "cli/bench_serve/arrival_schedule.h"

namespace kiln::cli::bench_serve {
namespace {

struct GapStats {
  double mean = 0, cv = 0;  // coefficient of variation: stddev / mean
};

GapStats gap_stats(const std::vector<double>& offsets) {
  std::vector<double> gaps(offsets.size());
  std::adjacent_difference(offsets.begin(), offsets.end(), gaps.begin());
  GapStats s;
  s.mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  double sq = 0;
  for (double g : gaps) sq += (g - s.mean) * (g - s.mean);
  s.cv = std::sqrt(sq / static_cast<double>(gaps.size())) / s.mean;
  return s;
}

TEST(BenchServeArrival, InfiniteRateSendsEverythingAtOnce) {
  auto t = arrival_schedule(50, std::numeric_limits<double>::infinity(), 1.0, 7);
  ASSERT_TRUE(t) << t.status().message();
  ASSERT_EQ(t->size(), 50u);
  for (double v : *t) EXPECT_EQ(v, 0.0);
}

TEST(BenchServeArrival, PoissonGapsHaveMeanOneOverRateAndUnitSpread) {
  auto t = arrival_schedule(40000, 10.0, 1.0, 1);
  ASSERT_TRUE(t);
  EXPECT_TRUE(std::is_sorted(t->begin(), t->end()));
  EXPECT_GT(t->front(), 0.0);
  const GapStats s = gap_stats(*t);
  EXPECT_NEAR(s.mean, 0.1, 0.1 * 0.03);
  EXPECT_NEAR(s.cv, 1.0, 0.03);  // exponential gaps: stddev == mean
}

TEST(BenchServeArrival, PoissonCountsPerWindowHaveVarianceEqualToMean) {
  const double rate = 8.0;
  auto t = arrival_schedule(80000, rate, 1.0, 3);
  ASSERT_TRUE(t);
  const auto windows = static_cast<size_t>(std::floor(t->back()));
  std::vector<double> counts(windows, 0.0);
  for (double v : *t) {
    const auto w = static_cast<size_t>(v);
    if (w < windows) counts[w] += 1;
  }
  const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(windows);
  double sq = 0;
  for (double c : counts) sq += (c - mean) * (c - mean);
  const double variance = sq / static_cast<double>(windows - 1);
  EXPECT_NEAR(mean, rate, rate * 0.03);
  EXPECT_NEAR(variance / mean, 1.0, 0.1);  // index of dispersion of a Poisson process
}

TEST(BenchServeArrival, BurstinessSetsTheSpreadNotTheMean) {
  for (double burstiness : {0.25, 4.0}) {
    auto t = arrival_schedule(40000, 5.0, burstiness, 11);
    ASSERT_TRUE(t);
    const GapStats s = gap_stats(*t);
    EXPECT_NEAR(s.mean, 0.2, 0.2 * 0.05) << burstiness;
    EXPECT_NEAR(s.cv, 1.0 / std::sqrt(burstiness), 0.06 / std::sqrt(burstiness)) << burstiness;  // gamma: cv = 1/sqrt(k)
  }
}

TEST(BenchServeArrival, SameSeedSameScheduleOtherSeedOther) {
  auto a = arrival_schedule(100, 3.0, 1.0, 42);
  auto b = arrival_schedule(100, 3.0, 1.0, 42);
  auto c = arrival_schedule(100, 3.0, 1.0, 43);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(BenchServeArrival, RejectsBadParameters) {
  EXPECT_FALSE(arrival_schedule(10, 0.0, 1.0, 0));
  EXPECT_FALSE(arrival_schedule(10, -1.0, 1.0, 0));
  EXPECT_FALSE(arrival_schedule(10, std::nan(""), 1.0, 0));
  EXPECT_FALSE(arrival_schedule(10, 1.0, 0.0, 0));
  EXPECT_FALSE(arrival_schedule(10, 1.0, std::numeric_limits<double>::infinity(), 0));
  EXPECT_FALSE(arrival_schedule(-1, 1.0, 1.0, 0));
  auto empty = arrival_schedule(0, 1.0, 1.0, 0);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_NE(arrival_schedule(10, 0.0, 1.0, 0).status().message().find("--request-rate"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cli::bench_serve
