#include "server/repository/repository_service.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/repository/infer_job.h"
#include "server/repository/kserve_datatype.h"
#include "server/repository/repository_error.h"
#include "server/request_fields.h"
#include "server/request_preamble.h"
#include "server/router.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

HttpResponse json_response_of(const json& body) {
  return json_response(body.dump(-1, ' ', false, json::error_handler_t::replace));
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
      out.response = json_response_of(json::object());
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
  RequestPreamble p(req, request_id, std::move(remote), kserve_error_response);
  const Route& route = p.route();
  if (!p.pass_gate(config_)) return p.take();
  switch (route.endpoint) {
    case Endpoint::kHealth:
    case Endpoint::kLive:
      return p.answer(empty_response(200));
    case Endpoint::kReady:
      return p.answer(empty_response(ready() ? 200 : 503));
    case Endpoint::kServerMetadata:
      return p.answer(json_response_of(
          {{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", json::array({"model_repository", "binary_tensor_data"})}}));
    case Endpoint::kMetrics:
      return p.answer(metrics_response(metrics_.render()));
    case Endpoint::kModelReady: {
      auto m = repository_.ready(route.model, route.version);
      if (!m && m.status().code() == StatusCode::kNotFound) return p.refuse(repository_api_error(m.status()));
      return p.answer(empty_response(m ? 200 : 400));
    }
    case Endpoint::kModelMetadata:
    case Endpoint::kModelConfig: {
      auto m = repository_.ready(route.model, route.version);
      if (!m) return p.refuse(repository_api_error(m.status()));
      return p.answer(json_response_of(route.endpoint == Endpoint::kModelConfig ? model_config_json((*m)->config)
                                                                              : model_metadata(**m)));
    }
    case Endpoint::kRepositoryIndex: {
      bool only_ready = false;
      if (!req.body.empty()) {
        auto body = parse_json_object(req.body);
        if (auto* e = std::get_if<ApiError>(&body)) return p.refuse(*e);
        const json& j = std::get<json>(body);
        if (j.contains("ready")) {
          if (!j["ready"].is_boolean()) return p.refuse(ApiError::bad_field("ready", "'ready' must be true or false"));
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
      return p.answer(json_response_of(out));
    }
    case Endpoint::kRepositoryUnload: {
      if (Status s = repository_.unload(route.model); !s) return p.refuse(repository_api_error(s));
      return p.answer(json_response_of(json::object()));
    }
    case Endpoint::kRepositoryLoad: {
      if (!model_name_is_valid(route.model)) {
        return p.refuse(repository_api_error(not_found("'" + route.model + "' is not a model name")));
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
      Reply reply = p.take();
      reply.job = std::make_unique<LoadJob>(state);
      return reply;
    }
    case Endpoint::kInfer:
      return infer(req, route.model, route.version, p.take());
    default:
      return p.refuse({404,
                     "this server serves a model repository of general models (KServe infer); " + std::string(route.name) +
                         " is for LLM engines: serve one with kiln serve ENGINE",
                     "not_found_error", std::nullopt, "not_found"});
  }
}

Service::Reply RepositoryService::infer(const HttpRequest& req, const std::string& name, const std::string& version,
                                        Reply reply) {
  const auto start = InferJob::Clock::now();
  auto refuse = [&](const ApiError& e) { return refuse_reply(std::move(reply), e, kserve_error_response(e)); };
  if (!ready()) return refuse(ApiError::shutting_down());
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
