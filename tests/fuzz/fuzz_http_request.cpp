// libFuzzer target: arbitrary bytes as an HTTP/1.1 request, through the code the server runs on
// what arrives on a connection, without the socket: Beast's request parser with the server's
// limits, the framing check once the header is in, the request as the services read it, the gate
// (Host, Origin, route with the playground's files, method, key, content type, CORS preflights),
// and for a generation endpoint the JSON body through its parser to a generation plan against the
// demo model's tokenizer and chat template. Every refusal must be an error status with a message; every plan
// must fit the model's context.
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/generation/kserve_protocol.h"
#include "server/generation/openai_protocol.h"
#include "server/http/request_framing.h"
#include "server/request_fields.h"
#include "server/request_gate.h"
#include "server/server_config.h"
#include "support/demo_served_model.h"

namespace {

namespace http = boost::beast::http;
using namespace kiln::server;

const ServedModel& demo() {
  static const ServedModel* m = [] {
    auto r = kiln::testing::demo_served_model();
    if (!r) __builtin_trap();
    return new ServedModel(std::move(*r));
  }();
  return *m;
}

void check_error(const ApiError& e) {
  if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
}

void check_plan(const ApiResult<GenerationPlan>& r) {
  if (const auto* e = std::get_if<ApiError>(&r)) return check_error(*e);
  const auto& plan = std::get<GenerationPlan>(r);
  if (plan.requests.empty()) __builtin_trap();
  for (const auto& q : plan.requests) {
    if (q.prompt.empty() || q.params.max_tokens < 1 ||
        static_cast<int64_t>(q.prompt.size()) + q.params.max_tokens > demo().max_seq_len) {
      __builtin_trap();
    }
  }
}

// The request's way through the services' code, as ApiService takes it.
void serve(const HttpRequest& req) {
  static const ServerConfig config = [] {
    ServerConfig c;
    c.allowed_origins = {"https://app.example"};
    return c;
  }();
  if (is_preflight(req)) {
    const HttpResponse r = preflight_response(req, config);
    if (r.status != 204 && r.status != 400 && r.status != 403) __builtin_trap();
    return;
  }
  const Route route = route_request(req.method, req.path(), /*serve_ui=*/true);
  if (auto e = gate_request(route, req, config)) return check_error(*e);
  (void)cors_headers(req, config);
  switch (route.endpoint) {
    case Endpoint::kCompletions:
    case Endpoint::kChat:
    case Endpoint::kGenerate:
    case Endpoint::kTokenize:
    case Endpoint::kDetokenize:
      break;
    default:
      return;
  }
  auto body = parse_json_object(req.body);
  if (const auto* e = std::get_if<ApiError>(&body)) return check_error(*e);
  const auto& j = std::get<nlohmann::json>(body);
  switch (route.endpoint) {
    case Endpoint::kCompletions:
      return check_plan(parse_completion_request(j, demo(), "fuzz"));
    case Endpoint::kChat:
      return check_plan(parse_chat_request(j, demo(), "fuzz"));
    case Endpoint::kGenerate:
      return check_plan(parse_kserve_generate(j, demo(), "fuzz", false));
    default: {
      const auto r = route.endpoint == Endpoint::kTokenize ? tokenize_response(j, demo()) : detokenize_response(j, demo());
      if (const auto* e = std::get_if<ApiError>(&r)) check_error(*e);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ServerConfig limits;
  boost::beast::error_code ec;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(64 << 10);
  parser.eager(true);
  const char* p = reinterpret_cast<const char*>(data);
  size_t left = size;
  bool framing_checked = false;
  // Fed as the socket would deliver it: what the parser leaves unconsumed is offered again with
  // what follows (here, nothing more: the bytes end).
  while (left > 0 && !parser.is_done()) {
    const size_t used = parser.put(boost::asio::buffer(p, left), ec);
    if (ec == http::error::need_more) break;
    if (ec) return 0;  // the transport answers 400/413/431 and closes
    p += used;
    left -= used;
    if (parser.is_header_done() && !framing_checked) {
      framing_checked = true;
      const auto& h = parser.get();
      if (auto e = check_request_framing(h.base(), h.version())) {
        check_error(*e);
        return 0;
      }
    }
    if (used == 0) break;
  }
  if (!parser.is_done()) return 0;  // incomplete: the transport waits, then 408
  if (!framing_checked) {
    const auto& h = parser.get();
    if (auto e = check_request_framing(h.base(), h.version())) {
      check_error(*e);
      return 0;
    }
  }
  HttpRequest req = http_request_from(parser.get());
  serve(req);
  return 0;
}
