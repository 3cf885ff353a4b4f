#include "cli/bench_serve/server_url.h"

#include <algorithm>
#include <cctype>

namespace kiln::cli::bench_serve {

std::string ServerUrl::host_header() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == "80" ? h : h + ":" + port;
}

Expected<ServerUrl> parse_server_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) return invalid_argument("--url " + url + ": https is not supported; use http://");
  if (url.rfind(scheme, 0) != 0) return invalid_argument("--url " + url + ": expected http://HOST[:PORT][/PATH]");
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  ServerUrl u;
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  if (u.path == "/") u.path.clear();
  std::string port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return invalid_argument("--url " + url + ": unclosed '[' in the host");
    u.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return invalid_argument("--url " + url + ": unexpected text after the host");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return invalid_argument("--url " + url + ": no host");
  if (port.empty()) port = "80";
  const bool digits = std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!digits || port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return invalid_argument("--url " + url + ": port '" + port + "' is not a number in 1..65535");
  }
  u.port = port;
  return u;
}

}  // namespace kiln::cli::bench_serve
