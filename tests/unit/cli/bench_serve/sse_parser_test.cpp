// Server-sent events split at arbitrary points, the meaning of OpenAI stream chunks, and URLs, as
// `kiln bench serve` reads them.
#include <gtest/gtest.h>

#include <random>

#include "cli/bench_serve/openai_stream.h"
#include "nlohmann/json.hpp"
#include "cli/bench_serve/server_url.h"
#include "cli/bench_serve/sse_parser.h"

namespace kiln::cli::bench_serve {
namespace {

// Feeds `stream` cut at `cuts` (ascending offsets) and returns the events.
std::vector<SseEvent> parse_pieces(const std::string& stream, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<SseEvent> events;
  size_t from = 0;
  auto pieces = cuts;
  pieces.push_back(stream.size());
  for (size_t to : pieces) {
    const Status s = parser.feed(std::string_view(stream).substr(from, to - from),
                                 [&](SseEvent&& e) { events.push_back(std::move(e)); });
    EXPECT_TRUE(s.is_ok()) << s.message();
    from = to;
  }
  return events;
}

// A stream with every line ending, a comment, a multi-line event, a field without a space, an
// event type, an id, an empty data line, and UTF-8 text, opened by a byte-order mark.
const std::string kStream =
    "\xEF\xBB\xBF: keep-alive comment\r\n"
    "data: {\"a\":1}\r\n\r\n"
    "data:no-space\n\n"
    "event: update\rid: 7\rdata: line one\rdata: line two\r\r"
    "retry: 1000\n"
    "data\n\n"
    "data: caf\xC3\xA9 \xE2\x9C\x93\r\n\r\n"
    "data: [DONE]\n\n"
    "data: never finished";

void expect_expected_events(const std::vector<SseEvent>& e, const std::string& context) {
  ASSERT_EQ(e.size(), 6u) << context;
  EXPECT_EQ(e[0].data, "{\"a\":1}") << context;
  EXPECT_EQ(e[1].data, "no-space") << context;
  EXPECT_EQ(e[2].event, "update") << context;
  EXPECT_EQ(e[2].id, "7") << context;
  EXPECT_EQ(e[2].data, "line one\nline two") << context;
  EXPECT_EQ(e[3].data, "") << context;
  EXPECT_EQ(e[3].event, "") << context;
  EXPECT_EQ(e[4].data, "caf\xC3\xA9 \xE2\x9C\x93") << context;
  EXPECT_EQ(e[5].data, "[DONE]") << context;
}

TEST(BenchServeSse, WholeStreamInOnePiece) { expect_expected_events(parse_pieces(kStream, {}), "one piece"); }

TEST(BenchServeSse, EverySingleSplitPoint) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    expect_expected_events(parse_pieces(kStream, {cut}), "cut at " + std::to_string(cut));
  }
}

TEST(BenchServeSse, ByteByByteAndRandomSplits) {
  std::vector<size_t> every;
  for (size_t i = 1; i < kStream.size(); ++i) every.push_back(i);
  expect_expected_events(parse_pieces(kStream, every), "byte by byte");
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < kStream.size(); ++i) {
      if (rng() % 4 == 0) cuts.push_back(i);
    }
    expect_expected_events(parse_pieces(kStream, cuts), "round " + std::to_string(round));
  }
}

TEST(BenchServeSse, PartialEventIsReportedAndOverlongLineFails) {
  SseParser parser(64);
  int events = 0;
  const auto count = [&](SseEvent&&) { ++events; };
  ASSERT_TRUE(parser.feed("data: x\n", count).is_ok());
  EXPECT_TRUE(parser.has_partial());
  ASSERT_TRUE(parser.feed("\n", count).is_ok());
  EXPECT_FALSE(parser.has_partial());
  EXPECT_EQ(events, 1);
  EXPECT_FALSE(parser.feed(std::string(100, 'x'), count).is_ok());
  EXPECT_FALSE(parser.feed("\n\n", count).is_ok());  // stays failed
}

TEST(BenchServeOpenAiStream, CompletionAndChatChunks) {
  auto c = parse_stream_chunk(Endpoint::kCompletions,
                              R"({"id":"x","choices":[{"index":0,"text":" the","finish_reason":null}]})");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->text, " the");
  EXPECT_FALSE(c->finish_reason);
  EXPECT_FALSE(c->done);

  auto chat = parse_stream_chunk(Endpoint::kChatCompletions,
                                 R"({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"length"}]})");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->text, "Hi");
  EXPECT_EQ(chat->finish_reason, "length");
  auto role_only = parse_stream_chunk(Endpoint::kChatCompletions, R"({"choices":[{"delta":{"role":"assistant","content":null}}]})");
  ASSERT_TRUE(role_only);
  EXPECT_EQ(role_only->text, "");

  auto usage = parse_stream_chunk(Endpoint::kCompletions,
                                  R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->prompt_tokens, 12);
  EXPECT_EQ(usage->completion_tokens, 34);

  auto done = parse_stream_chunk(Endpoint::kCompletions, "[DONE]");
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->done);

  auto error = parse_stream_chunk(Endpoint::kCompletions, R"({"error":{"message":"out of blocks","code":500}})");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->error, "out of blocks");

  EXPECT_FALSE(parse_stream_chunk(Endpoint::kCompletions, "not json"));
  EXPECT_FALSE(parse_stream_chunk(Endpoint::kCompletions, "[1,2]"));
}

TEST(BenchServeOpenAiStream, RequestBodies) {
  BenchPrompt ids;
  ids.ids = {5, 6, 7};
  ids.output_len = 9;
  auto body = request_body(Endpoint::kCompletions, "m", ids);
  ASSERT_TRUE(body);
  const auto j = nlohmann::json::parse(*body);
  EXPECT_EQ(j["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["model"], "m");
  EXPECT_FALSE(request_body(Endpoint::kChatCompletions, "m", ids));

  BenchPrompt text;
  text.text = "hello";
  text.output_len = 3;
  auto chat = request_body(Endpoint::kChatCompletions, "m", text);
  ASSERT_TRUE(chat);
  EXPECT_EQ(nlohmann::json::parse(*chat)["messages"][0]["content"], "hello");

  EXPECT_EQ(*endpoint_kind("/v1/completions"), Endpoint::kCompletions);
  EXPECT_EQ(*endpoint_kind("/v1/chat/completions"), Endpoint::kChatCompletions);
  EXPECT_FALSE(endpoint_kind("/v1/models"));
}

TEST(BenchServeUrl, ParsesHostsPortsAndPaths) {
  auto a = parse_server_url("http://127.0.0.1:8000");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, "8000");
  EXPECT_EQ(a->path, "");
  EXPECT_EQ(a->host_header(), "127.0.0.1:8000");
  auto b = parse_server_url("http://[::1]:8080/v1/chat/completions");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->path, "/v1/chat/completions");
  EXPECT_EQ(b->host_header(), "[::1]:8080");
  auto c = parse_server_url("http://localhost/");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->port, "80");
  EXPECT_EQ(c->path, "");
  for (const char* bad : {"https://x:1", "ftp://x", "localhost:8000", "http://:80", "http://x:port", "http://x:70000",
                          "http://[::1:80"}) {
    EXPECT_FALSE(parse_server_url(bad)) << bad;
  }
}

}  // namespace
}  // namespace kiln::cli::bench_serve
