// Service: what the transport asks for an answer. Given one HTTP request it returns either the
// response or a Job that the transport drives until it ends; when the exchange is over (the last
// byte written, or the client gone), finish() records it. Two services implement it: ApiService
// (one LLM engine: OpenAI and KServe generate) and RepositoryService (a model repository of
// general models: KServe infer).
//
// handle() and finish() are called from every network thread at once.
#pragma once

#include <memory>
#include <string>

#include "server/access_log.h"
#include "server/http_message.h"
#include "server/job.h"

namespace kiln::server {

class Service {
 public:
  virtual ~Service() = default;

  struct Reply {
    HttpResponse response;     // the answer, when there is no job
    std::unique_ptr<Job> job;  // an answer in the making: the transport drives it
    AccessLogEntry log;        // filled in as far as the service knows it
  };
  virtual Reply handle(const HttpRequest& request, const std::string& request_id, std::string remote) = 0;
  // Records a finished exchange (status sent, duration) in metrics and the access log.
  virtual void finish(AccessLogEntry& entry, const Job* job) = 0;
};

}  // namespace kiln::server
