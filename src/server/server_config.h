// ServerConfig: how the HTTP server listens and what it allows, from `kiln serve`'s flags,
// validated once at start-up (validate_server_config) so that a bad value fails there with one
// clear line rather than in the middle of a request. Plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (the bound one is reported)
  std::string api_key;                   // empty: no key needed
  // The names a request's Host header may give (any port), against DNS rebinding; "*": any.
  // Empty: the default for `host` (default_allowed_hosts).
  std::vector<std::string> allowed_hosts;
  // Origins (scheme://host[:port]) whose web pages may call the server from a browser (CORS);
  // "*": any. Empty: none but the server's own pages.
  std::vector<std::string> allowed_origins;
  bool log_prompts = false;              // prompt text in the access log
  bool ui = true;                        // the playground at / (server/ui/); --no-ui turns it off
  size_t max_body_bytes = 4u << 20;      // larger bodies: 413
  size_t max_header_bytes = 16u << 10;   // larger headers: 431
  double request_timeout_s = 30;         // a request must arrive whole within this, else 408 and close
  double idle_timeout_s = 60;            // a keep-alive connection with no request is closed after this
  double shutdown_grace_s = 30;          // SIGTERM: running requests get this long to finish
  int network_threads = 2;               // `kiln serve` passes default_network_threads(cores)
  // Streamed responses are written once this many tokens have gathered (and at the first token
  // and a choice's end): 1 writes every token as it comes; more trade smoothness for fewer writes.
  int stream_interval = 1;
};

Status validate_server_config(const ServerConfig& config);

// The Host names allowed when --allowed-hosts is not given: bound to a loopback address, the
// loopback names (localhost, 127.0.0.1, [::1]) and the bound address; bound elsewhere, any ("*"),
// as the server is then meant to be reached by names it cannot know.
std::vector<std::string> default_allowed_hosts(std::string_view host);
bool is_loopback_host(std::string_view host);

// `kiln serve`'s default network threads on a machine of `cores` cores: one up to four cores,
// two above. With two, a stream's poll posted from the event loop wakes the idle thread, and on a
// few cores those wake-ups take their time from the model's threads (2 cores, 64 streams: the
// loop thread's and network threads' time 11-12% of the step time with two, 9% with one).
int default_network_threads(unsigned cores);

}  // namespace kiln::server
