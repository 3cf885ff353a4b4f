// Helpers that read tokenizer.json fields, with errors that name the field ("model.merges[3]").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "llm/tokenizers/bpe/bpe_regex.h"

namespace kiln::llm {

// The string at json[key]; missing or not a string is an error naming where.key.
inline Expected<std::string> hf_json_string(const nlohmann::json& json, const char* key, const std::string& where) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_string()) {
    return invalid_argument(where + "." + key + " must be a string");
  }
  return it->get<std::string>();
}

// json[key] as bool; a missing or null field gives `fallback`, another type is an error.
inline Expected<bool> hf_json_bool(const nlohmann::json& json, const char* key, bool fallback, const std::string& where) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return invalid_argument(where + "." + key + " must be true or false");
  return it->get<bool>();
}

// json[key] as a non-negative integer; a missing or null field gives `fallback`.
inline Expected<int64_t> hf_json_uint(const nlohmann::json& json, const char* key, int64_t fallback, const std::string& where) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return invalid_argument(where + "." + key + " must be a non-negative integer");
  }
  return it->get<int64_t>();
}

// The "type" of a component object.
inline Expected<std::string> hf_json_type(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) return invalid_argument(where + " must be an object");
  return hf_json_string(json, "type", where);
}


// A {"String": "..."} or {"Regex": "..."} pattern as a Regex (a String matches literally).
inline Expected<Regex> hf_json_pattern(const nlohmann::json& json, const char* key, const std::string& where) {
  auto it = json.find(key);
  const std::string field = where + "." + key;
  if (it == json.end() || !it->is_object()) {
    return invalid_argument(field + " must be an object {\"String\": ...} or {\"Regex\": ...}");
  }
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    Expected<Regex> regex = Regex::literal(s->get<std::string>());
    if (!regex) return regex.status().with_context(field);
    return regex;
  }
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    Expected<Regex> regex = Regex::compile(r->get<std::string>());
    if (!regex) return regex.status().with_context(field);
    return regex;
  }
  return invalid_argument(field + " must be an object {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace kiln::llm
