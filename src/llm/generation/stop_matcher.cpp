#include "llm/generation/stop_matcher.h"

#include <algorithm>

#include "base/status.h"

namespace kiln::llm {
namespace {

bool contains(const std::vector<int32_t>& ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "";
}

StopMatcher::StopMatcher(const SamplingParams& params, std::span<const int32_t> eos_ids)
    : stop_strings_(params.stop), stop_token_ids_(params.stop_token_ids), max_tokens_(params.max_tokens) {
  if (!params.ignore_eos) eos_ids_.assign(eos_ids.begin(), eos_ids.end());
}

void StopMatcher::finish(Step& step, FinishReason reason) {
  step.text += held_;
  held_.clear();
  finish_ = reason;
  step.finish = reason;
}

StopMatcher::Step StopMatcher::append(int32_t token, std::string_view text) {
  KILN_CHECK(!finished());
  Step step;
  ++num_tokens_;
  if (contains(eos_ids_, token)) {
    finish(step, FinishReason::kStop);
    return step;
  }
  if (contains(stop_token_ids_, token)) {
    step.stop_token = token;
    finish(step, FinishReason::kStop);
    return step;
  }

  // held_ never contains a whole stop string, so any match found now ends inside `text`.
  held_.append(text);
  // The match that ends first is the stop string a reader of the text meets first.
  size_t match_pos = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& stop : stop_strings_) {
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    const size_t match_end = match == nullptr ? std::string::npos : match_pos + match->size();
    if (match == nullptr || end < match_end || (end == match_end && pos < match_pos)) {
      match_pos = pos;
      match = &stop;
    }
  }
  if (match != nullptr) {
    step.text = held_.substr(0, match_pos);
    step.stop_string = *match;
    held_.clear();
    finish_ = FinishReason::kStop;
    step.finish = finish_;
    return step;
  }

  // Hold the longest tail of held_ that some stop string starts with; release the rest. Text
  // before that tail can never become part of a stop string: a match starting there would make a
  // longer tail a prefix of a stop string, or would already have been found above.
  size_t longest_stop = 0;
  for (const std::string& stop : stop_strings_) longest_stop = std::max(longest_stop, stop.size());
  size_t hold = 0;
  for (size_t len = std::min(held_.size(), longest_stop); len > 0 && hold == 0; --len) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - len);
    for (const std::string& stop : stop_strings_) {
      if (stop.size() > len && std::string_view(stop).starts_with(tail)) {
        hold = len;
        break;
      }
    }
  }
  step.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);

  if (num_tokens_ >= max_tokens_) finish(step, FinishReason::kLength);
  return step;
}

}  // namespace kiln::llm
