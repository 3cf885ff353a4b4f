#include "server/request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/json_scan.h"

namespace kiln::server {
namespace {

std::string range_text(double lo, double hi, bool lo_open) {
  auto fmt = [](double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
    std::string s = std::to_string(v);
    while (!s.empty() && s.back() == '0') s.pop_back();
    return s;
  };
  return std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]";
}

std::string shown(const nlohmann::json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  std::string s = dump_json(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

}  // namespace

const nlohmann::json* RequestFields::get(const char* key) const {
  if (std::find(read_.begin(), read_.end(), key) == read_.end()) read_.emplace_back(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

void RequestFields::reject_unread(std::string (*hint)(std::string_view field)) {
  if (error_ || !obj_.is_object()) return;
  for (const auto& [key, value] : obj_.items()) {
    if (value.is_null() || std::find(read_.begin(), read_.end(), key) != read_.end()) continue;
    std::string why = hint ? hint(key) : std::string();
    if (why.empty()) why = "remove it";
    fail_field(key.c_str(), "the field '" + prefix_ + key + "' is not supported by this server; " + why);
    return;
  }
}

std::optional<double> RequestFields::number(const char* key, double lo, double hi, bool lo_open) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  if (!v->is_number()) {
    fail_field(key, name(key) + " must be a number; got " + shown(*v));
    return std::nullopt;
  }
  const double d = v->get<double>();
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
    fail_field(key, name(key) + " must be in " + range_text(lo, hi, lo_open) + "; got " + shown(*v));
    return std::nullopt;
  }
  return d;
}

std::optional<int64_t> RequestFields::integer(const char* key, int64_t lo, int64_t hi) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  int64_t i = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      i = std::numeric_limits<int64_t>::max();
    } else {
      i = v->get<int64_t>();
    }
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e15) {
    i = static_cast<int64_t>(v->get<double>());
  } else {
    fail_field(key, name(key) + " must be an integer; got " + shown(*v));
    return std::nullopt;
  }
  if (i < lo || i > hi) {
    fail_field(key, name(key) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]; got " +
                        shown(*v));
    return std::nullopt;
  }
  return i;
}

std::optional<bool> RequestFields::boolean(const char* key) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  if (!v->is_boolean()) {
    fail_field(key, name(key) + " must be true or false; got " + shown(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> RequestFields::string(const char* key) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  if (!v->is_string()) {
    fail_field(key, name(key) + " must be a string; got " + shown(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> RequestFields::string_list(const char* key, size_t max_items) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& item : *v) {
      if (!item.is_string()) {
        fail_field(key, name(key) + " must be a string or a list of strings; got an item " + shown(item));
        return std::nullopt;
      }
      out.push_back(item.get<std::string>());
    }
  } else {
    fail_field(key, name(key) + " must be a string or a list of strings; got " + shown(*v));
    return std::nullopt;
  }
  if (out.size() > max_items) {
    fail_field(key, name(key) + " holds " + std::to_string(out.size()) + " items; at most " + std::to_string(max_items) +
                        " are allowed");
    return std::nullopt;
  }
  for (const auto& s : out) {
    if (s.empty()) {
      fail_field(key, name(key) + " must not contain empty strings");
      return std::nullopt;
    }
  }
  return out;
}

std::optional<std::vector<int32_t>> RequestFields::token_ids(const char* key, int64_t vocab_size, size_t max_items) {
  const nlohmann::json* v = get(key);
  if (!v || error_) return std::nullopt;
  if (!v->is_array()) {
    fail_field(key, name(key) + " must be a list of token ids; got " + shown(*v));
    return std::nullopt;
  }
  if (v->size() > max_items) {
    fail_field(key, name(key) + " holds " + std::to_string(v->size()) + " items; at most " + std::to_string(max_items) +
                        " are allowed");
    return std::nullopt;
  }
  std::vector<int32_t> out;
  for (const auto& item : *v) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= vocab_size) {
      fail_field(key, name(key) + " must hold token ids in [0, " + std::to_string(vocab_size) + "); got " + shown(item));
      return std::nullopt;
    }
    out.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return out;
}

void read_sampling_fields(RequestFields& f, int64_t vocab_size, llm::SamplingParams& p) {
  if (auto v = f.number("temperature", 0, 2)) p.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1, true)) p.top_p = static_cast<float>(*v);
  if (auto v = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) p.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = f.number("min_p", 0, 1)) p.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0, 100, true)) p.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    p.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = f.string_list("stop", 16)) p.stop = *v;
  if (auto v = f.token_ids("stop_token_ids", vocab_size, 64)) p.stop_token_ids = *v;
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.integer("min_tokens", 0, std::numeric_limits<int32_t>::max())) p.min_tokens = static_cast<int32_t>(*v);
  if (const nlohmann::json* bias = f.get("logit_bias"); bias && !f.error()) {
    if (!bias->is_object()) {
      f.fail_field("logit_bias", f.name("logit_bias") + " must be an object mapping token ids to numbers");
      return;
    }
    if (bias->size() > 1024) {
      f.fail_field("logit_bias", f.name("logit_bias") + " holds more than 1024 entries");
      return;
    }
    for (const auto& [key, value] : bias->items()) {
      int64_t id = -1;
      size_t used = 0;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size() || id < 0 || id >= vocab_size) {
        f.fail_field("logit_bias", f.name("logit_bias") + " keys must be token ids in [0, " + std::to_string(vocab_size) +
                                       "); got \"" + key + "\"");
        return;
      }
      if (!value.is_number() || !(value.get<double>() >= -llm::kMaxLogitBias && value.get<double>() <= llm::kMaxLogitBias)) {
        f.fail_field("logit_bias", f.name("logit_bias") + " values must be numbers in [-100, 100]; got " + shown(value) +
                                       " for token " + key);
        return;
      }
      p.logit_bias[static_cast<int32_t>(id)] = value.get<float>();
    }
  }
}

namespace {

// The deepest nesting of arrays and objects in a JSON text (strings skipped), found without
// recursion: what reads a body later (dumps, schema compilers, templates) may recurse.
int json_nesting(std::string_view text) {
  JsonDepth scan;
  int deepest = 0;
  for (char c : text) deepest = std::max(deepest, scan.step(c));
  return deepest;
}

}  // namespace

ApiResult<nlohmann::json> parse_json_object(const std::string& body) {
  if (const int depth = json_nesting(body); depth > kMaxJsonNesting) {
    return ApiError::bad_request("the request body nests arrays and objects " + std::to_string(depth) +
                                 " deep; at most " + std::to_string(kMaxJsonNesting) + " levels are allowed");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // The parser's message says where and why (ill-formed UTF-8, a number that overflows), after
    // an id of its own ("[json.exception.parse_error.101] ") that means nothing to a client.
    if (body.empty()) return ApiError::bad_request("the request body is empty; send a JSON object");
    std::string why = e.what();
    if (const size_t end = why.find("] "); why.starts_with("[json.exception.") && end != std::string::npos) {
      why.erase(0, end + 2);
    }
    return ApiError::bad_request("the request body is not valid JSON: " + why);
  }
  if (!j.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  return j;
}

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace kiln::server
