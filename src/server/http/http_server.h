// HttpServer: the transport. HTTP/1.1 with keep-alive on Boost.Beast/Asio: an acceptor and one
// session per connection, run by `network_threads` threads that never wait for a model step, each
// with an event loop of its own to which connections are handed in turn. A session reads one
// request (header and body limits: 431 and 413; a request that does not arrive whole within the
// request timeout: 408), asks the Service for the reply, and writes it; a reply in the making is
// driven by its Job, whose notifier posts to the session's event loop. Streaming replies are
// chunked server-sent events. A client that goes away mid-generation has its requests cancelled.
//
// Lifetime: the Service and config outlive the server. start() binds and starts the threads;
// stop_accepting() closes the listener (running exchanges go on); stop() ends every thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "server/service.h"
#include "server/server_config.h"

namespace kiln::server {

class HttpServer {
 public:
  HttpServer(Service& service, const ServerConfig& config);
  ~HttpServer();

  // Binds host:port and starts the network threads.
  Status start();
  int port() const;  // the bound port (useful with port 0)

  void stop_accepting();
  // Waits up to `seconds` for exchanges in flight to end (their last bytes written).
  void wait_idle(double seconds);
  void stop();

  // Runs `fn` on SIGINT or SIGTERM (once, on a network thread; at once, on this thread, for a
  // signal that came after start() and before this call).
  void on_signal(std::function<void(int)> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
