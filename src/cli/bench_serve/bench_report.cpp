#include "cli/bench_serve/bench_report.h"

#include <cstdio>

namespace kiln::cli::bench_serve {
namespace {

std::optional<double> tpot_ms(const RequestRecord& r) {
  if (r.output_tokens < 2) return std::nullopt;
  return 1000.0 * (r.e2el_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

nlohmann::json summary_json(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"std", s.stddev}, {"min", s.min}, {"max", s.max},
          {"p50", s.p50},     {"p90", s.p90},   {"p99", s.p99}};
}

void append_line(std::string& out, const char* label, const std::string& value) {
  char line[160];
  std::snprintf(line, sizeof line, "%-34s %s\n", label, value.c_str());
  out += line;
}

std::string fixed(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

BenchReport make_report(const LoadResult& result, const Slo& slo) {
  BenchReport r;
  r.num_prompts = static_cast<int64_t>(result.records.size());
  r.duration_s = result.duration_s;
  r.peak_in_flight = result.peak_in_flight;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& rec : result.records) {
    if (!rec.success) {
      ++r.failed;
      ++r.errors[rec.error.substr(0, 160)];
      continue;
    }
    ++r.completed;
    if (rec.output_tokens != rec.expected_output_tokens) ++r.output_len_mismatch;
    r.total_input_tokens += rec.prompt_tokens.value_or(0);
    r.total_output_tokens += rec.output_tokens;
    RequestLatency lat{1000.0 * rec.ttft_s, tpot_ms(rec), 1000.0 * rec.e2el_s};
    ttft.push_back(lat.ttft_ms);
    if (lat.tpot_ms) tpot.push_back(*lat.tpot_ms);
    for (double gap : rec.itl_s) itl.push_back(1000.0 * gap);
    e2el.push_back(lat.e2el_ms);
    if (!slo.empty() && meets_slo(lat, slo)) ++r.good_requests;
  }
  if (r.duration_s > 0) {
    r.request_throughput = static_cast<double>(r.completed) / r.duration_s;
    r.output_throughput = static_cast<double>(r.total_output_tokens) / r.duration_s;
    r.total_token_throughput = static_cast<double>(r.total_input_tokens + r.total_output_tokens) / r.duration_s;
    if (!slo.empty()) r.goodput = static_cast<double>(r.good_requests) / r.duration_s;
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2el_ms = summarize(std::move(e2el));
  return r;
}

std::string format_report(const BenchReport& r) {
  std::string out = "---------------- serving benchmark ----------------\n";
  append_line(out, "successful requests", std::to_string(r.completed) + " of " + std::to_string(r.num_prompts));
  append_line(out, "failed requests", std::to_string(r.failed));
  if (r.output_len_mismatch) append_line(out, "output length != max_tokens", std::to_string(r.output_len_mismatch));
  append_line(out, "peak requests in flight", std::to_string(r.peak_in_flight));
  append_line(out, "duration (s)", fixed(r.duration_s));
  append_line(out, "input tokens", std::to_string(r.total_input_tokens));
  append_line(out, "output tokens", std::to_string(r.total_output_tokens));
  append_line(out, "request throughput (req/s)", fixed(r.request_throughput, 3));
  if (r.goodput) append_line(out, "goodput (req/s)", fixed(*r.goodput, 3) + "  (" + std::to_string(r.good_requests) + " met every objective)");
  append_line(out, "output token throughput (tok/s)", fixed(r.output_throughput));
  append_line(out, "total token throughput (tok/s)", fixed(r.total_token_throughput));
  const auto block = [&](const char* title, const LatencySummary& s) {
    out += std::string("-- ") + title + " (ms): mean " + fixed(s.mean) + "  p50 " + fixed(s.p50) + "  p90 " +
           fixed(s.p90) + "  p99 " + fixed(s.p99) + "\n";
  };
  block("time to first token", r.ttft_ms);
  block("time per output token, excl. first", r.tpot_ms);
  block("inter-token latency", r.itl_ms);
  block("end-to-end latency", r.e2el_ms);
  for (const auto& [message, count] : r.errors) out += "failed x" + std::to_string(count) + ": " + message + "\n";
  out += "---------------------------------------------------\n";
  return out;
}

nlohmann::json report_json(const BenchReport& r, const LoadResult& result, const Slo& slo) {
  nlohmann::json j = {
      {"num_prompts", r.num_prompts},
      {"completed", r.completed},
      {"failed", r.failed},
      {"output_len_mismatch", r.output_len_mismatch},
      {"peak_in_flight", r.peak_in_flight},
      {"duration_s", r.duration_s},
      {"total_input_tokens", r.total_input_tokens},
      {"total_output_tokens", r.total_output_tokens},
      {"request_throughput", r.request_throughput},
      {"output_throughput", r.output_throughput},
      {"total_token_throughput", r.total_token_throughput},
      {"ttft_ms", summary_json(r.ttft_ms)},
      {"tpot_ms", summary_json(r.tpot_ms)},
      {"itl_ms", summary_json(r.itl_ms)},
      {"e2el_ms", summary_json(r.e2el_ms)},
      {"errors", r.errors},
  };
  if (r.goodput) {
    nlohmann::json objectives = nlohmann::json::object();
    if (slo.ttft_ms) objectives["ttft_ms"] = *slo.ttft_ms;
    if (slo.tpot_ms) objectives["tpot_ms"] = *slo.tpot_ms;
    if (slo.e2el_ms) objectives["e2el_ms"] = *slo.e2el_ms;
    j["goodput"] = {{"requests_per_s", *r.goodput}, {"good_requests", r.good_requests}, {"slo", objectives}};
  }
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& rec : result.records) {
    nlohmann::json q = {{"success", rec.success},
                        {"send_s", rec.send_s},
                        {"prompt_tokens", rec.prompt_tokens ? nlohmann::json(*rec.prompt_tokens) : nlohmann::json()},
                        {"output_tokens", rec.output_tokens},
                        {"max_tokens", rec.expected_output_tokens},
                        {"ttft_ms", 1000.0 * rec.ttft_s},
                        {"e2el_ms", 1000.0 * rec.e2el_s}};
    if (!rec.success) q["error"] = rec.error;
    requests.push_back(std::move(q));
  }
  j["requests"] = std::move(requests);
  return j;
}

}  // namespace kiln::cli::bench_serve
