// ServerConfig: how the HTTP server listens and what it allows, from `kiln serve`'s flags,
// validated once at start-up (validate_server_config) so that a bad value fails there with one
// clear line rather than in the middle of a request. Plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace kiln::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (the bound one is reported)
  std::string api_key;                   // empty: no key needed
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

// `kiln serve`'s default network threads on a machine of `cores` cores: one up to four cores,
// two above. With two, a stream's poll posted from the event loop wakes the idle thread, and on a
// few cores those wake-ups take their time from the model's threads (2 cores, 64 streams: the
// loop thread's and network threads' time 11-12% of the step time with two, 9% with one).
int default_network_threads(unsigned cores);

}  // namespace kiln::server
