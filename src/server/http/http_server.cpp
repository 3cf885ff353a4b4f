#include "server/http/http_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_name.h"
#include "server/api_error.h"
#include "server/http/event_relay.h"
#include "server/http/request_framing.h"
#include "server/request_gate.h"

namespace kiln::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// Each connection belongs to one network thread's event loop, so its handlers never run
// concurrently and need no strand; the executor is the loop's own (not type-erased), so that
// posting and writing allocate nothing of their own.
using Executor = net::io_context::executor_type;
using Socket = net::basic_stream_socket<tcp, Executor>;
using Stream = beast::basic_stream<tcp, Executor>;
using Timer = net::basic_waitable_timer<Clock, net::wait_traits<Clock>, Executor>;

std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)); }

// The network threads run at a lower priority than the loop thread (nice +10, which needs no
// privilege). With as many compute threads as cores, a network thread woken to send a token would
// otherwise preempt the loop thread between steps, where it samples and hands out the step's
// tokens; they get the cores whenever the engine waits, and a share of them while it computes.
// Measured on the demo model with 2 threads on 2 cores: the loop thread's time between steps
// falls from 13-16% to 6-9% of the step time at 16 and 64 streams. Best effort: a refusal
// leaves the thread as it was.
constexpr int kNetworkThreadNice = 10;

void lower_current_thread_priority() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kNetworkThreadNice);
}

// Counts exchanges in flight, for a graceful stop.
struct ActiveCount {
  std::atomic<int64_t> n{0};
};

