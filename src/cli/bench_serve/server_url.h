// An http:// URL as `kiln bench serve --url` takes it: host, port and an optional path, e.g.
// "http://127.0.0.1:8000" or "http://[::1]:8080/v1/completions". https is refused with a message
// (the benchmark measures the server, not TLS).
#pragma once

#include <string>

#include "base/status.h"

namespace kiln::cli::bench_serve {

struct ServerUrl {
  std::string host;  // without brackets for IPv6
  std::string port;  // "80" when the URL gives none
  std::string path;  // "" when the URL gives none or only "/"
  std::string host_header() const;  // host[:port] as the Host header carries it
};

Expected<ServerUrl> parse_server_url(const std::string& url);

}  // namespace kiln::cli::bench_serve
