// ApiError: a request the server refuses, with the HTTP status and the parts of OpenAI's error
// object ({"error": {"message", "type", "param", "code"}}). The protocol parsers return it; each
// front end writes it in its own shape: OpenAI's object (openai_error_response) or KServe's
// {"error": message} (kserve_error_response), both here because the transport and every service
// answer with them.
#pragma once

#include <optional>
#include <string>

namespace kiln::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;  // the request field at fault
  std::optional<std::string> code;

  static ApiError bad_field(std::string field, std::string message) {
    return {400, std::move(message), "invalid_request_error", std::move(field), std::nullopt};
  }
  static ApiError bad_request(std::string message) {
    return {400, std::move(message), "invalid_request_error", std::nullopt, std::nullopt};
  }
  // What a server that has begun to shut down answers to new work.
  static ApiError shutting_down() { return {503, "the server is shutting down", "server_error", std::nullopt, "unavailable"}; }
};

}  // namespace kiln::server

#include <variant>

#include "server/http_message.h"

namespace kiln::server {

// A parsed value or the error that refused it.
template <typename T>
using ApiResult = std::variant<T, ApiError>;

// The error as a response; 429 and 503 carry Retry-After, 401 WWW-Authenticate.
std::string openai_error_body(const ApiError& error);
HttpResponse openai_error_response(const ApiError& error);
HttpResponse kserve_error_response(const ApiError& error);

}  // namespace kiln::server
