#include "server/access_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>

#include "server/request_fields.h"

namespace kiln::server {

std::string request_id_for(std::string_view client_id) {
  bool ok = !client_id.empty() && client_id.size() <= 128;
  for (char c : client_id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-')) ok = false;
  }
  if (ok) return std::string(client_id);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) id += hex[rng() & 15];
  return id;
}

std::string access_log_line(const AccessLogEntry& e) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  nlohmann::ordered_json j = {{"ts", ts},
                              {"request_id", e.request_id},
                              {"method", e.method},
                              {"path", e.path},
                              {"endpoint", e.endpoint},
                              {"status", e.status},
                              {"duration_ms", static_cast<int64_t>(e.duration_s * 1e3 + 0.5)},
                              {"remote", e.remote}};
  if (e.prompt_tokens >= 0) j["prompt_tokens"] = e.prompt_tokens;
  if (e.completion_tokens >= 0) j["completion_tokens"] = e.completion_tokens;
  if (!e.error.empty()) j["error"] = e.error;
  if (!e.user.empty()) j["user"] = e.user;
  if (e.prompt) j["prompt"] = *e.prompt;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void write_access_log(const AccessLogEntry& e) {
  const std::string line = access_log_line(e) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kiln::server
