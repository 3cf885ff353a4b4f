#include "server/request_preamble.h"

#include "server/request_gate.h"

namespace kiln::server {

RequestPreamble::RequestPreamble(const HttpRequest& request, const std::string& request_id, std::string remote,
                                 ErrorFormat error_format, bool serve_ui)
    : request_(request), route_(route_request(request.method, request.path(), serve_ui)), error_format_(error_format) {
  reply_.log.request_id = request_id;
  reply_.log.method = request.method;
  reply_.log.path = std::string(request.path());
  reply_.log.remote = std::move(remote);
  reply_.log.endpoint = route_.name;
}

bool RequestPreamble::pass_gate(const ServerConfig& config) {
  if (is_preflight(request_)) {
    reply_.response = preflight_response(request_, config);
    if (reply_.response.status != 204) reply_.log.error = "CORS preflight refused";
    return false;
  }
  const std::optional<ApiError> e = gate_request(route_, request_, config);
  if (!e) return true;
  reply_ = refuse(*e);
  if (e->status == 405) reply_.response.headers.emplace_back("Allow", route_.allow);
  return false;
}

Service::Reply RequestPreamble::answer(HttpResponse response) {
  reply_.response = std::move(response);
  return std::move(reply_);
}

Service::Reply RequestPreamble::refuse(const ApiError& error) {
  return refuse_reply(std::move(reply_), error, error_format_(error));
}

Service::Reply refuse_reply(Service::Reply reply, const ApiError& error, HttpResponse response) {
  reply.log.error = error.message;
  reply.response = std::move(response);
  return reply;
}

HttpResponse json_response(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

HttpResponse empty_response(int status) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  return r;
}

HttpResponse metrics_response(std::string text) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(text);
  return r;
}

}  // namespace kiln::server
