// The HTTP side of `kiln bench serve` against a real HTTP/1.1 server on loopback: a small blocking
// Beast server in this file that streams OpenAI completion chunks in chunked transfer encoding,
// splitting events across chunks, and can refuse (429) or cut a stream off. Checks exact token
// counts, the max-concurrency bound, keep-alive reuse, and that refused and cut-off requests are
// counted as failures with their reasons. No timing assertions.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

#include "cli/bench_serve/bench_report.h"
#include "cli/bench_serve/load_client.h"
#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class LoopbackOpenAiServer {
 public:
  LoopbackOpenAiServer() : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~LoopbackOpenAiServer() {
    // A blocking accept() is not woken by closing its socket; a last connection wakes it.
    stopping_ = true;
    {
      tcp::socket wake(ioc_);
      beast::error_code ec;
      wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)), ec);
      accept_thread_.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : workers_) t.join();
  }
  int port() const { return port_; }
  int connections() const { return connections_; }
  int peak_active() const { return peak_active_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      beast::error_code ec;
      tcp::socket socket(ioc_);
      acceptor_.accept(socket, ec);
      if (ec || stopping_) return;
      ++connections_;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, s = std::move(socket)]() mutable { serve(std::move(s)); });
    }
  }

  static void write_chunk(tcp::socket& s, const std::string& data, beast::error_code& ec) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    asio::write(s, asio::buffer(std::string(size) + data + "\r\n"), ec);
  }

  void serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      if (req.method() == http::verb::get && req.target() == "/v1/models") {
        http::response<http::string_body> res{http::status::ok, 11};
        res.body() = R"({"object":"list","data":[{"id":"loopback-model","object":"model"}]})";
        res.prepare_payload();
        http::write(socket, res, ec);
        if (ec) return;
        continue;
      }
      const auto body = nlohmann::json::parse(req.body());
      const int64_t max_tokens = body["max_tokens"].get<int64_t>();
      const std::string prompt = body["prompt"].is_string() ? body["prompt"].get<std::string>() : "";
      if (prompt == "reject") {
        http::response<http::string_body> res{http::status::too_many_requests, 11};
        res.set(http::field::retry_after, "1");
        res.body() = R"({"error":{"message":"queue full","type":"rate_limit"}})";
        res.prepare_payload();
        http::write(socket, res, ec);
        if (ec) return;
        continue;
      }
      const int active = ++active_;
      for (int peak = peak_active_; active > peak && !peak_active_.compare_exchange_weak(peak, active);) {
      }
      asio::write(socket,
                  asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                           "Transfer-Encoding: chunked\r\n\r\n")),
                  ec);
      // Events are written in pieces that cut through lines and events, as a real server's writes may.
      std::string events;
      for (int64_t i = 0; i < max_tokens; ++i) events += "data: {\"choices\":[{\"index\":0,\"text\":\" t\"}]}\n\n";
      events += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":" +
                std::to_string(max_tokens) + "}}\n\n";
      if (prompt == "cut") {
        write_chunk(socket, events.substr(0, events.size() / 2), ec);
        --active_;
        return;  // closes the connection mid-stream
      }
      events += "data: [DONE]\n\n";
      for (size_t pos = 0; pos < events.size() && !ec; pos += 37) write_chunk(socket, events.substr(pos, 37), ec);
      if (!ec) asio::write(socket, asio::buffer(std::string("0\r\n\r\n")), ec);
      --active_;
      // "close": a whole kept-alive response, then the connection closes, as a server does to a
      // connection that idled past its timeout.
      if (ec || prompt == "close") return;
    }
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0}, active_{0}, peak_active_{0};
};

LoadConfig config_for(const LoopbackOpenAiServer& server) {
  LoadConfig c;
  c.url = *parse_server_url("http://127.0.0.1:" + std::to_string(server.port()));
  c.path = "/v1/completions";
  c.model = "loopback-model";
  c.io_timeout_s = 30;
  return c;
}

BenchPrompt text_prompt(const std::string& text, int64_t output_len) {
  BenchPrompt p;
  p.text = text;
  p.output_len = output_len;
  return p;
}

