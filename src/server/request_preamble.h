// RequestPreamble: the start that every service (service.h) makes of a request, written once.
// It routes the request, fills the access-log fields the request carries (id, method, path,
// remote address, endpoint) and runs the gate (request_gate.h: Host, Origin, route, method, API
// key, content type; CORS preflights). The service then answers through it: answer() with a
// response, refuse() with an ApiError in the service's error format (set_error_format), noted in
// the log. The answers every service gives
// alike (a JSON body, an empty status, the /metrics text) are here too.
//
// One per request, on the thread that handles it; it owns the Reply until answer(), refuse() or
// take() hands it back.
#pragma once

#include <string>

#include "server/api_error.h"
#include "server/http_message.h"
#include "server/router.h"
#include "server/server_config.h"
#include "server/service.h"

namespace kiln::server {

// Writes an ApiError as one protocol's error response (openai_error_response, kserve_error_response).
using ErrorFormat = HttpResponse (*)(const ApiError&);

class RequestPreamble {
 public:
  // `serve_ui`: the playground's static files have routes (router.h).
  RequestPreamble(const HttpRequest& request, const std::string& request_id, std::string remote,
                  ErrorFormat error_format, bool serve_ui = false);

  const Route& route() const { return route_; }
  void set_error_format(ErrorFormat format) { error_format_ = format; }
  // True when the request may go on; else the refusal (a 405 with its Allow header), or the
  // answer to a CORS preflight, is the reply.
  bool pass_gate(const ServerConfig& config);

  Service::Reply answer(HttpResponse response);
  Service::Reply refuse(const ApiError& error);
  // The reply as it stands, for a service that completes it itself (a job, a refusal of its own).
  Service::Reply take() { return std::move(reply_); }

 private:
  const HttpRequest& request_;
  Route route_;
  Service::Reply reply_;
  ErrorFormat error_format_;
};

// `reply` answered with `response`, the refusal's message noted in its log.
Service::Reply refuse_reply(Service::Reply reply, const ApiError& error, HttpResponse response);

// A 200 with a JSON body.
HttpResponse json_response(std::string body);
// A status with no body (health and readiness answers).
HttpResponse empty_response(int status);
// The Prometheus text exposition of /metrics.
HttpResponse metrics_response(std::string text);

}  // namespace kiln::server
