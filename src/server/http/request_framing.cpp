#include "server/http/request_framing.h"

#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {
namespace {

namespace http = boost::beast::http;

// The elements of every field of this name, in order (a list may span several fields, and
// holds empty elements that count for nothing).
std::vector<std::string> list_elements(const http::fields& header, http::field name) {
  std::vector<std::string> out;
  auto [first, last] = header.equal_range(name);
  for (auto it = first; it != last; ++it) {
    std::string_view v(it->value().data(), it->value().size());
    while (true) {
      const size_t comma = v.find(',');
      std::string_view element = trim_ows(v.substr(0, comma));
      if (!element.empty()) out.push_back(ascii_lower(element));
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return out;
}

ApiError framing_error(int status, std::string message) {
  return {status, std::move(message), "invalid_request_error", std::nullopt,
          status == 501 ? "unsupported_transfer_coding" : "bad_request_framing"};
}

}  // namespace

std::optional<ApiError> check_request_framing(const http::fields& header, unsigned version) {
  const bool has_length = header.count(http::field::content_length) > 0;
  if (header.count(http::field::transfer_encoding) > 0) {
    if (has_length) {
      return framing_error(400, "the request carries both Transfer-Encoding and Content-Length; send one of them");
    }
    if (version < 11) return framing_error(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    const std::vector<std::string> codings = list_elements(header, http::field::transfer_encoding);
    if (codings.empty()) return framing_error(400, "the Transfer-Encoding header is empty");
    int chunked = 0;
    for (const std::string& c : codings) {
      // A coding's parameters (";q=...") do not change what it is.
      const std::string name(trim_ows(std::string_view(c).substr(0, c.find(';'))));
      if (name != "chunked") {
        return framing_error(501, "the transfer coding '" + name + "' is not supported; send the body as is with " +
                                      "Content-Length, or with Transfer-Encoding: chunked");
      }
      ++chunked;
    }
    if (chunked > 1) return framing_error(400, "Transfer-Encoding applies chunked more than once");
    return std::nullopt;
  }
  if (has_length) {
    std::string value;
    for (const std::string& v : list_elements(header, http::field::content_length)) {
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
        return framing_error(400, "Content-Length must be a decimal number of bytes; got '" + v + "'");
      }
      if (!value.empty() && v != value) return framing_error(400, "the request carries two different Content-Length values");
      value = v;
    }
  }
  return std::nullopt;
}

HttpRequest http_request_from(http::request<http::string_body>& message) {
  HttpRequest req;
  req.method = std::string(message.method_string());
  req.target = std::string(message.target());
  req.version = message.version();
  for (const auto& field : message) {
    req.headers.emplace_back(ascii_lower(std::string_view(field.name_string().data(), field.name_string().size())),
                             std::string(field.value()));
  }
  req.body = std::move(message.body());
  return req;
}

}  // namespace kiln::server
