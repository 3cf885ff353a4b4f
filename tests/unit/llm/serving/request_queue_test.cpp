#include "llm/serving/request_queue.h"

#include <gtest/gtest.h>

namespace kiln::llm {
namespace {

RequestEvent delta(int32_t token, FinishReason finish = FinishReason::kNone) {
  RequestEvent e;
  e.kind = RequestEvent::Kind::kDelta;
  e.text = "t" + std::to_string(token);
  e.tokens.push_back(TokenInfo{token, std::nullopt, {}});
  e.finish = finish;
  return e;
}

RequestEvent finished() {
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinished;
  return e;
}

// Pushes `tokens` deltas (the last one finishing the choice) and the request's end; returns, for
// each push, whether the notifier ran at it.
std::vector<bool> notifications(int32_t notify_every, int tokens) {
  GenerationRequest r;
  r.prompt = {1};
  r.notify_every = notify_every;
  ResponseStream stream(std::move(r));
  int calls = 0;
  stream.set_notifier([&] { ++calls; });
  std::vector<bool> seen;
  auto push = [&](RequestEvent e) {
    const int before = calls;
    stream.push(std::move(e));
    seen.push_back(calls > before);
  };
  for (int i = 0; i < tokens; ++i) push(delta(i, i + 1 == tokens ? FinishReason::kLength : FinishReason::kNone));
  push(finished());
  std::vector<RequestEvent> events;
  EXPECT_TRUE(stream.pop_all(events));
  EXPECT_EQ(events.size(), static_cast<size_t>(tokens + 1)) << "every event arrives, notified or not";
  return seen;
}

TEST(ResponseStream, NotifiesAtEveryEventByDefault) {
  EXPECT_EQ(notifications(1, 4), std::vector<bool>(5, true));
}

TEST(ResponseStream, NotifyEveryNGathersTokensButSendsTheFirstAndTheEndAtOnce) {
  // Tokens 0..7: the first at once, then after 3 more (3), 3 more (6); 7 ends the choice.
  const std::vector<bool> want = {true, false, false, true, false, false, true, true, true};
  EXPECT_EQ(notifications(3, 8), want);
}

TEST(ResponseStream, NotifyEveryZeroWaitsForTheLastEvent) {
  std::vector<bool> want(6, false);
  want.back() = true;
  EXPECT_EQ(notifications(0, 5), want);
}

TEST(ResponseStream, ALateNotifierHearsOfEventsAlreadyWaiting) {
  GenerationRequest r;
  r.prompt = {1};
  r.notify_every = 4;
  ResponseStream stream(std::move(r));
  stream.push(delta(0));
  stream.push(delta(1));
  int calls = 0;
  stream.set_notifier([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  stream.push(delta(2));
  stream.push(delta(3));
  stream.push(delta(4));
  EXPECT_EQ(calls, 1) << "three tokens since the notifier ran";
  stream.push(delta(5));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace kiln::llm
