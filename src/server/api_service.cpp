#include "server/api_service.h"

#include "server/request_gate.h"
#include "server/kserve_protocol.h"
#include "server/openai_protocol.h"
#include "server/request_fields.h"

namespace kiln::server {
namespace {

bool is_kserve(Endpoint e) {
  return e == Endpoint::kLive || e == Endpoint::kReady || e == Endpoint::kServerMetadata ||
         e == Endpoint::kModelMetadata || e == Endpoint::kModelReady || e == Endpoint::kGenerate ||
         e == Endpoint::kGenerateStream;
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

}  // namespace

ApiService::Reply ApiService::handle(const HttpRequest& req, const std::string& request_id, std::string remote) {
  Reply reply;
  reply.log.request_id = request_id;
  reply.log.method = req.method;
  reply.log.path = std::string(req.path());
  reply.log.remote = std::move(remote);
  const Route route = route_request(req.method, req.path());
  reply.log.endpoint = route.name;
  const bool kserve = is_kserve(route.endpoint) || req.path().starts_with("/v2");
  auto refuse = [&](ApiError e) {
    reply.log.error = e.message;
    reply.response = kserve ? kserve_error_response(e) : openai_error_response(e);
    return std::move(reply);
  };
  if (auto e = gate_request(route, req, config_.api_key)) {
    Reply r = refuse(*e);
    if (e->status == 405) r.response.headers.emplace_back("Allow", route.allow);
    return r;
  }
  switch (route.endpoint) {
    case Endpoint::kHealth:
    case Endpoint::kLive:
      reply.response = empty_response(200);
      return reply;
    case Endpoint::kReady:
      reply.response = empty_response(ready() ? 200 : 503);
      return reply;
    case Endpoint::kServerMetadata:
      reply.response = json_response(kserve_server_metadata());
      return reply;
    case Endpoint::kModelMetadata:
    case Endpoint::kModelReady:
      if (route.model != model_.name) {
        return refuse({404, "the model '" + route.model + "' does not exist; this server serves '" + model_.name + "'",
                       "not_found_error", "model", "model_not_found"});
      }
      reply.response = route.endpoint == Endpoint::kModelReady ? empty_response(ready() ? 200 : 503)
                                                               : json_response(kserve_model_metadata(model_));
      return reply;
    case Endpoint::kModels:
      reply.response = json_response(models_response(model_));
      return reply;
    case Endpoint::kModel:
      if (route.model != model_.name) {
        return refuse({404, "the model '" + route.model + "' does not exist; this server serves '" + model_.name + "'",
                       "not_found_error", "model", "model_not_found"});
      }
      reply.response = json_response(model_response(model_));
      return reply;
    case Endpoint::kMetrics: {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_.render(loop_.stats());
      reply.response = std::move(r);
      return reply;
    }
    default:
      break;
  }
  // Everything below reads a JSON body.
  auto body = parse_json_object(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return refuse(*e);
  const nlohmann::json& j = std::get<nlohmann::json>(body);
  switch (route.endpoint) {
    case Endpoint::kTokenize:
    case Endpoint::kDetokenize: {
      auto r = route.endpoint == Endpoint::kTokenize ? tokenize_response(j, model_) : detokenize_response(j, model_);
      if (auto* e = std::get_if<ApiError>(&r)) return refuse(*e);
      reply.response = json_response(std::move(std::get<std::string>(r)));
      return reply;
    }
    case Endpoint::kCompletions:
    case Endpoint::kChat: {
      auto plan = route.endpoint == Endpoint::kChat ? parse_chat_request(j, model_, request_id)
                                                    : parse_completion_request(j, model_, request_id);
      if (auto* e = std::get_if<ApiError>(&plan)) return refuse(*e);
      auto format = route.endpoint == Endpoint::kChat ? make_chat_format(model_) : make_completion_format(model_);
      return submit(std::move(std::get<GenerationPlan>(plan)), std::move(format), std::move(reply));
    }
    case Endpoint::kGenerate:
    case Endpoint::kGenerateStream: {
      if (route.model != model_.name) {
        return refuse({404, "the model '" + route.model + "' does not exist; this server serves '" + model_.name + "'",
                       "not_found_error", "model", "model_not_found"});
      }
      auto plan = parse_kserve_generate(j, model_, request_id, route.endpoint == Endpoint::kGenerateStream);
      if (auto* e = std::get_if<ApiError>(&plan)) return refuse(*e);
      return submit(std::move(std::get<GenerationPlan>(plan)), make_kserve_format(model_), std::move(reply));
    }
    default:
      return refuse({404, "no route for " + req.method + " " + std::string(req.path()), "not_found_error", std::nullopt,
                     "not_found"});
  }
}

ApiService::Reply ApiService::submit(GenerationPlan plan, std::unique_ptr<ResponseFormat> format, Reply reply) {
  const auto start = GenerationJob::Clock::now();
  if (config_.log_prompts) reply.log.prompt = plan.log_prompt;
  int64_t prompt_tokens = 0;
  for (const auto& r : plan.requests) prompt_tokens += static_cast<int64_t>(r.prompt.size());
  reply.log.prompt_tokens = prompt_tokens;
  auto refuse = [&](ApiError e) {
    reply.log.error = e.message;
    reply.response = format->error(e);
    return std::move(reply);
  };
  if (!ready()) return refuse({503, "the server is shutting down", "server_error", std::nullopt, "unavailable"});
  std::vector<std::shared_ptr<llm::ResponseStream>> streams;
  for (auto& r : plan.requests) {
    // A streamed answer is polled as tokens gather; a whole one only at its end.
    r.notify_every = plan.stream ? config_.stream_interval : 0;
    auto s = loop_.submit(std::move(r));
    if (!s) {
      for (auto& started : streams) started->cancel();
      const Status& st = s.status();
      if (st.code() == StatusCode::kResourceExhausted) {
        return refuse({429, "the server is busy: " + st.message() + "; retry later", "rate_limit_error", std::nullopt,
                       "server_busy"});
      }
      if (st.code() == StatusCode::kInvalidArgument) {
        return refuse({400, st.message(), "invalid_request_error", std::nullopt, std::nullopt});
      }
      return refuse({500, st.message(), "server_error", std::nullopt, std::nullopt});
    }
    streams.push_back(std::move(*s));
  }
  plan.requests.clear();
  reply.job = std::make_unique<GenerationJob>(std::move(plan), std::move(format), std::move(streams), &metrics_, start);
  return reply;
}

void ApiService::finish(AccessLogEntry& entry, const Job* job) {
  if (job) job->describe(entry);
  metrics_.record_http(entry.endpoint, entry.status);
  write_access_log(entry);
}

}  // namespace kiln::server
