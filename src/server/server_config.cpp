#include "server/server_config.h"

#include <algorithm>

namespace kiln::server {

Status validate_server_config(const ServerConfig& c) {
  if (c.host.empty()) return invalid_argument("--host must not be empty");
  if (c.port < 0 || c.port > 65535) return invalid_argument("--port must be in [0, 65535]; got " + std::to_string(c.port));
  if (c.max_body_bytes < 1024) return invalid_argument("the body limit must be at least 1 KiB");
  if (c.max_header_bytes < 1024) return invalid_argument("the header limit must be at least 1 KiB");
  if (!(c.request_timeout_s > 0)) return invalid_argument("the request timeout must be positive");
  if (!(c.shutdown_grace_s >= 0)) {
    return invalid_argument("--shutdown-grace must be a number of seconds >= 0; got " + std::to_string(c.shutdown_grace_s));
  }
  if (c.stream_interval < 1 || c.stream_interval > 1024) {
    return invalid_argument("--stream-interval must be in [1, 1024] tokens; got " + std::to_string(c.stream_interval));
  }
  if (c.network_threads < 1 || c.network_threads > 64) {
    return invalid_argument("--network-threads must be in [1, 64]; got " + std::to_string(c.network_threads));
  }
  for (char ch : c.api_key) {
    if (static_cast<unsigned char>(ch) <= 0x20 || static_cast<unsigned char>(ch) >= 0x7f) {
      return invalid_argument("the API key must be printable ASCII without spaces");
    }
  }
  for (const std::string& h : c.allowed_hosts) {
    if (h.empty() || h.find_first_of(" \t,/") != std::string::npos) {
      return invalid_argument("--allowed-hosts: '" + h + "' is not a host name (give names such as localhost or " +
                              "example.com, without scheme, port or path; * allows any)");
    }
  }
  for (const std::string& o : c.allowed_origins) {
    const bool scheme = o.starts_with("http://") || o.starts_with("https://");
    if (o != "*" && (!scheme || o.back() == '/' || o.find_first_of(" \t,") != std::string::npos)) {
      return invalid_argument("--allowed-origins: '" + o + "' is not an origin (give scheme://host[:port], such as " +
                              "https://app.example.com, without a path; * allows any)");
    }
  }
  return Status::ok();
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

std::vector<std::string> default_allowed_hosts(std::string_view host) {
  if (!is_loopback_host(host)) return {"*"};
  std::vector<std::string> names = {"localhost", "127.0.0.1", "[::1]"};
  const std::string bound = host == "::1" ? "[::1]" : std::string(host);
  if (std::find(names.begin(), names.end(), bound) == names.end()) names.push_back(bound);
  return names;
}

int default_network_threads(unsigned cores) { return cores <= 4 ? 1 : 2; }

}  // namespace kiln::server
