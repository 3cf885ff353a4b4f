#include "server/repository/repository_service.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "server/request_gate.h"
#include "server/kserve_protocol.h"
#include "server/repository/infer_job.h"
#include "server/repository/kserve_datatype.h"
#include "server/repository/repository_error.h"
#include "server/request_fields.h"
#include "server/router.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

HttpResponse json_response(const json& body) {
  HttpResponse r;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse empty_response(int status) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  return r;
}

json model_metadata(const TensorModel& m) {
  auto tensors = [&](const std::vector<ConfigTensor>& list) {
    json out = json::array();
    for (const ConfigTensor& t : list) {
      std::vector<int64_t> shape = t.dims;
      if (m.config.max_batch_size > 0) shape.insert(shape.begin(), -1);
      out.push_back({{"name", t.name}, {"datatype", kserve_datatype(t.dtype)}, {"shape", shape}});
    }
    return out;
  };
  return {{"name", m.name},
          {"versions", json::array({m.version})},
          {"platform", m.config.platform.empty() ? m.config.backend : m.config.platform},
          {"inputs", tensors(m.config.inputs)},
          {"outputs", tensors(m.config.outputs)}};
}

// A load answered once the repository has loaded the model (or failed), on a thread of its own.
class LoadJob : public Job {
 public:
  struct State {
    std::mutex mu;
    bool done = false;
    Status status;
    std::function<void()> notify;
  };
  explicit LoadJob(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~LoadJob() override { set_notifier(nullptr); }

  void set_notifier(const std::function<void()>& notify) override {
    std::unique_lock lock(state_->mu);
    if (state_->done) {
      lock.unlock();
      if (notify) notify();
      return;
    }
    state_->notify = notify;
  }
  Output poll(std::string& /*stream_data*/) override {
    Output out;
    std::lock_guard lock(state_->mu);
    if (!state_->done || answered_) return out;
    answered_ = true;
    out.done = true;
    if (state_->status) {
      out.response = json_response(json::object());
    } else {
      error_ = state_->status.message();
      out.response = kserve_error_response(repository_api_error(state_->status));
    }
    return out;
  }
  void cancel() override {}  // the load goes on: the repository's state must not depend on a client
  bool streaming() const override { return false; }
  void describe(AccessLogEntry& entry) const override {
    if (!error_.empty()) entry.error = error_;
  }

 private:
  std::shared_ptr<State> state_;
  bool answered_ = false;
  std::string error_;
};

}  // namespace

RepositoryService::~RepositoryService() {
  std::lock_guard lock(loads_mu_);
  for (auto& f : loads_) f.wait();
}

