#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/generation/server_metrics.h"

namespace kiln::server {
namespace {

TEST(Metrics, CounterWithLabelsRendersHelpTypeAndSeries) {
  MetricsRegistry r;
  MetricFamily& c = r.counter("kiln_test_total", "Things counted.", {"endpoint", "status"});
  c.add({"completions", "200"}, 1);
  c.add({"completions", "200"}, 2);
  c.add({"chat", "400"}, 1);
  EXPECT_EQ(r.render(),
            "# HELP kiln_test_total Things counted.\n"
            "# TYPE kiln_test_total counter\n"
            "kiln_test_total{endpoint=\"chat\",status=\"400\"} 1\n"
            "kiln_test_total{endpoint=\"completions\",status=\"200\"} 3\n");
  EXPECT_EQ(c.value({"completions", "200"}), 3);
  EXPECT_EQ(c.value({"missing", "1"}), 0);
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry r;
  r.gauge("g", "line one\nback\\slash", {"l"}).set({"a\"b\\c\nd"}, -2.5);
  EXPECT_EQ(r.render(),
            "# HELP g line one\\nback\\\\slash\n"
            "# TYPE g gauge\n"
            "g{l=\"a\\\"b\\\\c\\nd\"} -2.5\n");
}

TEST(Metrics, FamilyWithoutLabelsShowsZeroBeforeAnyUpdate) {
  MetricsRegistry r;
  r.counter("c_total", "c");
  r.histogram("h_seconds", "h", {0.5, 1});
  EXPECT_EQ(r.render(),
            "# HELP c_total c\n# TYPE c_total counter\nc_total 0\n"
            "# HELP h_seconds h\n# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.5\"} 0\nh_seconds_bucket{le=\"1\"} 0\nh_seconds_bucket{le=\"+Inf\"} 0\n"
            "h_seconds_sum 0\nh_seconds_count 0\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndUpperBoundInclusive) {
  MetricsRegistry r;
  MetricFamily& h = r.histogram("lat_seconds", "latency", {0.1, 0.5, 1.0}, {"model"});
  for (double v : {0.05, 0.1, 0.3, 0.5, 0.7, 2.0, 3.0}) h.observe({"m"}, v);
  EXPECT_EQ(h.count({"m"}), 7u);
  EXPECT_EQ(r.render(),
            "# HELP lat_seconds latency\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{model=\"m\",le=\"0.5\"} 4\n"
            "lat_seconds_bucket{model=\"m\",le=\"1\"} 5\n"
            "lat_seconds_bucket{model=\"m\",le=\"+Inf\"} 7\n"
            "lat_seconds_sum{model=\"m\"} 6.65\n"
            "lat_seconds_count{model=\"m\"} 7\n");
}

TEST(Metrics, NumbersAreWrittenAsPrometheusReadsThem) {
  EXPECT_EQ(prometheus_number(3), "3");
  EXPECT_EQ(prometheus_number(-0.25), "-0.25");
  EXPECT_EQ(prometheus_number(1e20), "1e+20");
  EXPECT_EQ(prometheus_number(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(prometheus_number(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(prometheus_number(std::nan("")), "NaN");
}

TEST(ServerMetrics, EngineStatsBecomeGaugesCountersAndHitRate) {
  ServerMetrics m("demo");
  llm::ServingStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 200;
  s.kv_blocks_used = 50;
  s.prefix_queries = 40;
  s.prefix_hits = 10;
  s.preemptions = 1;
  s.prompt_tokens = 123;
  s.generated_tokens = 456;
  m.record_http("completions", 200);
  m.record_request(1.5, 0.2, 0.01);
  m.record_step(0.02);
  const std::string text = m.render(s);
  for (const char* line : {"kiln_requests_running{model=\"demo\"} 3\n", "kiln_requests_waiting{model=\"demo\"} 2\n",
                           "kiln_kv_cache_usage_ratio{model=\"demo\"} 0.25\n",
                           "kiln_prefix_cache_hit_rate{model=\"demo\"} 0.25\n", "kiln_preemptions_total{model=\"demo\"} 1\n",
                           "kiln_prompt_tokens_total{model=\"demo\"} 123\n",
                           "kiln_generation_tokens_total{model=\"demo\"} 456\n",
                           "kiln_http_requests_total{endpoint=\"completions\",status=\"200\"} 1\n",
                           "kiln_e2e_request_latency_seconds_count{model=\"demo\"} 1\n",
                           "kiln_time_to_first_token_seconds_bucket{model=\"demo\",le=\"0.25\"} 1\n",
                           "kiln_step_duration_seconds_count{model=\"demo\"} 1\n",
                           "kiln_inter_token_latency_seconds_count{model=\"demo\"} 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  // A failed request with no token records no time to first token.
  m.record_request(0.5, -1, 0.0);
  EXPECT_NE(m.render(s).find("kiln_time_to_first_token_seconds_count{model=\"demo\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
