// StopMatcher: stop strings across token boundaries, held-back text, stop tokens, EOS and
// max_tokens, plus a property check that the emitted text never depends on where the token
// boundaries fall.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llm/generation/stop_matcher.h"

namespace kiln::llm {
namespace {

constexpr int32_t kEos = 2;
constexpr int32_t kToken = 100;  // an ordinary token

SamplingParams with_stops(std::vector<std::string> stop, int32_t max_tokens = 100) {
  SamplingParams p;
  p.stop = std::move(stop);
  p.max_tokens = max_tokens;
  return p;
}

// Feeds `pieces` as ordinary tokens until the matcher finishes; returns what each step emitted.
struct Fed {
  std::vector<std::string> emitted;
  StopMatcher::Step last;
  std::string text() const {
    std::string all;
    for (const std::string& piece : emitted) all += piece;
    return all;
  }
};

Fed feed(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  Fed run;
  for (const std::string& piece : pieces) {
    run.last = matcher.append(kToken, piece);
    run.emitted.push_back(run.last.text);
    if (matcher.finished()) break;
  }
  return run;
}

const std::vector<int32_t> kEosIds = {kEos};

TEST(StopMatcher, StopStringSpansTokenBoundaries) {
  StopMatcher matcher(with_stops({"lo w"}), kEosIds);
  const Fed run = feed(matcher, {"Hel", "lo wor", "ld"});
  // "Hel": the trailing "l" could start "lo w", so only "He" goes out.
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"He", "l"}));
  EXPECT_EQ(run.last.finish, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_string, "lo w");
  EXPECT_FALSE(run.last.stop_token.has_value());
  EXPECT_EQ(matcher.num_tokens(), 2);
}

TEST(StopMatcher, HeldTextIsReleasedWhenItCannotBecomeAStop) {
  StopMatcher matcher(with_stops({"lo w"}), kEosIds);
  StopMatcher::Step step = matcher.append(kToken, "Hel");
  EXPECT_EQ(step.text, "He");
  EXPECT_EQ(matcher.held_text(), "l");
  step = matcher.append(kToken, "lo");  // "llo": "lo" could still start "lo w"
  EXPECT_EQ(step.text, "l");
  EXPECT_EQ(matcher.held_text(), "lo");
  step = matcher.append(kToken, "!");
  EXPECT_EQ(step.text, "lo!");
  EXPECT_EQ(matcher.held_text(), "");
  EXPECT_EQ(step.finish, FinishReason::kNone);
}

TEST(StopMatcher, OverlappingCandidatesOfOneStopString) {
  // "aaab" with stop "aab": each "a" could start the stop; the match starts at the second "a".
  StopMatcher matcher(with_stops({"aab"}), kEosIds);
  const Fed run = feed(matcher, {"a", "a", "a", "b", "more"});
  EXPECT_EQ(run.text(), "a");
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(run.last.stop_string, "aab");
}

TEST(StopMatcher, FirstStopStringToEndWins) {
  {
    // "bc" ends before "abcd" does, even when one token completes both.
    StopMatcher matcher(with_stops({"abcd", "bc"}), kEosIds);
    const Fed run = feed(matcher, {"xabcd"});
    EXPECT_EQ(run.text(), "xa");
    EXPECT_EQ(run.last.stop_string, "bc");
  }
  {
    // Ending at the same place, the longer one (starting earlier) wins.
    StopMatcher matcher(with_stops({"b", "ab"}), kEosIds);
    const Fed run = feed(matcher, {"x", "ab"});
    EXPECT_EQ(run.text(), "x");
    EXPECT_EQ(run.last.stop_string, "ab");
  }
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher matcher(with_stops({"###"}), kEosIds);
  const Fed run = feed(matcher, {"###", "never"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{""}));
  EXPECT_EQ(run.last.finish, FinishReason::kStop);
  EXPECT_TRUE(matcher.finished());
}

TEST(StopMatcher, MultipleStopStrings) {
  StopMatcher matcher(with_stops({"\n\nUser:", "END", "\n\n\n"}), kEosIds);
  const Fed run = feed(matcher, {"Answer", ": 42\n", "\n", "Us", "ed"});
  // "\n\n" could start two stops; "Us" keeps it possible; "ed" rules both out. No stop matched.
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"Answer", ": 42", "", "", "\n\nUsed"}));
  EXPECT_EQ(run.last.finish, FinishReason::kNone);
  const Fed ending = feed(matcher, {" E", "ND", "x"});
  EXPECT_EQ(ending.text(), " ");
  EXPECT_EQ(ending.last.stop_string, "END");
}

