#include "llm/generation/sampling_params.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln::llm {
namespace {

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

Status bad_field(std::string_view field, const std::string& value, std::string_view rule) {
  return invalid_argument(std::string(field) + " must be " + std::string(rule) + "; got " + value);
}

Status check_token(std::string_view field, int32_t token, int64_t vocab_size) {
  if (token < 0 || token >= vocab_size) {
    return invalid_argument(std::string(field) + " names token " + std::to_string(token) +
                            ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  }
  return Status::ok();
}

}  // namespace

Status validate(const SamplingParams& p, int64_t vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return bad_field("temperature", number_text(p.temperature), "a finite number >= 0 (0 means greedy)");
  }
  if (p.top_k < 0) {
    return bad_field("top_k", std::to_string(p.top_k), ">= 0 (0 turns top-k off)");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {  // also rejects NaN
    return bad_field("top_p", number_text(p.top_p), "in (0, 1] (1 turns top-p off)");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return bad_field("min_p", number_text(p.min_p), "in [0, 1] (0 turns min-p off)");
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return bad_field("repetition_penalty", number_text(p.repetition_penalty),
                     "a finite number > 0 (1 turns it off)");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return bad_field("presence_penalty", number_text(p.presence_penalty), "in [-2, 2]");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return bad_field("frequency_penalty", number_text(p.frequency_penalty), "in [-2, 2]");
  }
  for (const auto& [token, bias] : p.logit_bias) {
    KILN_RETURN_IF_ERROR(check_token("logit_bias", token, vocab_size));
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return bad_field("logit_bias[" + std::to_string(token) + "]", number_text(bias), "in [-100, 100]");
    }
  }
  if (p.max_tokens < 1) {
    return bad_field("max_tokens", std::to_string(p.max_tokens), ">= 1");
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return bad_field("min_tokens", std::to_string(p.min_tokens),
                     "in [0, max_tokens], and max_tokens is " + std::to_string(p.max_tokens));
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      return invalid_argument("stop[" + std::to_string(i) + "] is an empty string; every stop string needs at "
                              "least one character");
    }
  }
  for (int32_t token : p.stop_token_ids) {
    KILN_RETURN_IF_ERROR(check_token("stop_token_ids", token, vocab_size));
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return bad_field("logprobs", std::to_string(p.logprobs),
                     "-1 (none) or a count in [0, " + std::to_string(kMaxLogprobs) + "]");
  }
  return Status::ok();
}

namespace {

using Json = nlohmann::json;

// Reads `key` into `out` when present and not null; a value of another type is an error.
Status read_number(const Json& config, const char* key, float& out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return Status::ok();
  if (!it->is_number()) {
    return invalid_argument(std::string("generation_config.json: \"") + key + "\" must be a number; got " +
                            it->dump());
  }
  out = it->get<float>();
  return Status::ok();
}

Status read_integer(const Json& config, const char* key, int32_t& out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return Status::ok();
  if (!it->is_number_integer() || it->get<int64_t>() < std::numeric_limits<int32_t>::min() ||
      it->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return invalid_argument(std::string("generation_config.json: \"") + key +
                            "\" must be a 32-bit integer; got " + it->dump());
  }
  out = it->get<int32_t>();
  return Status::ok();
}

Status read_token_ids(const Json& config, const char* key, std::vector<int32_t>& out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return Status::ok();
  auto bad = [&] {
    return invalid_argument(std::string("generation_config.json: \"") + key +
                            "\" must be a token id or a list of token ids; got " + it->dump());
  };
  auto is_id = [](const Json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 &&
           v.get<int64_t>() <= std::numeric_limits<int32_t>::max();
  };
  if (is_id(*it)) {
    out = {it->get<int32_t>()};
    return Status::ok();
  }
  if (!it->is_array()) return bad();
  out.clear();
  for (const Json& v : *it) {
    if (!is_id(v)) return bad();
    out.push_back(v.get<int32_t>());
  }
  return Status::ok();
}

}  // namespace

Expected<GenerationDefaults> generation_defaults_from_json(std::string_view generation_config_json) {
  Json config = Json::parse(generation_config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    return invalid_argument("generation_config.json is not valid JSON");
  }
  if (!config.is_object()) {
    return invalid_argument("generation_config.json must hold a JSON object; got " + config.dump());
  }
  GenerationDefaults defaults;
  SamplingParams& p = defaults.params;
  KILN_RETURN_IF_ERROR(read_number(config, "temperature", p.temperature));
  KILN_RETURN_IF_ERROR(read_integer(config, "top_k", p.top_k));
  KILN_RETURN_IF_ERROR(read_number(config, "top_p", p.top_p));
  KILN_RETURN_IF_ERROR(read_number(config, "min_p", p.min_p));
  KILN_RETURN_IF_ERROR(read_number(config, "repetition_penalty", p.repetition_penalty));
  KILN_RETURN_IF_ERROR(read_integer(config, "max_new_tokens", p.max_tokens));
  KILN_RETURN_IF_ERROR(read_token_ids(config, "eos_token_id", defaults.eos_token_ids));

  auto do_sample = config.find("do_sample");
  if (do_sample != config.end() && !do_sample->is_null()) {
    if (!do_sample->is_boolean()) {
      return invalid_argument("generation_config.json: \"do_sample\" must be true or false; got " +
                              do_sample->dump());
    }
    if (!do_sample->get<bool>()) p.temperature = 0.0f;
  }
  return defaults;
}

}  // namespace kiln::llm
