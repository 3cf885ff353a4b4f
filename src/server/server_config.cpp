#include "server/server_config.h"

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
  return Status::ok();
}

int default_network_threads(unsigned cores) { return cores <= 4 ? 1 : 2; }

}  // namespace kiln::server