TEST(StopMatcher, UnicodeStopStrings) {
  StopMatcher matcher(with_stops({"日本", "é!"}), kEosIds);
  StopMatcher::Step step = matcher.append(kToken, "café");
  EXPECT_EQ(step.text, "caf");  // "é" could start "é!" and is held whole
  step = matcher.append(kToken, "?");
  EXPECT_EQ(step.text, "é?");
  step = matcher.append(kToken, "こんにちは日");
  EXPECT_EQ(step.text, "こんにちは");
  step = matcher.append(kToken, "本語");
  EXPECT_EQ(step.text, "");
  EXPECT_EQ(step.stop_string, "日本");
}

TEST(StopMatcher, StopTokenEndsWithoutItsText) {
  SamplingParams p = with_stops({"lo w"});
  p.stop_token_ids = {7};
  StopMatcher matcher(p, kEosIds);
  EXPECT_EQ(matcher.append(kToken, "Hel").text, "He");
  const StopMatcher::Step step = matcher.append(7, "<|im_end|>");
  EXPECT_EQ(step.text, "l");  // held text is released, the stop token's text is not
  EXPECT_EQ(step.finish, FinishReason::kStop);
  EXPECT_EQ(step.stop_token, 7);
  EXPECT_FALSE(step.stop_string.has_value());
}

TEST(StopMatcher, EosEndsUnlessIgnored) {
  StopMatcher matcher(with_stops({}), kEosIds);
  EXPECT_EQ(matcher.append(kToken, "hi").text, "hi");
  StopMatcher::Step step = matcher.append(kEos, "</s>");
  EXPECT_EQ(step.text, "");
  EXPECT_EQ(step.finish, FinishReason::kStop);
  EXPECT_FALSE(step.stop_token.has_value());

  SamplingParams p = with_stops({}, 3);
  p.ignore_eos = true;
  StopMatcher ignoring(p, kEosIds);
  step = ignoring.append(kEos, "</s>");
  EXPECT_EQ(step.text, "</s>");
  EXPECT_EQ(step.finish, FinishReason::kNone);
}

TEST(StopMatcher, MaxTokensEndsWithLengthAndReleasesHeldText) {
  StopMatcher matcher(with_stops({"STOP"}, 2), kEosIds);
  EXPECT_EQ(matcher.append(kToken, "ab").finish, FinishReason::kNone);
  const StopMatcher::Step step = matcher.append(kToken, "ST");
  EXPECT_EQ(step.text, "ST");
  EXPECT_EQ(step.finish, FinishReason::kLength);
  EXPECT_EQ(finish_reason_name(step.finish), "length");
}

TEST(StopMatcher, StopStringOnTheLastTokenIsStopNotLength) {
  StopMatcher matcher(with_stops({"STOP"}, 2), kEosIds);
  matcher.append(kToken, "xST");
  const StopMatcher::Step step = matcher.append(kToken, "OP");
  EXPECT_EQ(step.finish, FinishReason::kStop);
  EXPECT_EQ(finish_reason_name(step.finish), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kNone), "");
}

// The text emitted before a stop depends only on the whole text, never on token boundaries:
// random texts over a small alphabet, cut at random places, against a direct search.
TEST(StopMatcher, EmittedTextIsIndependentOfTokenBoundaries) {
  std::mt19937 rng(1234);
  const std::string alphabet = "abc";
  auto random_string = [&](size_t length) {
    std::string s;
    for (size_t i = 0; i < length; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::string> stops;
    const size_t num_stops = 1 + rng() % 3;
    for (size_t i = 0; i < num_stops; ++i) stops.push_back(random_string(1 + rng() % 4));
    const std::string text = random_string(rng() % 30);

    // Reference: the occurrence that ends first (the longest of those ending there).
    size_t best_start = std::string::npos;
    size_t best_end = std::string::npos;
    for (const std::string& stop : stops) {
      const size_t pos = text.find(stop);
      if (pos == std::string::npos) continue;
      const size_t end = pos + stop.size();
      if (end < best_end || (end == best_end && pos < best_start)) {
        best_start = pos;
        best_end = end;
      }
    }
    const std::string expected = best_start == std::string::npos ? text : text.substr(0, best_start);

    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min(text.size() - at, static_cast<size_t>(1 + rng() % 5));
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    pieces.emplace_back("");  // an empty piece (a token whose text is not complete yet) is allowed
    StopMatcher matcher(with_stops(stops, static_cast<int32_t>(pieces.size())), kEosIds);
    const Fed run = feed(matcher, pieces);
    ASSERT_TRUE(matcher.finished());
    ASSERT_EQ(run.text(), expected) << "text '" << text << "' trial " << trial;
    EXPECT_EQ(run.last.finish, best_start == std::string::npos ? FinishReason::kLength : FinishReason::kStop);
  }
}

}  // namespace
}  // namespace kiln::llm
