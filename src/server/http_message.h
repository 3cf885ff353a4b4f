// Plain HTTP request and response values passed between the transport (http_server) and the API
// layer (api_service). They own their strings and know nothing of sockets, so the protocol code
// can be exercised without a connection. Header names are stored lower-case.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::server {

// Header values: ASCII lower case (names and tokens are case-insensitive), and the optional
// whitespace (spaces and tabs) around a value or a list element removed.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}
inline std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  unsigned version = 11;  // HTTP/1.1: 11, HTTP/1.0: 10
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case names
  std::string body;

  // The first header of that (lower-case) name, or "" when absent.
  std::string_view header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return v;
    }
    return {};
  }
  // The target without its query string.
  std::string_view path() const {
    std::string_view t = target;
    return t.substr(0, t.find('?'));
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, ...)
  std::string body;
};

}  // namespace kiln::server
