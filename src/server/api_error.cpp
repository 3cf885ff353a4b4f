#include "server/api_error.h"

#include "server/request_fields.h"

namespace kiln::server {
namespace {

// The headers both shapes carry: when to try again, and how to authenticate.
HttpResponse error_response(const ApiError& e, std::string body) {
  HttpResponse r;
  r.status = e.status;
  r.body = std::move(body);
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

}  // namespace

std::string openai_error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (e.param) err["param"] = *e.param;
  if (e.code) err["code"] = *e.code;
  return dump_json({{"error", err}});
}

HttpResponse openai_error_response(const ApiError& e) { return error_response(e, openai_error_body(e)); }

HttpResponse kserve_error_response(const ApiError& e) { return error_response(e, dump_json({{"error", e.message}})); }

}  // namespace kiln::server
