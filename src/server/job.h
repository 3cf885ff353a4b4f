// Job: an HTTP exchange whose answer is not ready when the request has been read: a generation
// (generation_job.h) or a tensor inference waiting for its batch (repository/infer_job.h). The
// transport (http_server) drives it: it registers a notifier, and on each notification polls the
// job on the connection's event loop for text to send now (streaming) or the whole response.
//
// Threads: set_notifier()'s callback may be called from any thread (the engine's, a model
// instance's); poll() and describe() run on the connection's event loop only; cancel() may run
// anywhere.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "server/access_log.h"
#include "server/http_message.h"

namespace kiln::server {

class Job {
 public:
  virtual ~Job() = default;

  struct Output {
    bool done = false;                     // the job has ended
    std::optional<HttpResponse> response;  // not streaming, once done: the whole response
  };
  virtual void set_notifier(const std::function<void()>& notify) = 0;
  // Streaming: appends the event text to send now to `stream_data` (the connection's buffer of
  // bytes not yet written, so that a token costs no allocation of its own).
  virtual Output poll(std::string& stream_data) = 0;
  virtual void cancel() = 0;  // the client went away
  virtual bool streaming() const = 0;
  // Adds what the job learned (tokens, errors) to the exchange's access-log line.
  virtual void describe(AccessLogEntry& /*entry*/) const {}
};

}  // namespace kiln::server