class Session : public std::enable_shared_from_this<Session>, public EventRelay::Target {
 public:
  Session(Socket socket, Service& service, const ServerConfig& config, ActiveCount& active, EventRelay& relay)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        service_(service),
        config_(config),
        active_(active),
        relay_(relay) {
    beast::error_code ec;
    // Responses go out as they are produced (a header, then a token per SSE chunk): without
    // TCP_NODELAY, Nagle's algorithm holds each small write until the client acknowledges the
    // previous one, which a delayed ACK puts off by up to 40 ms.
    stream_.socket().set_option(tcp::no_delay(true), ec);
    // Stream chunks are first written at once (write_now); the asynchronous writes are unaffected.
    stream_.socket().non_blocking(true, ec);
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::read_request, shared_from_this()));
  }

 private:
  void read_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(config_.max_header_bytes));
    parser_->body_limit(config_.max_body_bytes);
    // A connection between requests may idle for idle_timeout; once a request has begun it must
    // arrive whole within request_timeout. The deadline is a timer of our own rather than the
    // stream's, which would close the socket before a 408 could be written.
    stream_.expires_never();
    arm_timer(buffer_.size() > 0 ? config_.request_timeout_s : config_.idle_timeout_s);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void arm_timer(double seconds) {
    timed_out_ = false;
    timer_.expires_after(ms(seconds));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled: the request arrived
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  void on_header(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
    const auto& header = parser_->get();
    if (auto e = check_request_framing(header.base(), header.version())) {
      timer_.cancel();
      return refuse_and_close(e->status, std::move(e->message));
    }
    arm_timer(config_.request_timeout_s);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read_error(beast::error_code ec) {
    timer_.cancel();
    const bool started = parser_ && parser_->got_some();
    if (timed_out_) {
      if (!started) return close();  // an idle keep-alive connection
      return refuse_and_close(408, "the request did not arrive within " + std::to_string(static_cast<int>(config_.request_timeout_s)) + " s");
    }
    if (ec == http::error::header_limit) {
      return refuse_and_close(431, "the request headers exceed " + std::to_string(config_.max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return refuse_and_close(413, "the request body exceeds " + std::to_string(config_.max_body_bytes) + " bytes");
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted) {
      return close();
    }
    return refuse_and_close(400, "malformed HTTP request: " + ec.message());
  }

  // A transport-level refusal: an OpenAI-shaped error, then the connection closes.
  void refuse_and_close(int status, std::string message) {
    ApiError e{status, std::move(message), "invalid_request_error", std::nullopt, std::nullopt};
    keep_alive_ = false;
    linger_ = true;
    cors_.clear();
    begin_exchange();
    log_ = {};
    log_.request_id = request_id_for("");
    log_.method = "-";
    log_.path = "-";
    log_.endpoint = "other";
    log_.remote = remote_;
    log_.error = e.message;
    HttpResponse r = openai_error_response(e);
    version_ = 11;
    write_response(std::move(r));
  }

  void begin_exchange() {
    active_.n.fetch_add(1);
    in_exchange_ = true;
    start_ = Clock::now();
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
    timer_.cancel();
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    head_ = msg.method() == http::verb::head;
    HttpRequest req = http_request_from(msg);
    cors_ = cors_headers(req, config_);
    begin_exchange();
    const std::string id = request_id_for(req.header("x-request-id"));
    Service::Reply reply;
    try {
      reply = service_.handle(req, id, remote_);
    } catch (const std::exception& e) {
      // A request the protocol code failed to refuse cleanly: answer 500, keep serving.
      reply = Service::Reply{};
      reply.log.request_id = id;
      reply.log.method = req.method;
      reply.log.path = std::string(req.path());
      reply.log.remote = remote_;
      reply.log.error = std::string("internal error: ") + e.what();
      reply.response.status = 500;
      reply.response.body = R"({"error": {"message": "internal error while handling the request", "type": "server_error"}})";
    }
    log_ = std::move(reply.log);
    if (!reply.job) return write_response(std::move(reply.response));
    job_ = std::move(reply.job);
    auto self = shared_from_this();
    // The loop thread calls this; it only schedules a poll on this session's event loop,
    // through the loop's relay (one wake-up for all the sessions a step serves). The session
    // stays alive through it until the job is dropped (which drops the notifier).
    job_->set_notifier([self] {
      if (!self->poll_scheduled_.exchange(true)) self->relay_.post(self);
    });
    watch_client();
    if (job_->streaming()) {
      sse_head_.emplace(http::status::ok, version_);
      sse_head_->set(http::field::content_type, "text/event-stream");
      sse_head_->set(http::field::cache_control, "no-cache");
      sse_head_->set("X-Request-Id", log_.request_id);
      for (auto& [k, v] : cors_) sse_head_->set(k, v);
      sse_head_->keep_alive(keep_alive_);
      sse_head_->chunked(true);
      sse_serializer_.emplace(*sse_head_);
      writing_ = true;
      http::async_write_header(stream_, *sse_serializer_,
                               beast::bind_front_handler(&Session::on_stream_write, shared_from_this()));
    }
  }

  // Reads while a job runs, to notice a client that goes away; bytes that arrive (a pipelined
  // next request) are kept for the next read.
  void watch_client() {
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096), beast::bind_front_handler(&Session::on_watch, shared_from_this()));
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) {
      buffer_.commit(n);
    } else if (ec != net::error::operation_aborted) {
      client_gone_ = true;
      if (job_) job_->cancel();
      if (!writing_) return end_exchange_and_close();
      return;
    }
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      read_request();
    }
  }

  void on_relayed() override {
    poll_scheduled_.store(false);
    on_job_events();
  }

  // Each notification schedules one poll, so polls may outnumber events: one that runs after the
  // job's last event finds it done again. Only the first answer is written.
  void on_job_events() {
    if (!job_ || job_answered_) return;
    Job::Output out = job_->poll(pending_);
    if (out.done) job_answered_ = true;
    if (job_->streaming()) {
      if (out.done) job_done_ = true;
      if (!writing_) flush_stream();
      return;
    }
    if (out.done) {
      HttpResponse r = out.response ? std::move(*out.response) : HttpResponse{};
      if (client_gone_) return end_exchange_and_close();
      write_response(std::move(r));
    }
  }

  // Sends what is pending as one HTTP chunk, followed by the last chunk once the job is done.
  void flush_stream() {
    if (client_gone_) return end_exchange_and_close();
    if (pending_.empty() && !job_done_) return;
    chunk_.clear();  // keeps its capacity: no allocation a token
    if (!pending_.empty()) {
      char size[16];
      char* size_end = std::to_chars(size, size + sizeof size, pending_.size(), 16).ptr;
      chunk_.append(size, size_end).append("\r\n").append(pending_).append("\r\n");
      pending_.clear();
    }
    if (job_done_) {
      chunk_ += "0\r\n\r\n";
      job_done_ = false;
      last_chunk_sent_ = true;
    }
    writing_ = true;
    beast::error_code ec;
    const size_t sent = write_now(chunk_, ec);
    if (ec || sent == chunk_.size()) return on_stream_write(ec, sent);
    net::async_write(stream_, net::buffer(chunk_.data() + sent, chunk_.size() - sent),
                     beast::bind_front_handler(&Session::on_stream_write, shared_from_this()));
  }

  // A token's chunk nearly always fits in the socket's send buffer at once: writing it straight
  // away (the socket is non-blocking) costs no asynchronous operation and no handler. Returns the
  // bytes written; what a full buffer left goes out asynchronously.
  size_t write_now(const std::string& bytes, beast::error_code& ec) {
    const size_t n = stream_.socket().write_some(net::buffer(bytes), ec);
    if (ec == net::error::would_block || ec == net::error::try_again) {
      ec = {};
      return 0;
    }
    return ec ? 0 : n;
  }

  void on_stream_write(beast::error_code ec, size_t) {
    writing_ = false;
    if (ec) {
      client_gone_ = true;
      if (job_) job_->cancel();
      return end_exchange_and_close();
    }
    log_.status = 200;
    if (last_chunk_sent_) return end_exchange();
    flush_stream();
  }

  void write_response(HttpResponse r) {
    log_.status = r.status;
    res_.emplace(static_cast<http::status>(r.status), version_);
    res_->set(http::field::server, "kiln");
    res_->set(http::field::content_type, r.content_type);
    res_->set("X-Request-Id", log_.request_id);
    for (auto& [k, v] : r.headers) res_->set(k, v);
    for (auto& [k, v] : cors_) res_->set(k, v);
    res_->keep_alive(keep_alive_);
    if (head_) {
      res_->content_length(r.body.size());
    } else {
      res_->body() = std::move(r.body);
      res_->prepare_payload();
    }
    writing_ = true;
    stream_.expires_after(ms(config_.idle_timeout_s));
    if (head_) {
      empty_serializer_.emplace(*res_);
      http::async_write_header(stream_, *empty_serializer_,
                               beast::bind_front_handler(&Session::on_response_written, shared_from_this()));
      return;
    }
    http::async_write(stream_, *res_, beast::bind_front_handler(&Session::on_response_written, shared_from_this()));
  }

  void on_response_written(beast::error_code ec, size_t) {
    writing_ = false;
    if (ec) return end_exchange_and_close();
    end_exchange();
  }

  // The exchange's last byte is written: log it, then the next request or close.
  void end_exchange() {
    finish_log();
    if (!keep_alive_ || client_gone_) return close();
    if (watching_) {
      resume_after_watch_ = true;
      stream_.socket().cancel();
      return;
    }
    read_request();
  }

  void end_exchange_and_close() {
    if (in_exchange_ && log_.status == 0) log_.status = 499;  // the client went away first
    finish_log();
    close();
  }

  void finish_log() {
    if (!in_exchange_) return;
    in_exchange_ = false;
    log_.duration_s = std::chrono::duration<double>(Clock::now() - start_).count();
    service_.finish(log_, job_.get());
    job_.reset();
    sse_serializer_.reset();
    sse_head_.reset();
    empty_serializer_.reset();
    last_chunk_sent_ = false;
    job_done_ = false;
    job_answered_ = false;
    pending_.clear();
    active_.n.fetch_sub(1);
  }

  void close() {
    if (job_) job_->cancel();
    job_.reset();
    beast::error_code ec;
    if (linger_ && stream_.socket().is_open()) {
      // After refusing a request the client may still be sending its body; read and drop it for
      // a while so that the client sees the answer instead of a reset connection.
      linger_ = false;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      stream_.expires_after(std::chrono::seconds(5));
      return drain();
    }
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  void drain() {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(65536), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->stream_.close();
        return;
      }
      self->drain();
    });
  }

  Stream stream_;
  Timer timer_;
  Service& service_;
  const ServerConfig& config_;
  ActiveCount& active_;
  EventRelay& relay_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  std::optional<http::response_serializer<http::string_body>> empty_serializer_;
  std::optional<http::response<http::empty_body>> sse_head_;
  std::optional<http::response_serializer<http::empty_body>> sse_serializer_;
  std::unique_ptr<Job> job_;
  std::atomic<bool> poll_scheduled_{false};
  AccessLogEntry log_;
  Clock::time_point start_, read_started_;
  std::string pending_, chunk_;  // stream bytes not yet written; the chunk being written
  std::vector<std::pair<std::string, std::string>> cors_;  // for an allowed cross-origin page
  unsigned version_ = 11;
  bool keep_alive_ = true, head_ = false, in_exchange_ = false, writing_ = false, watching_ = false;
  bool resume_after_watch_ = false, client_gone_ = false, job_done_ = false, job_answered_ = false, last_chunk_sent_ = false;
  bool timed_out_ = false, linger_ = false;
};

