#include "server/request_gate.h"

#include "server/auth.h"

namespace kiln::server {

std::optional<ApiError> gate_request(const Route& route, const HttpRequest& req, const std::string& api_key) {
  if (route.endpoint == Endpoint::kNone) {
    if (route.status == 405) {
      return ApiError{405, "method " + req.method + " is not allowed on " + std::string(req.path()) + "; use " + route.allow,
                      "invalid_request_error", std::nullopt, "method_not_allowed"};
    }
    return ApiError{404, "no route for " + req.method + " " + std::string(req.path()), "not_found_error", std::nullopt,
                    "not_found"};
  }
  if (!api_key.empty() && !route.open && !bearer_matches(req.header("authorization"), api_key)) {
    return ApiError{401,
                    req.header("authorization").empty() ? "an API key is required: send 'Authorization: Bearer KEY'"
                                                        : "the API key is not valid",
                    "authentication_error", std::nullopt, "invalid_api_key"};
  }
  return std::nullopt;
}

}  // namespace kiln::server
