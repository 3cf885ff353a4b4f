#include "server/request_gate.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "server/auth.h"

namespace kiln::server {
namespace {

size_t count_headers(const HttpRequest& req, std::string_view name) {
  return static_cast<size_t>(std::count_if(req.headers.begin(), req.headers.end(), [&](const auto& h) { return h.first == name; }));
}

// The name part of a Host value (host[:port], an IPv6 address in brackets), lower-case; empty
// when the value is not of that form.
std::string host_name(std::string_view value) {
  std::string_view name = value, port;
  if (value.starts_with('[')) {
    const size_t close = value.find(']');
    if (close == std::string_view::npos) return {};
    name = value.substr(0, close + 1);
    port = value.substr(close + 1);
    if (!port.empty() && !port.starts_with(':')) return {};
  } else {
    const size_t colon = value.find(':');
    if (colon != std::string_view::npos) {
      name = value.substr(0, colon);
      port = value.substr(colon);
    }
  }
  if (!port.empty()) {
    port.remove_prefix(1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return {};
  }
  if (name.empty() || name.find_first_of(" \t/@\\") != std::string_view::npos) return {};
  return ascii_lower(name);
}

std::vector<std::string> allowed_hosts(const ServerConfig& config) {
  return config.allowed_hosts.empty() ? default_allowed_hosts(config.host) : config.allowed_hosts;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

ApiError forbidden(std::string message, const char* code) {
  return {403, std::move(message), "permission_error", std::nullopt, code};
}

std::optional<ApiError> check_host(const HttpRequest& req, const ServerConfig& config) {
  const size_t n = count_headers(req, "host");
  if (n > 1) return ApiError{400, "the request carries more than one Host header", "invalid_request_error", std::nullopt, "bad_host"};
  if (n == 0) {
    if (req.version >= 11) {
      return ApiError{400, "an HTTP/1.1 request must carry a Host header", "invalid_request_error", std::nullopt, "bad_host"};
    }
    return std::nullopt;  // HTTP/1.0 has none to check
  }
  const std::string value(trim_ows(req.header("host")));
  const std::string name = host_name(value);
  if (name.empty()) {
    return ApiError{400, "the Host header '" + value + "' is not host[:port]", "invalid_request_error", std::nullopt, "bad_host"};
  }
  const std::vector<std::string> allowed = allowed_hosts(config);
  for (const std::string& a : allowed) {
    if (a == "*" || ascii_lower(a) == name) return std::nullopt;
  }
  return forbidden("the Host '" + value + "' is not one this server answers to (" + joined(allowed) +
                       "); start kiln serve with --allowed-hosts " + name + " to allow it",
                   "host_not_allowed");
}

// An Origin that is the server's own (the page was served by this host and port).
bool same_origin(std::string_view origin, const HttpRequest& req) {
  const std::string o = ascii_lower(origin);
  const std::string host = ascii_lower(trim_ows(req.header("host")));
  return !host.empty() && (o == "http://" + host || o == "https://" + host);
}

bool origin_allowed(std::string_view origin, const ServerConfig& config) {
  const std::string o = ascii_lower(origin);
  return std::any_of(config.allowed_origins.begin(), config.allowed_origins.end(),
                     [&](const std::string& a) { return a == "*" || ascii_lower(a) == o; });
}

std::optional<ApiError> check_origin(const HttpRequest& req, const ServerConfig& config) {
  const std::string_view origin = trim_ows(req.header("origin"));
  if (origin.empty() || same_origin(origin, req) || origin_allowed(origin, config)) return std::nullopt;
  return forbidden("requests from web pages of '" + std::string(origin) +
                       "' are not allowed; start kiln serve with --allowed-origins " + std::string(origin) + " to allow them",
                   "origin_not_allowed");
}

bool takes_json_body(Endpoint e) {
  switch (e) {
    case Endpoint::kCompletions:
    case Endpoint::kChat:
    case Endpoint::kTokenize:
    case Endpoint::kDetokenize:
    case Endpoint::kGenerate:
    case Endpoint::kGenerateStream:
    case Endpoint::kInfer:
    case Endpoint::kRepositoryIndex:
    case Endpoint::kRepositoryLoad:
    case Endpoint::kRepositoryUnload:
      return true;
    default:
      return false;
  }
}

std::optional<ApiError> check_content_type(const Route& route, const HttpRequest& req) {
  if (!takes_json_body(route.endpoint) || req.body.empty()) return std::nullopt;
  const std::string_view given = trim_ows(req.header("content-type"));
  const std::string media = ascii_lower(trim_ows(given.substr(0, given.find(';'))));
  if (media == "application/json") return std::nullopt;
  // KServe's binary tensor extension: a JSON header and raw tensors, its length in a header.
  if (route.endpoint == Endpoint::kInfer && media == "application/octet-stream" &&
      !req.header("inference-header-content-length").empty()) {
    return std::nullopt;
  }
  const std::string got = given.empty() ? "none was given" : "got '" + std::string(given) + "'";
  return ApiError{415,
                  "the request body must be sent with 'Content-Type: application/json' (" + got +
                      "; with curl, add -H 'Content-Type: application/json')",
                  "invalid_request_error", std::nullopt, "unsupported_media_type"};
}

}  // namespace

std::optional<ApiError> gate_request(const Route& route, const HttpRequest& req, const ServerConfig& config) {
  if (auto e = check_host(req, config)) return e;
  if (auto e = check_origin(req, config)) return e;
  if (route.endpoint == Endpoint::kNone) {
    if (route.status == 405) {
      return ApiError{405, "method " + req.method + " is not allowed on " + std::string(req.path()) + "; use " + route.allow,
                      "invalid_request_error", std::nullopt, "method_not_allowed"};
    }
    return ApiError{404, "no route for " + req.method + " " + std::string(req.path()), "not_found_error", std::nullopt,
                    "not_found"};
  }
  if (!config.api_key.empty() && !route.open && !bearer_matches(req.header("authorization"), config.api_key)) {
    return ApiError{401,
                    req.header("authorization").empty() ? "an API key is required: send 'Authorization: Bearer KEY'"
                                                        : "the API key is not valid",
                    "authentication_error", std::nullopt, "invalid_api_key"};
  }
  return check_content_type(route, req);
}

bool is_preflight(const HttpRequest& req) {
  return req.method == "OPTIONS" && !req.header("origin").empty() && !req.header("access-control-request-method").empty();
}

HttpResponse preflight_response(const HttpRequest& req, const ServerConfig& config) {
  auto refuse = [](const ApiError& e) { return openai_error_response(e); };
  if (auto e = check_host(req, config)) return refuse(*e);
  if (auto e = check_origin(req, config)) return refuse(*e);
  HttpResponse r;
  r.status = 204;
  r.content_type = "text/plain; charset=utf-8";
  r.headers = cors_headers(req, config);
  r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS");
  r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id, Inference-Header-Content-Length");
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

std::vector<std::pair<std::string, std::string>> cors_headers(const HttpRequest& req, const ServerConfig& config) {
  const std::string_view origin = trim_ows(req.header("origin"));
  if (origin.empty() || !origin_allowed(origin, config)) return {};
  return {{"Access-Control-Allow-Origin", std::string(origin)},
          {"Access-Control-Expose-Headers", "X-Request-Id, Retry-After"},
          {"Vary", "Origin"}};
}

}  // namespace kiln::server
