#include "server/repository/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include "server/auth.h"
#include "server/repository/grpc_protocol.h"
#include "server/repository/repository_error.h"
#include "server/repository/grpc_service.grpc.pb.h"

namespace kiln::server {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

grpc::Status grpc_status(const ApiError& e) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (e.status) {
    case 400: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case 401: code = grpc::StatusCode::UNAUTHENTICATED; break;
    case 404: code = grpc::StatusCode::NOT_FOUND; break;
    case 429: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case 503: code = grpc::StatusCode::UNAVAILABLE; break;
    default: break;
  }
  return {code, e.message};
}

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    default: return "INTERNAL";
  }
}

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  InferenceService(ModelRepository& repository, RepositoryMetrics& metrics, std::string api_key)
      : repository_(repository), metrics_(metrics), api_key_(std::move(api_key)) {}
  ~InferenceService() override { wait_for_loads(); }

  void set_ready(bool ready) { ready_.store(ready); }
  void wait_for_loads() {
    std::lock_guard lock(loads_mu_);
    for (auto& f : loads_) f.wait();
    loads_.clear();
  }

  ServerUnaryReactor* ServerLive(CallbackServerContext* ctx, const inference::ServerLiveRequest*,
                                 inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return answer(ctx, "ServerLive", grpc::Status::OK);
  }
  ServerUnaryReactor* ServerReady(CallbackServerContext* ctx, const inference::ServerReadyRequest*,
                                  inference::ServerReadyResponse* r) override {
    r->set_ready(ready_.load());
    return answer(ctx, "ServerReady", grpc::Status::OK);
  }
  ServerUnaryReactor* ModelReady(CallbackServerContext* ctx, const inference::ModelReadyRequest* q,
                                 inference::ModelReadyResponse* r) override {
    auto m = repository_.ready(q->name(), q->version());
    if (!m && m.status().code() == StatusCode::kNotFound) return refuse(ctx, "ModelReady", repository_api_error(m.status()));
    r->set_ready(static_cast<bool>(m));
    return answer(ctx, "ModelReady", grpc::Status::OK);
  }
  ServerUnaryReactor* ServerMetadata(CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
                                     inference::ServerMetadataResponse* r) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "ServerMetadata", *e);
    r->set_name("kiln");
    r->set_version(KILN_VERSION);
    r->add_extensions("model_repository");
    r->add_extensions("binary_tensor_data");
    return answer(ctx, "ServerMetadata", grpc::Status::OK);
  }
  ServerUnaryReactor* ModelMetadata(CallbackServerContext* ctx, const inference::ModelMetadataRequest* q,
                                    inference::ModelMetadataResponse* r) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "ModelMetadata", *e);
    auto m = repository_.ready(q->name(), q->version());
    if (!m) return refuse(ctx, "ModelMetadata", repository_api_error(m.status()));
    model_metadata_to_grpc(**m, *r);
    return answer(ctx, "ModelMetadata", grpc::Status::OK);
  }
  ServerUnaryReactor* ModelConfig(CallbackServerContext* ctx, const inference::ModelConfigRequest* q,
                                  inference::ModelConfigResponse* r) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "ModelConfig", *e);
    auto m = repository_.ready(q->name(), q->version());
    if (!m) return refuse(ctx, "ModelConfig", repository_api_error(m.status()));
    model_config_to_grpc((*m)->config, *r->mutable_config());
    return answer(ctx, "ModelConfig", grpc::Status::OK);
  }
  ServerUnaryReactor* RepositoryIndex(CallbackServerContext* ctx, const inference::RepositoryIndexRequest* q,
                                      inference::RepositoryIndexResponse* r) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "RepositoryIndex", *e);
    for (const auto& e : repository_.index()) {
      if (q->ready() && e.state != "READY") continue;
      auto* m = r->add_models();
      m->set_name(e.name);
      m->set_version(e.version);
      m->set_state(e.state);
      m->set_reason(e.reason);
    }
    return answer(ctx, "RepositoryIndex", grpc::Status::OK);
  }
  ServerUnaryReactor* RepositoryModelUnload(CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* q,
                                            inference::RepositoryModelUnloadResponse*) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "RepositoryModelUnload", *e);
    if (Status s = repository_.unload(q->model_name()); !s) return refuse(ctx, "RepositoryModelUnload", repository_api_error(s));
    return answer(ctx, "RepositoryModelUnload", grpc::Status::OK);
  }
  ServerUnaryReactor* RepositoryModelLoad(CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* q,
                                          inference::RepositoryModelLoadResponse*) override {
    if (auto e = unauthorized(ctx)) return refuse(ctx, "RepositoryModelLoad", *e);
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const std::string name = q->model_name();
    std::lock_guard lock(loads_mu_);
    std::erase_if(loads_, [](std::future<void>& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    loads_.push_back(std::async(std::launch::async, [this, reactor, name] {
      Status s = repository_.load(name);
      const grpc::Status status = s ? grpc::Status::OK : grpc_status(repository_api_error(s));
      metrics_.record_grpc("RepositoryModelLoad", code_name(status.error_code()));
      reactor->Finish(status);
    }));
    return reactor;
  }
  ServerUnaryReactor* ModelInfer(CallbackServerContext* ctx, const inference::ModelInferRequest* q,
                                 inference::ModelInferResponse* r) override {
    const auto start = std::chrono::steady_clock::now();
    if (auto e = unauthorized(ctx)) return refuse(ctx, "ModelInfer", *e);
    if (!ready_.load()) return refuse(ctx, "ModelInfer", {503, "the server is shutting down", "server_error", std::nullopt, std::nullopt});
    auto model = repository_.ready(q->model_name(), q->model_version());
    if (!model) return refuse(ctx, "ModelInfer", repository_api_error(model.status()));
    auto parsed = infer_request_from_grpc(*q, (*model)->config);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      metrics_.record_request((*model)->name, false, 0, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return refuse(ctx, "ModelInfer", *e);
    }
    auto request = std::make_shared<InferRequest>(std::move(std::get<InferRequest>(parsed)));
    auto ticket = (*model)->batcher->submit(std::move(request->inputs), request->batch);
    request->inputs.clear();
    if (!ticket) return refuse(ctx, "ModelInfer", repository_api_error(ticket.status()));
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    std::shared_ptr<TensorModel> held = *model;
    std::shared_ptr<InferTicket> t = *ticket;
    RepositoryMetrics* metrics = &metrics_;
    // Runs on the model instance that ran the batch (or here, when it is done already); the
    // batcher holds the ticket until then. The notifier holds it only weakly: the ticket owns
    // the notifier.
    std::weak_ptr<InferTicket> weak = t;
    t->set_notifier([weak, held, request, reactor, r, metrics, start] {
      std::shared_ptr<InferTicket> done = weak.lock();
      if (!done) return;
      const double e2e = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      metrics->record_request(held->name, done->status.is_ok(), done->queue_seconds, e2e);
      grpc::Status status = grpc::Status::OK;
      if (done->status) {
        infer_response_to_grpc(*request, done->outputs, *held, *r);
      } else {
        status = grpc_status({done->status.code() == StatusCode::kInvalidArgument ? 400 : 500, done->status.message(),
                              "server_error", std::nullopt, std::nullopt});
      }
      metrics->record_grpc("ModelInfer", code_name(status.error_code()));
      reactor->Finish(status);
    });
    return reactor;
  }

 private:
  std::optional<ApiError> unauthorized(CallbackServerContext* ctx) const {
    if (api_key_.empty()) return std::nullopt;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    const std::string header = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    if (bearer_matches(header, api_key_)) return std::nullopt;
    return ApiError{401, header.empty() ? "an API key is required: send 'authorization: Bearer KEY' metadata" : "the API key is not valid",
                    "authentication_error", std::nullopt, std::nullopt};
  }
  ServerUnaryReactor* answer(CallbackServerContext* ctx, const char* method, const grpc::Status& status) {
    metrics_.record_grpc(method, code_name(status.error_code()));
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  ServerUnaryReactor* refuse(CallbackServerContext* ctx, const char* method, const ApiError& e) {
    return answer(ctx, method, grpc_status(e));
  }
  ModelRepository& repository_;
  RepositoryMetrics& metrics_;
  std::string api_key_;
  std::atomic<bool> ready_{false};
  std::mutex loads_mu_;
  std::vector<std::future<void>> loads_;
};

}  // namespace

struct GrpcServer::Impl {
  Impl(ModelRepository& repository, RepositoryMetrics& metrics, Options o)
      : options(std::move(o)), service(repository, metrics, options.api_key) {}
  Options options;
  InferenceService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(ModelRepository& repository, RepositoryMetrics& metrics, Options options)
    : impl_(std::make_unique<Impl>(repository, metrics, std::move(options))) {}

GrpcServer::~GrpcServer() { stop(0); }

Status GrpcServer::start() {
  const std::string host = impl_->options.host.find(':') != std::string::npos ? "[" + impl_->options.host + "]" : impl_->options.host;
  const std::string address = host + ":" + std::to_string(impl_->options.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(impl_->options.max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    impl_->server.reset();
    return io_error("gRPC cannot listen on " + address + " (in use, or not an address of this machine)");
  }
  return Status::ok();
}

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::set_ready(bool ready) { impl_->service.set_ready(ready); }

void GrpcServer::stop(double grace_seconds) {
  if (!impl_->server) return;
  impl_->service.set_ready(false);
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
  impl_->server->Wait();
  impl_->server.reset();
  impl_->service.wait_for_loads();
}

}  // namespace kiln::server