Service::Reply RepositoryService::handle(const HttpRequest& req, const std::string& request_id, std::string remote) {
  Reply reply;
  reply.log.request_id = request_id;
  reply.log.method = req.method;
  reply.log.path = std::string(req.path());
  reply.log.remote = std::move(remote);
  const Route route = route_request(req.method, req.path());
  reply.log.endpoint = route.name;
  auto refuse = [&](ApiError e) {
    reply.log.error = e.message;
    reply.response = kserve_error_response(e);
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
      reply.response = json_response(
          {{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", json::array({"model_repository", "binary_tensor_data"})}});
      return reply;
    case Endpoint::kMetrics: {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_.render();
      reply.response = std::move(r);
      return reply;
    }
    case Endpoint::kModelReady: {
      auto m = repository_.ready(route.model, route.version);
      if (!m && m.status().code() == StatusCode::kNotFound) return refuse(repository_api_error(m.status()));
      reply.response = empty_response(m ? 200 : 400);
      return reply;
    }
    case Endpoint::kModelMetadata:
    case Endpoint::kModelConfig: {
      auto m = repository_.ready(route.model, route.version);
      if (!m) return refuse(repository_api_error(m.status()));
      reply.response = json_response(route.endpoint == Endpoint::kModelConfig ? model_config_json((*m)->config)
                                                                               : model_metadata(**m));
      return reply;
    }
    case Endpoint::kRepositoryIndex: {
      bool only_ready = false;
      if (!req.body.empty()) {
        auto body = parse_json_object(req.body);
        if (auto* e = std::get_if<ApiError>(&body)) return refuse(*e);
        const json& j = std::get<json>(body);
        if (j.contains("ready")) {
          if (!j["ready"].is_boolean()) return refuse(ApiError::bad_field("ready", "'ready' must be true or false"));
          only_ready = j["ready"].get<bool>();
        }
      }
      json out = json::array();
      for (const auto& e : repository_.index()) {
        if (only_ready && e.state != "READY") continue;
        json entry = {{"name", e.name}, {"state", e.state}};
        if (!e.version.empty()) entry["version"] = e.version;
        if (!e.reason.empty()) entry["reason"] = e.reason;
        out.push_back(std::move(entry));
      }
      reply.response = json_response(out);
      return reply;
    }
    case Endpoint::kRepositoryUnload: {
      if (Status s = repository_.unload(route.model); !s) return refuse(repository_api_error(s));
      reply.response = json_response(json::object());
      return reply;
    }
    case Endpoint::kRepositoryLoad: {
      if (!model_name_is_valid(route.model)) {
        return refuse(repository_api_error(not_found("'" + route.model + "' is not a model name")));
      }
      auto state = std::make_shared<LoadJob::State>();
      ModelRepository* repository = &repository_;
      const std::string name = route.model;
      {
        std::lock_guard lock(loads_mu_);
        std::erase_if(loads_, [](std::future<void>& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
        loads_.push_back(std::async(std::launch::async, [state, repository, name] {
          Status s = repository->load(name);
          std::function<void()> notify;
          {
            std::lock_guard l(state->mu);
            state->done = true;
            state->status = s;
            notify = std::move(state->notify);
          }
          if (notify) notify();
        }));
      }
      reply.job = std::make_unique<LoadJob>(state);
      return reply;
    }
    case Endpoint::kInfer:
      return infer(req, route.model, route.version, std::move(reply));
    default:
      return refuse({404,
                     "this server serves a model repository of general models (KServe infer); " + std::string(route.name) +
                         " is for LLM engines: serve one with kiln serve ENGINE",
                     "not_found_error", std::nullopt, "not_found"});
  }
}

Service::Reply RepositoryService::infer(const HttpRequest& req, const std::string& name, const std::string& version,
                                        Reply reply) {
  const auto start = InferJob::Clock::now();
  auto refuse = [&](ApiError e) {
    reply.log.error = e.message;
    reply.response = kserve_error_response(e);
    return std::move(reply);
  };
  if (!ready()) return refuse({503, "the server is shutting down", "server_error", std::nullopt, "unavailable"});
  auto model = repository_.ready(name, version);
  if (!model) return refuse(repository_api_error(model.status()));
  std::optional<size_t> header_length;
  if (std::string_view h = req.header("inference-header-content-length"); !h.empty()) {
    size_t n = 0;
    auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), n);
    if (ec != std::errc() || end != h.data() + h.size()) {
      return refuse(ApiError::bad_request("Inference-Header-Content-Length '" + std::string(h) + "' is not a byte count"));
    }
    header_length = n;
  }
  auto parsed = parse_infer_request(req.body, header_length, (*model)->config);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    metrics_.record_request(name, false, 0, std::chrono::duration<double>(InferJob::Clock::now() - start).count());
    return refuse(*e);
  }
  InferRequest& request = std::get<InferRequest>(parsed);
  auto ticket = (*model)->batcher->submit(std::move(request.inputs), request.batch);
  request.inputs.clear();
  if (!ticket) return refuse(repository_api_error(ticket.status()));
  reply.job = std::make_unique<InferJob>(std::move(*model), std::move(request), std::move(*ticket), metrics_, start);
  return reply;
}

void RepositoryService::finish(AccessLogEntry& entry, const Job* job) {
  if (job) job->describe(entry);
  metrics_.record_http(entry.endpoint, entry.status);
  write_access_log(entry);
}

}  // namespace kiln::server