// One network thread's event loop and the relay that wakes it.
struct EventLoop {
  net::io_context ioc{1};
  net::executor_work_guard<Executor> work{ioc.get_executor()};  // runs until stop()
  EventRelay relay{ioc};
};

std::vector<std::unique_ptr<EventLoop>> make_loops(int n) {
  std::vector<std::unique_ptr<EventLoop>> loops;
  for (int i = 0; i < n; ++i) loops.push_back(std::make_unique<EventLoop>());
  return loops;
}

}  // namespace

struct HttpServer::Impl {
  Impl(Service& s, const ServerConfig& c)
      : service(s),
        config(c),
        loops(make_loops(c.network_threads)),
        acceptor(loops[0]->ioc),
        signals(loops[0]->ioc, SIGINT, SIGTERM) {}

  // The acceptor and the signals live on the first loop; connections go to the loops in turn.
  void accept() {
    EventLoop& loop = *loops[next_loop];
    next_loop = (next_loop + 1) % loops.size();
    acceptor.async_accept(loop.ioc.get_executor(), [this, &loop](beast::error_code ec, Socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      } else {
        std::make_shared<Session>(std::move(socket), service, config, active, loop.relay)->start();
      }
      accept();
    });
  }

  Service& service;
  const ServerConfig& config;
  std::vector<std::unique_ptr<EventLoop>> loops;  // before the acceptor and signals, which use the first
  size_t next_loop = 0;                           // the first loop's thread only
  tcp::acceptor acceptor;
  net::signal_set signals;
  // on_signal's callback, and a signal that came before there was one (between start() and
  // on_signal()), delivered when the callback is set.
  std::mutex signal_mu;
  std::function<void(int)> signal_fn;
  int pending_signal = 0;
  ActiveCount active;
  std::vector<std::thread> threads;
  int port = 0;
};

