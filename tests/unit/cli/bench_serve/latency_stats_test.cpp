// Percentile, summary and goodput math of `kiln bench serve`, and the report built from records.
#include <gtest/gtest.h>

#include "cli/bench_serve/bench_report.h"
#include "cli/bench_serve/latency_stats.h"

namespace kiln::cli::bench_serve {
namespace {

TEST(BenchServeStats, PercentilesInterpolateLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) == [2.5, 3.7, 3.97]
  const std::vector<double> v{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 50), 2.5);
  EXPECT_NEAR(percentile_of_sorted(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile_of_sorted(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile_of_sorted({7}, 99), 7);
}

TEST(BenchServeStats, SummarySortsItsInput) {
  const LatencySummary s = summarize({10, 1, 4, 3, 2, 9, 8, 7, 6, 5});
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.p50, 5.5);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_NEAR(s.p99, 9.91, 1e-12);
  EXPECT_NEAR(s.stddev, std::sqrt(8.25), 1e-12);
  EXPECT_EQ(summarize({}).count, 0);
}

TEST(BenchServeStats, ParsesObjectives) {
  auto slo = parse_slo({"ttft:500", "tpot:50.5"});
  ASSERT_TRUE(slo) << slo.status().message();
  EXPECT_EQ(slo->ttft_ms, 500);
  EXPECT_EQ(slo->tpot_ms, 50.5);
  EXPECT_FALSE(slo->e2el_ms);
  EXPECT_TRUE(parse_slo({})->empty());
  for (const char* bad : {"ttft", "ttft:", "ttft:abc", "ttft:5ms", "ttft:0", "ttft:-3", "itl:10", ":5"}) {
    auto r = parse_slo({bad});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.status().message().find("--goodput"), std::string::npos);
  }
  EXPECT_FALSE(parse_slo({"e2el:100", "e2el:200"}));
}

TEST(BenchServeStats, ObjectivesAreInclusiveAndSkipAbsentTpot) {
  Slo slo;
  slo.ttft_ms = 100;
  slo.tpot_ms = 10;
  EXPECT_TRUE(meets_slo({100, 10, 5000}, slo));
  EXPECT_FALSE(meets_slo({100.5, 10, 5000}, slo));
  EXPECT_FALSE(meets_slo({50, 10.5, 5000}, slo));
  EXPECT_TRUE(meets_slo({50, std::nullopt, 5000}, slo));
  slo.e2el_ms = 1000;
  EXPECT_FALSE(meets_slo({50, 5, 1000.1}, slo));
}

RequestRecord record(double ttft_s, double e2el_s, int64_t out, int64_t expected, int64_t prompt) {
  RequestRecord r;
  r.success = true;
  r.done_seen = true;
  r.ttft_s = ttft_s;
  r.e2el_s = e2el_s;
  r.output_tokens = out;
  r.text_chunks = out;
  r.expected_output_tokens = expected;
  r.prompt_tokens = prompt;
  for (int64_t i = 1; i < out; ++i) r.itl_s.push_back((e2el_s - ttft_s) / static_cast<double>(out - 1));
  return r;
}

TEST(BenchServeStats, ReportCountsOnlySuccessesAndComputesGoodput) {
  LoadResult result;
  result.duration_s = 4.0;
  result.records.push_back(record(0.1, 1.1, 11, 11, 100));  // tpot 100 ms
  result.records.push_back(record(0.3, 0.8, 6, 6, 50));     // tpot 100 ms, ttft too slow
  result.records.push_back(record(0.2, 0.2, 1, 2, 20));     // one token where two were asked for
  RequestRecord failed;
  failed.error = "HTTP 429: queue full";
  failed.expected_output_tokens = 9;
  result.records.push_back(failed);
  result.records.push_back(failed);

  Slo slo;
  slo.ttft_ms = 250;
  const BenchReport r = make_report(result, slo);
  EXPECT_EQ(r.num_prompts, 5);
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.failed, 2);
  EXPECT_EQ(r.errors.at("HTTP 429: queue full"), 2);
  EXPECT_EQ(r.output_len_mismatch, 1);
  EXPECT_EQ(r.total_input_tokens, 170);
  EXPECT_EQ(r.total_output_tokens, 18);
  EXPECT_DOUBLE_EQ(r.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(r.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 47.0);
  ASSERT_TRUE(r.goodput);
  EXPECT_EQ(r.good_requests, 2);  // the first and the one-token request
  EXPECT_DOUBLE_EQ(*r.goodput, 0.5);
  EXPECT_EQ(r.tpot_ms.count, 2);  // no TPOT for a single token
  EXPECT_NEAR(r.tpot_ms.mean, 100.0, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 15);
  EXPECT_NEAR(r.ttft_ms.p50, 200.0, 1e-9);

  const nlohmann::json j = report_json(r, result, slo);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["failed"], 2);
  EXPECT_EQ(j["requests"].size(), 5u);
  EXPECT_EQ(j["requests"][3]["error"], "HTTP 429: queue full");
  EXPECT_EQ(j["goodput"]["good_requests"], 2);
  EXPECT_FALSE(make_report(result, Slo{}).goodput);
}

}  // namespace
}  // namespace kiln::cli::bench_serve
