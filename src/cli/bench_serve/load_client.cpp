#include "cli/bench_serve/load_client.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <limits>

#include "cli/bench_serve/sse_parser.h"
#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class LoadRun {
 public:
  LoadRun(const LoadConfig& config, tcp::resolver::results_type endpoints)
      : config_(config),
        endpoints_(std::move(endpoints)),
        timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.io_timeout_s))),
        slot_freed_(ioc_) {}

  Expected<LoadResult> run(const std::vector<BenchPrompt>& prompts, const std::vector<double>& arrivals,
                           const std::function<void(int64_t, int64_t)>& progress) {
    KILN_CHECK(prompts.size() == arrivals.size());
    prompts_ = &prompts;
    progress_ = &progress;
    result_.records.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      result_.records[i].expected_output_tokens = prompts[i].output_len;
      result_.records[i].prompt_tokens = prompts[i].prompt_tokens;
    }
    start_ = Clock::now();
    last_finish_ = start_;
    asio::co_spawn(ioc_, dispatch(arrivals), asio::detached);
    ioc_.run();
    result_.duration_s = seconds(last_finish_ - start_);
    return std::move(result_);
  }

 private:
  // Starts each request at its arrival time, holding it while max_concurrency are in flight.
  awaitable<void> dispatch(const std::vector<double>& arrivals) {
    asio::steady_timer arrival(ioc_);
    for (size_t i = 0; i < arrivals.size(); ++i) {
      const auto when = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i]));
      if (when > Clock::now()) {
        arrival.expires_at(when);
        beast::error_code ec;
        co_await arrival.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      while (config_.max_concurrency && in_flight_ >= *config_.max_concurrency) {
        slot_freed_.expires_at(Clock::time_point::max());
        beast::error_code ec;
        co_await slot_freed_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      ++in_flight_;
      result_.peak_in_flight = std::max(result_.peak_in_flight, in_flight_);
      asio::co_spawn(ioc_, send(i), asio::detached);
    }
  }

  awaitable<void> send(size_t i) {
    RequestRecord& rec = result_.records[i];
    try {
      co_await exchange(i, rec);
    } catch (const std::exception& e) {
      rec.success = false;
      rec.error = std::string("client error: ") + e.what();
    }
    --in_flight_;
    slot_freed_.cancel();
    last_finish_ = std::max(last_finish_, Clock::now());
    ++finished_;
    (*progress_)(finished_, static_cast<int64_t>(result_.records.size()));
  }

  // One request and its streamed response. A kept-alive connection the server has closed in the
  // meantime (an idle timeout) fails before any response byte; the request is then sent once more
  // on a new connection, never on another idle one, which may have been closed as well.
  awaitable<void> exchange(size_t i, RequestRecord& rec) {
    const BenchPrompt& prompt = (*prompts_)[i];
    auto body = request_body(config_.endpoint, config_.model, prompt);
    if (!body) {
      rec.error = body.status().message();
      co_return;
    }
    http::request<http::string_body> req{http::verb::post, config_.path, 11};
    req.set(http::field::host, config_.url.host_header());
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.set(http::field::user_agent, "kiln-bench-serve");
    if (!config_.api_key.empty()) req.set(http::field::authorization, "Bearer " + config_.api_key);
    req.keep_alive(true);
    req.body() = std::move(*body);
    req.prepare_payload();

    const Clock::time_point t0 = Clock::now();
    rec.send_s = seconds(t0 - start_);
    for (int attempt = 0;; ++attempt) {
      const bool reused = attempt == 0 && !idle_.empty();
      beast::tcp_stream stream = reused ? pop_idle() : beast::tcp_stream(ioc_);
      beast::error_code ec;
      if (!reused) {
        stream.expires_after(timeout_);
        co_await stream.async_connect(endpoints_, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          rec.error = "connect: " + ec.message();
          co_return;
        }
        stream.socket().set_option(tcp::no_delay(true), ec);
      }
      stream.expires_after(timeout_);
      co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
      beast::flat_buffer buffer;
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (!ec) {
        stream.expires_after(timeout_);
        co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec) {
        if (reused && attempt == 0) continue;
        rec.error = "send: " + ec.message();
        co_return;
      }
      co_await read_stream(stream, buffer, parser, t0, rec);
      co_return;
    }
  }

  awaitable<void> read_stream(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                              http::response_parser<http::buffer_body>& parser, Clock::time_point t0,
                              RequestRecord& rec) {
    const unsigned status = parser.get().result_int();
    std::string error_body;
    SseParser sse;
    Clock::time_point last_text = t0;
    Status stream_error = Status::ok();
    const auto on_event = [&](SseEvent&& event) {
      const Clock::time_point now = Clock::now();
      auto chunk = parse_stream_chunk(config_.endpoint, event.data);
      if (!chunk) {
        if (stream_error.is_ok()) stream_error = chunk.status();
        return;
      }
      if (chunk->done) rec.done_seen = true;
      if (chunk->error && stream_error.is_ok()) stream_error = internal_error("server error in the stream: " + *chunk->error);
      if (!chunk->text.empty()) {
        if (rec.text_chunks == 0) {
          rec.ttft_s = seconds(now - t0);
        } else {
          rec.itl_s.push_back(seconds(now - last_text));
        }
        last_text = now;
        ++rec.text_chunks;
      }
      if (chunk->prompt_tokens) rec.prompt_tokens = chunk->prompt_tokens;
      if (chunk->completion_tokens) rec.output_tokens = *chunk->completion_tokens;
    };

    std::array<char, 16384> piece;
    beast::error_code ec;
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      stream.expires_after(timeout_);
      co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      const size_t n = piece.size() - parser.get().body().size;
      if (status != 200) {
        error_body.append(piece.data(), std::min(n, size_t{2048} - std::min(error_body.size(), size_t{2048})));
      } else if (const Status s = sse.feed(std::string_view(piece.data(), n), on_event); !s.is_ok()) {
        stream_error = s;
        break;
      }
    }
    rec.e2el_s = seconds(Clock::now() - t0);
    if (rec.output_tokens == 0) rec.output_tokens = rec.text_chunks;
    if (status != 200) {
      rec.error = "HTTP " + std::to_string(status) + ": " + error_message(error_body);
    } else if (ec) {
      rec.error = "stream cut off: " + ec.message();
    } else if (!stream_error.is_ok()) {
      rec.error = stream_error.message();
    } else if (!rec.done_seen) {
      rec.error = "stream ended without data: [DONE]";
    } else if (rec.text_chunks == 0) {
      rec.error = "no tokens in the stream";
    } else {
      rec.success = true;
    }
    if (!ec && parser.is_done() && parser.get().keep_alive()) idle_.push_back(std::move(stream));
  }

  // The message of an OpenAI error object, or the start of the body.
  static std::string error_message(const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object()) {
      const auto e = j.find("error");
      if (e != j.end() && e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
        return (*e)["message"].get<std::string>();
      }
    }
    return body.substr(0, 300);
  }

  beast::tcp_stream pop_idle() {
    beast::tcp_stream s = std::move(idle_.back());
    idle_.pop_back();
    return s;
  }

  const LoadConfig& config_;
  asio::io_context ioc_;
  tcp::resolver::results_type endpoints_;
  Clock::duration timeout_;
  asio::steady_timer slot_freed_;  // cancelled whenever a request finishes
  std::vector<beast::tcp_stream> idle_;
  const std::vector<BenchPrompt>* prompts_ = nullptr;
  const std::function<void(int64_t, int64_t)>* progress_ = nullptr;
  Clock::time_point start_, last_finish_;
  int64_t in_flight_ = 0, finished_ = 0;
  LoadResult result_;
};