HttpServer::HttpServer(Service& service, const ServerConfig& config) : impl_(std::make_unique<Impl>(service, config)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  beast::error_code ec;
  auto address = net::ip::make_address(impl_->config.host, ec);
  if (ec) return invalid_argument("--host '" + impl_->config.host + "' is not an IP address");
  tcp::endpoint ep(address, static_cast<unsigned short>(impl_->config.port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return io_error("cannot listen on " + impl_->config.host + ":" + std::to_string(impl_->config.port) + ": " + ec.message());
  }
  impl_->port = a.local_endpoint().port();
  impl_->accept();
  impl_->signals.async_wait([this](beast::error_code e, int sig) {
    if (e) return;
    std::function<void(int)> fn;
    {
      std::lock_guard lock(impl_->signal_mu);
      if (!impl_->signal_fn) {
        impl_->pending_signal = sig;
        return;
      }
      fn = impl_->signal_fn;
    }
    fn(sig);
  });
  for (auto& loop : impl_->loops) {
    impl_->threads.emplace_back([&ioc = loop->ioc] {
      set_current_thread_name("kiln-http");
      lower_current_thread_priority();
      ioc.run();
    });
  }
  return Status::ok();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::on_signal(std::function<void(int)> fn) {
  int pending = 0;
  {
    std::lock_guard lock(impl_->signal_mu);
    impl_->signal_fn = fn;
    std::swap(pending, impl_->pending_signal);
  }
  if (pending != 0 && fn) fn(pending);
}

void HttpServer::stop_accepting() {
  net::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
}

void HttpServer::wait_idle(double seconds) {
  const auto deadline = Clock::now() + ms(seconds);
  while (impl_->active.n.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void HttpServer::stop() {
  for (auto& loop : impl_->loops) loop->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace kiln::server
