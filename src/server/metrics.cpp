#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/status.h"

namespace kiln::server {
namespace {

std::string escape_help(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

const char* type_name(MetricFamily::Type t) {
  switch (t) {
    case MetricFamily::Type::kCounter: return "counter";
    case MetricFamily::Type::kGauge: return "gauge";
    case MetricFamily::Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` plus an optional extra label (le for buckets); "" when there are none.
std::string label_text(const std::vector<std::string>& names, const LabelValues& values, std::string_view extra_name = {},
                       std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ',';
    out += names[i] + "=\"" + prometheus_escape_label(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    out += std::string(extra_name) + "=\"" + std::string(extra_value) + "\"";
  }
  out += '}';
  return out;
}

}  // namespace

std::string prometheus_escape_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    // The shortest form that reads back as the same double.
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  }
  return buf;
}

MetricFamily::MetricFamily(std::string name, std::string help, Type type, std::vector<std::string> label_names,
                           std::vector<double> buckets)
    : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {
  KILN_CHECK(std::is_sorted(buckets_.begin(), buckets_.end()));
  KILN_CHECK(type_ == Type::kHistogram || buckets_.empty());
}

MetricFamily::Series& MetricFamily::series(const LabelValues& labels) {
  KILN_CHECK(labels.size() == label_names_.size());
  auto [it, inserted] = series_.try_emplace(labels);
  if (inserted && type_ == Type::kHistogram) it->second.bucket_hits.assign(buckets_.size(), 0);
  return it->second;
}

void MetricFamily::add(const LabelValues& labels, double v) {
  KILN_CHECK(type_ != Type::kHistogram);
  KILN_CHECK(type_ != Type::kCounter || v >= 0);
  std::lock_guard lock(mu_);
  series(labels).value += v;
}

void MetricFamily::set(const LabelValues& labels, double v) {
  KILN_CHECK(type_ != Type::kHistogram);
  std::lock_guard lock(mu_);
  series(labels).value = v;
}

void MetricFamily::touch(const LabelValues& labels) {
  std::lock_guard lock(mu_);
  series(labels);
}

void MetricFamily::observe(const LabelValues& labels, double v) {
  KILN_CHECK(type_ == Type::kHistogram);
  std::lock_guard lock(mu_);
  Series& s = series(labels);
  s.value += v;
  s.count += 1;
  // The first bucket whose upper bound holds v (le is inclusive); past the last: only +Inf.
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), v);
  if (it != buckets_.end()) s.bucket_hits[static_cast<size_t>(it - buckets_.begin())] += 1;
}

double MetricFamily::value(const LabelValues& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.value;
}

uint64_t MetricFamily::count(const LabelValues& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

void MetricFamily::render(std::string& out) const {
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + type_name(type_) + "\n";
  std::lock_guard lock(mu_);
  // A family without labels always shows its one series, even before the first update.
  if (series_.empty() && label_names_.empty()) {
    if (type_ == Type::kHistogram) {
      for (double b : buckets_) out += name_ + "_bucket{le=\"" + prometheus_number(b) + "\"} 0\n";
      out += name_ + "_bucket{le=\"+Inf\"} 0\n" + name_ + "_sum 0\n" + name_ + "_count 0\n";
    } else {
      out += name_ + " 0\n";
    }
    return;
  }
  for (const auto& [labels, s] : series_) {
    if (type_ != Type::kHistogram) {
      out += name_ + label_text(label_names_, labels) + " " + prometheus_number(s.value) + "\n";
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += s.bucket_hits[i];
      out += name_ + "_bucket" + label_text(label_names_, labels, "le", prometheus_number(buckets_[i])) + " " +
             std::to_string(cumulative) + "\n";
    }
    out += name_ + "_bucket" + label_text(label_names_, labels, "le", "+Inf") + " " + std::to_string(s.count) + "\n";
    out += name_ + "_sum" + label_text(label_names_, labels) + " " + prometheus_number(s.value) + "\n";
    out += name_ + "_count" + label_text(label_names_, labels) + " " + std::to_string(s.count) + "\n";
  }
}

MetricFamily& MetricsRegistry::counter(std::string name, std::string help, std::vector<std::string> labels) {
  families_.push_back(std::make_unique<MetricFamily>(std::move(name), std::move(help), MetricFamily::Type::kCounter,
                                                     std::move(labels)));
  return *families_.back();
}

MetricFamily& MetricsRegistry::gauge(std::string name, std::string help, std::vector<std::string> labels) {
  families_.push_back(std::make_unique<MetricFamily>(std::move(name), std::move(help), MetricFamily::Type::kGauge,
                                                     std::move(labels)));
  return *families_.back();
}

MetricFamily& MetricsRegistry::histogram(std::string name, std::string help, std::vector<double> buckets,
                                         std::vector<std::string> labels) {
  families_.push_back(std::make_unique<MetricFamily>(std::move(name), std::move(help), MetricFamily::Type::kHistogram,
                                                     std::move(labels), std::move(buckets)));
  return *families_.back();
}

std::string MetricsRegistry::render() const {
  std::string out;
  for (const auto& f : families_) f->render(out);
  return out;
}

}  // namespace kiln::server