TEST(BenchServeClient, ExactCountsWithinTheConcurrencyBoundOverKeptAliveConnections) {
  LoopbackOpenAiServer server;
  LoadConfig config = config_for(server);
  config.max_concurrency = 3;
  std::vector<BenchPrompt> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(text_prompt("hello", 5 + i % 4));
  int64_t progress_calls = 0, last_done = 0;
  auto result = run_load(config, prompts, std::vector<double>(prompts.size(), 0.0), [&](int64_t done, int64_t total) {
    ++progress_calls;
    last_done = done;
    EXPECT_EQ(total, 24);
  });
  ASSERT_TRUE(result) << result.status().message();
  EXPECT_EQ(progress_calls, 24);
  EXPECT_EQ(last_done, 24);
  EXPECT_EQ(result->peak_in_flight, 3);
  EXPECT_LE(server.peak_active(), 3);
  EXPECT_LE(server.connections(), 3);  // connections are reused, never more than in flight
  for (size_t i = 0; i < prompts.size(); ++i) {
    const RequestRecord& r = result->records[i];
    ASSERT_TRUE(r.success) << i << ": " << r.error;
    EXPECT_TRUE(r.done_seen);
    EXPECT_EQ(r.output_tokens, prompts[i].output_len);
    EXPECT_EQ(r.text_chunks, prompts[i].output_len);
    EXPECT_EQ(r.itl_s.size(), static_cast<size_t>(prompts[i].output_len - 1));
    EXPECT_EQ(r.prompt_tokens, 3);
    EXPECT_LE(r.ttft_s, r.e2el_s);
  }
  const BenchReport report = make_report(*result, Slo{});
  EXPECT_EQ(report.completed, 24);
  EXPECT_EQ(report.failed, 0);
  EXPECT_EQ(report.output_len_mismatch, 0);
  EXPECT_EQ(report.total_output_tokens, 6 * (5 + 6 + 7 + 8));
}

TEST(BenchServeClient, RefusedAndCutOffRequestsFailWithTheirReasons) {
  LoopbackOpenAiServer server;
  const std::vector<BenchPrompt> prompts = {text_prompt("hello", 4), text_prompt("reject", 4),
                                            text_prompt("cut", 6), text_prompt("hello", 2)};
  auto result = run_load(config_for(server), prompts, {0.0, 0.0, 0.0, 0.0}, [](int64_t, int64_t) {});
  ASSERT_TRUE(result) << result.status().message();
  const auto& r = result->records;
  EXPECT_TRUE(r[0].success) << r[0].error;
  EXPECT_FALSE(r[1].success);
  EXPECT_EQ(r[1].error, "HTTP 429: queue full");
  EXPECT_FALSE(r[2].success);
  EXPECT_NE(r[2].error.find("stream"), std::string::npos) << r[2].error;
  EXPECT_TRUE(r[3].success) << r[3].error;
  const BenchReport report = make_report(*result, Slo{});
  EXPECT_EQ(report.completed, 2);
  EXPECT_EQ(report.failed, 2);
}

TEST(BenchServeClient, ConnectionsTheServerClosedWhileIdleAreReplaced) {
  LoopbackOpenAiServer server;
  // Three streams at once leave three kept-alive connections that the server then closes; a
  // request that comes later must not fail on them, however many of them it tries first.
  const std::vector<BenchPrompt> prompts = {text_prompt("close", 3), text_prompt("close", 3),
                                            text_prompt("close", 3), text_prompt("hello", 4)};
  auto result = run_load(config_for(server), prompts, {0.0, 0.0, 0.0, 0.5}, [](int64_t, int64_t) {});
  ASSERT_TRUE(result) << result.status().message();
  for (const RequestRecord& r : result->records) EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(result->records[3].output_tokens, 4);
  EXPECT_EQ(server.connections(), 4);
}

TEST(BenchServeClient, ModelFromTheModelsListAndClearErrorWithoutServer) {
  LoopbackOpenAiServer server;
  auto model = first_served_model(config_for(server));
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(*model, "loopback-model");

  LoadConfig nobody = config_for(server);
  {
    // A port nobody listens on: bind one, then close it.
    asio::io_context ioc;
    tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    nobody.url.port = std::to_string(a.local_endpoint().port());
  }
  auto none = first_served_model(nobody);
  ASSERT_FALSE(none);
  EXPECT_NE(none.status().message().find("cannot connect"), std::string::npos) << none.status().message();
  auto result = run_load(nobody, {text_prompt("hello", 2)}, {0.0}, [](int64_t, int64_t) {});
  ASSERT_TRUE(result);
  EXPECT_FALSE(result->records[0].success);
  EXPECT_EQ(result->records[0].error.rfind("connect: ", 0), 0u) << result->records[0].error;
}

}  // namespace
}  // namespace kiln::cli::bench_serve
