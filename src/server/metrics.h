// A small Prometheus metrics registry and its text exposition format (version 0.0.4):
// counters, gauges and histograms with fixed buckets, each family with a name, help text and
// label names, and one series per label-value tuple.
//
// The registry owns its families; families live as long as the registry and are handed out as
// references at registration, before any thread uses them. Every update and render() is
// thread-safe (a mutex per family), so the loop thread, the network threads and a scrape may
// touch the same family at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {

using LabelValues = std::vector<std::string>;  // in the order of the family's label names

class MetricFamily {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  MetricFamily(std::string name, std::string help, Type type, std::vector<std::string> label_names,
               std::vector<double> buckets = {});

  // Counters: adds `v` (>= 0). Gauges: adds `v` (any sign).
  void add(const LabelValues& labels, double v);
  // Gauges, and counters that mirror a total kept elsewhere (which only grows): sets the value.
  void set(const LabelValues& labels, double v);
  // Creates the series with zero value if absent, so that it shows before its first update.
  void touch(const LabelValues& labels);
  // Histograms: records one observation.
  void observe(const LabelValues& labels, double v);

  // The current value of a counter or gauge series (0 if it does not exist), and the
  // observation count of a histogram series.
  double value(const LabelValues& labels) const;
  uint64_t count(const LabelValues& labels) const;

  void render(std::string& out) const;
  const std::string& name() const { return name_; }

 private:
  struct Series {
    double value = 0;                  // counter / gauge; histogram: sum of observations
    uint64_t count = 0;                // histogram
    std::vector<uint64_t> bucket_hits; // histogram: per bucket, not cumulative
  };
  Series& series(const LabelValues& labels);  // mu_ held

  std::string name_, help_;
  Type type_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;  // upper bounds, ascending; +Inf is implicit
  mutable std::mutex mu_;
  std::map<LabelValues, Series> series_;
};

class MetricsRegistry {
 public:
  MetricFamily& counter(std::string name, std::string help, std::vector<std::string> labels = {});
  MetricFamily& gauge(std::string name, std::string help, std::vector<std::string> labels = {});
  MetricFamily& histogram(std::string name, std::string help, std::vector<double> buckets,
                          std::vector<std::string> labels = {});

  // Every family in registration order, in the Prometheus text format.
  std::string render() const;

 private:
  std::vector<std::unique_ptr<MetricFamily>> families_;
};

// Escapes a label value for the text format: backslash, double quote and newline.
std::string prometheus_escape_label(std::string_view value);
// Formats a sample value: integers without a fraction, +Inf/-Inf/NaN spelled as Prometheus does.
std::string prometheus_number(double v);

}  // namespace kiln::server
