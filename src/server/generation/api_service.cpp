#include "server/generation/api_service.h"

#include "server/generation/kserve_protocol.h"
#include "server/generation/openai_protocol.h"
#include "server/request_fields.h"
#include "server/request_preamble.h"
#include "server/ui/static_files.h"

namespace kiln::server {
namespace {

bool is_kserve(Endpoint e) {
  return e == Endpoint::kLive || e == Endpoint::kReady || e == Endpoint::kServerMetadata ||
         e == Endpoint::kModelMetadata || e == Endpoint::kModelReady || e == Endpoint::kGenerate ||
         e == Endpoint::kGenerateStream;
}

ApiError model_not_found(const std::string& asked, const std::string& served) {
  return {404, "the model '" + asked + "' does not exist; this server serves '" + served + "'", "not_found_error",
          "model", "model_not_found"};
}

// The served model has one version, "1" (what KServe's metadata lists).
constexpr const char* kModelVersion = "1";

// A KServe path's model and version, when they are not the served model's.
std::optional<ApiError> check_kserve_model(const Route& route, const std::string& served) {
  if (route.model != served) return model_not_found(route.model, served);
  if (!route.version.empty() && route.version != kModelVersion) {
    return ApiError{404, "the model '" + served + "' has no version '" + route.version + "'; its one version is " + kModelVersion,
                    "not_found_error", "version", "model_version_not_found"};
  }
  return std::nullopt;
}

}  // namespace

ApiService::Reply ApiService::handle(const HttpRequest& req, const std::string& request_id, std::string remote) {
  RequestPreamble p(req, request_id, std::move(remote), openai_error_response, config_.ui);
  const Route& route = p.route();
  if (is_kserve(route.endpoint) || req.path().starts_with("/v2")) p.set_error_format(kserve_error_response);
  if (!p.pass_gate(config_)) return p.take();
  switch (route.endpoint) {
    case Endpoint::kHealth:
    case Endpoint::kLive:
      return p.answer(empty_response(200));
    case Endpoint::kReady:
      return p.answer(empty_response(ready() ? 200 : 503));
    case Endpoint::kServerMetadata:
      return p.answer(json_response(kserve_server_metadata()));
    case Endpoint::kModelMetadata:
    case Endpoint::kModelReady:
      if (auto e = check_kserve_model(route, model_.name)) return p.refuse(*e);
      return p.answer(route.endpoint == Endpoint::kModelReady ? empty_response(ready() ? 200 : 503)
                                                              : json_response(kserve_model_metadata(model_)));
    case Endpoint::kModels:
      return p.answer(json_response(models_response(model_)));
    case Endpoint::kModel:
      if (route.model != model_.name) return p.refuse(model_not_found(route.model, model_.name));
      return p.answer(json_response(model_response(model_)));
    case Endpoint::kMetrics:
      return p.answer(metrics_response(metrics_.render(loop_.stats())));
    case Endpoint::kStatic:
      // The router routes only paths that name a file.
      return p.answer(static_file_response(*find_static_file(req.path()), req));
    default:
      break;
  }
  // Everything below reads a JSON body.
  auto body = parse_json_object(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return p.refuse(*e);
  const nlohmann::json& j = std::get<nlohmann::json>(body);
  switch (route.endpoint) {
    case Endpoint::kTokenize:
    case Endpoint::kDetokenize: {
      auto r = route.endpoint == Endpoint::kTokenize ? tokenize_response(j, model_) : detokenize_response(j, model_);
      if (auto* e = std::get_if<ApiError>(&r)) return p.refuse(*e);
      return p.answer(json_response(std::move(std::get<std::string>(r))));
    }
    case Endpoint::kCompletions:
    case Endpoint::kChat: {
      auto plan = route.endpoint == Endpoint::kChat ? parse_chat_request(j, model_, request_id, req.body)
                                                    : parse_completion_request(j, model_, request_id, req.body);
      if (auto* e = std::get_if<ApiError>(&plan)) return p.refuse(*e);
      auto format = route.endpoint == Endpoint::kChat ? make_chat_format(model_) : make_completion_format(model_);
      return submit(std::move(std::get<GenerationPlan>(plan)), std::move(format), p.take());
    }
    case Endpoint::kGenerate:
    case Endpoint::kGenerateStream: {
      if (auto e = check_kserve_model(route, model_.name)) return p.refuse(*e);
      auto plan = parse_kserve_generate(j, model_, request_id, route.endpoint == Endpoint::kGenerateStream);
      if (auto* e = std::get_if<ApiError>(&plan)) return p.refuse(*e);
      return submit(std::move(std::get<GenerationPlan>(plan)), make_kserve_format(model_), p.take());
    }
    default:
      return p.refuse({404, "no route for " + req.method + " " + std::string(req.path()), "not_found_error",
                       std::nullopt, "not_found"});
  }
}

ApiService::Reply ApiService::submit(GenerationPlan plan, std::unique_ptr<ResponseFormat> format, Reply reply) {
  const auto start = GenerationJob::Clock::now();
  if (config_.log_prompts) reply.log.prompt = plan.log_prompt;
  reply.log.user = plan.user;
  int64_t prompt_tokens = 0;
  for (const auto& r : plan.requests) prompt_tokens += static_cast<int64_t>(r.prompt.size());
  reply.log.prompt_tokens = prompt_tokens;
  auto refuse = [&](const ApiError& e) { return refuse_reply(std::move(reply), e, format->error(e)); };
  if (!ready()) return refuse(ApiError::shutting_down());
  std::vector<std::shared_ptr<llm::ResponseStream>> streams;
  for (auto& r : plan.requests) {
    // A streamed answer is polled as tokens gather; a whole one only at its end.
    r.notify_every = plan.stream ? config_.stream_interval : 0;
    auto s = loop_.submit(std::move(r));
    if (!s) {
      for (auto& started : streams) started->cancel();
      const Status& st = s.status();
      if (st.code() == StatusCode::kResourceExhausted) {
        return refuse({429, "the server is busy: " + st.message(), "rate_limit_error", std::nullopt,
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
