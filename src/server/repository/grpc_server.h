// GrpcServer: the KServe v2 gRPC front end of a model repository (inference.GRPCInferenceService
// on Debian's grpc++): liveness and readiness, server and model metadata, model config, infer
// (through the same dynamic batchers as HTTP) and Triton's repository index, load and unload.
// Its RPCs run on grpc's callback API: none blocks a gRPC thread; an infer answers from the
// model instance that ran its batch, a load from a thread of its own. With an API key every RPC
// but liveness and readiness needs 'authorization: Bearer KEY' metadata (else UNAUTHENTICATED).
// Refusals carry the HTTP front end's messages with the matching gRPC code (400
// INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE).
//
// The repository and metrics outlive it; stop() ends it (waiting up to its grace for RPCs in
// flight) before they go.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "server/repository/model_repository.h"
#include "server/repository/repository_metrics.h"

namespace kiln::server {

class GrpcServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 8001;  // 0: any free port (see port())
    std::string api_key;
    size_t max_message_bytes = 4u << 20;
  };
  GrpcServer(ModelRepository& repository, RepositoryMetrics& metrics, Options options);
  ~GrpcServer();

  Status start();
  int port() const;
  void set_ready(bool ready);
  // Stops taking RPCs; those in flight get up to `grace_seconds`, then are cancelled.
  void stop(double grace_seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
