// The checks every front end makes before it reads a body, in this order:
//   1. the Host header: required once in HTTP/1.1 (400), and one of the allowed names (403), so
//      that a web page cannot reach a local server through a name it controls (DNS rebinding);
//   2. the Origin header of a browser's cross-origin request: one of the allowed origins (403);
//   3. a path with no route (404), a method the route does not take (405; the response then
//      needs an Allow header holding route.allow);
//   4. a missing or wrong API key where the route is not open (401, compared in constant time);
//   5. a body sent to a JSON endpoint without `Content-Type: application/json` (415), so that a
//      web page cannot post one as a "simple" request that no CORS preflight guards.
// Browsers' CORS preflights (OPTIONS with Access-Control-Request-Method) are answered by
// preflight_response; allowed origins get cors_headers on every answer. Pure; safe from any
// thread.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/http_message.h"
#include "server/router.h"
#include "server/server_config.h"

namespace kiln::server {

std::optional<ApiError> gate_request(const Route& route, const HttpRequest& request, const ServerConfig& config);

// Whether `request` is a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method).
bool is_preflight(const HttpRequest& request);
// The answer to a preflight: 204 with the CORS headers for an allowed origin, else 403.
HttpResponse preflight_response(const HttpRequest& request, const ServerConfig& config);
// The headers that let an allowed cross-origin page read an answer (none for other requests).
std::vector<std::pair<std::string, std::string>> cors_headers(const HttpRequest& request, const ServerConfig& config);

}  // namespace kiln::server
