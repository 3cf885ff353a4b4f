#include "server/repository/repository_error.h"

namespace kiln::server {

ApiError repository_api_error(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return {404, s.message(), "not_found_error", "model", "model_not_found"};
    case StatusCode::kInvalidArgument: return {400, s.message(), "invalid_request_error", std::nullopt, std::nullopt};
    case StatusCode::kResourceExhausted:
      return {429, "the server is busy: " + s.message() + "; retry later", "rate_limit_error", std::nullopt, "server_busy"};
    default: return {500, s.message(), "server_error", std::nullopt, std::nullopt};
  }
}

}  // namespace kiln::server