Expected<tcp::resolver::results_type> resolve(const ServerUrl& url) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return not_found("cannot resolve " + url.host + ":" + url.port + ": " + ec.message());
  return endpoints;
}

}  // namespace

Expected<LoadResult> run_load(const LoadConfig& config, const std::vector<BenchPrompt>& prompts,
                              const std::vector<double>& arrivals,
                              const std::function<void(int64_t, int64_t)>& progress) {
  if (prompts.size() != arrivals.size()) return invalid_argument("one arrival time per prompt expected");
  KILN_ASSIGN_OR_RETURN(auto endpoints, resolve(config.url));
  LoadRun run(config, std::move(endpoints));
  return run.run(prompts, arrivals, progress);
}

Expected<std::string> first_served_model(const LoadConfig& config) {
  KILN_ASSIGN_OR_RETURN(auto endpoints, resolve(config.url));
  const std::string where = "http://" + config.url.host_header() + "/v1/models";
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.io_timeout_s)));
  stream.connect(endpoints, ec);
  if (ec) return io_error("cannot connect to " + where + ": " + ec.message());
  http::request<http::empty_body> req{http::verb::get, "/v1/models", 11};
  req.set(http::field::host, config.url.host_header());
  if (!config.api_key.empty()) req.set(http::field::authorization, "Bearer " + config.api_key);
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) return io_error(where + ": " + ec.message());
  if (res.result_int() != 200) {
    return io_error(where + " answered HTTP " + std::to_string(res.result_int()) + "; pass --model NAME");
  }
  const auto j = nlohmann::json::parse(res.body(), nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    return j["data"][0]["id"].get<std::string>();
  }
  return io_error(where + " lists no model; pass --model NAME");
}

}  // namespace kiln::cli::bench_serve
