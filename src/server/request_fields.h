// RequestFields: typed, range-checked reads of a JSON request body's fields, shared by the
// OpenAI and KServe parsers. The first problem is kept as an ApiError naming the field (400);
// later reads return nothing, so a parser reads every field and checks error() once. A null
// field counts as absent, as OpenAI's clients send null for "not set". Every field a parser asks
// for is noted, so that reject_unread() can refuse the fields no parser reads: a field the server
// does not support is a 400 that names it, never silently ignored. Reads the body it is given by
// reference; the body must outlive it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llm/generation/sampling_params.h"
#include "server/api_error.h"

namespace kiln::server {

class RequestFields {
 public:
  // `prefix` names the object in messages ("parameters." for KServe's parameters object).
  explicit RequestFields(const nlohmann::json& object, std::string prefix = "")
      : obj_(object), prefix_(std::move(prefix)) {}

  const nlohmann::json* get(const char* key) const;  // present and not null; noted as read
  std::optional<double> number(const char* key, double lo, double hi, bool lo_open = false);
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi);
  std::optional<bool> boolean(const char* key);
  std::optional<std::string> string(const char* key);
  // A string or a list of non-empty strings (stop).
  std::optional<std::vector<std::string>> string_list(const char* key, size_t max_items);
  std::optional<std::vector<int32_t>> token_ids(const char* key, int64_t vocab_size, size_t max_items);

  void fail(ApiError e) {
    if (!error_) error_ = std::move(e);
  }
  void fail_field(const char* key, std::string message) { fail(ApiError::bad_field(prefix_ + key, std::move(message))); }
  const std::optional<ApiError>& error() const { return error_; }
  std::string name(const char* key) const { return prefix_ + key; }

  // Fails with a 400 naming the first field (not null) that no read asked for. `hint`, when it
  // knows the field, says what to use instead or why it is not supported.
  void reject_unread(std::string (*hint)(std::string_view field) = nullptr);

 private:
  const nlohmann::json& obj_;
  std::string prefix_;
  std::optional<ApiError> error_;
  mutable std::vector<std::string> read_;
};

// Reads the sampling fields common to every generation endpoint into `params`:
// temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty,
// logit_bias, seed, stop, stop_token_ids, ignore_eos, min_tokens. Fields the request leaves out keep the
// values already in `params` (the model's defaults).
void read_sampling_fields(RequestFields& f, int64_t vocab_size, llm::SamplingParams& params);

// How deep a request body may nest arrays and objects (a JSON Schema, tools, chat messages and
// tensor data nest far less): the code that reads a body may recurse through it.
inline constexpr int kMaxJsonNesting = 128;

// Parses a request body that must be a JSON object: 400 for invalid JSON (including invalid
// UTF-8), nesting deeper than kMaxJsonNesting, or another JSON type.
ApiResult<nlohmann::json> parse_json_object(const std::string& body);

// A JSON text for a response: invalid UTF-8 (a token cut in the middle of a character) is
// replaced with U+FFFD rather than failing.
std::string dump_json(const nlohmann::json& j);

}  // namespace kiln::server
