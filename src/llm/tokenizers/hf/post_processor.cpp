#include "llm/tokenizers/hf/post_processor.h"

#include <sstream>
#include <utility>

#include "llm/tokenizers/hf/hf_tokenizer_json.h"

namespace kiln::llm {
namespace {

// before + ids + after; TemplateProcessing, Bert/RobertaProcessing and plain BOS/EOS wrapping
// all reduce to this for a single sequence.
class WrapProcessor final : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }
  void special_ids(std::vector<int32_t>& before, std::vector<int32_t>& after) const override {
    before.insert(before.end(), before_.begin(), before_.end());
    after.insert(after.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& part : parts_) part->process(ids);
  }
  void special_ids(std::vector<int32_t>& before, std::vector<int32_t>& after) const override {
    for (const auto& part : parts_) part->special_ids(before, after);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// ByteLevel only trims offsets, which Kiln does not report: nothing to do on ids.
class NoopProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  void special_ids(std::vector<int32_t>&, std::vector<int32_t>&) const override {}
};

// The single-sequence template: "SpecialToken" items before and after the one "Sequence" item.
Expected<std::unique_ptr<PostProcessor>> template_from_json(const nlohmann::json& json, const std::string& where) {
  auto single = json.find("single");
  if (single == json.end()) return invalid_argument(where + ".single is missing");
  // Items as (is_sequence, special token name).
  std::vector<std::pair<bool, std::string>> items;
  if (single->is_string()) {
    // The compact form "<s> $A </s>" (a trailing ":1" sets a type id, irrelevant here).
    std::istringstream words(single->get<std::string>());
    std::string word;
    while (words >> word) {
      const std::string name = word.substr(0, word.rfind(':') == std::string::npos || word[0] == '$' ? word.size()
                                                                                                     : word.rfind(':'));
      if (word[0] == '$') {
        items.emplace_back(true, "");
      } else {
        items.emplace_back(false, name);
      }
    }
  } else if (single->is_array()) {
    for (size_t i = 0; i < single->size(); ++i) {
      const nlohmann::json& item = (*single)[i];
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        items.emplace_back(true, "");
      } else if (auto special = item.find("SpecialToken"); special != item.end()) {
        KILN_ASSIGN_OR_RETURN(std::string id, hf_json_string(*special, "id", at + ".SpecialToken"));
        items.emplace_back(false, std::move(id));
      } else {
        return invalid_argument(at + " must hold \"Sequence\" or \"SpecialToken\"");
      }
    }
  } else {
    return invalid_argument(where + ".single must be an array or a string");
  }
  const nlohmann::json empty = nlohmann::json::object();
  auto specials_it = json.find("special_tokens");
  const nlohmann::json& specials = specials_it == json.end() ? empty : *specials_it;
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const auto& [is_sequence, name] : items) {
    if (is_sequence) {
      seen_sequence = true;
      continue;
    }
    auto entry = specials.find(name);
    const std::string at = where + ".special_tokens[\"" + name + "\"]";
    if (entry == specials.end()) return invalid_argument(at + " is missing (the template uses it)");
    auto ids = entry->find("ids");
    if (ids == entry->end() || !ids->is_array()) return invalid_argument(at + ".ids must be an array");
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return invalid_argument(at + ".ids must hold non-negative integers");
      }
      (seen_sequence ? after : before).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_sequence) return invalid_argument(where + ".single has no $A sequence");
  return std::unique_ptr<PostProcessor>(new WrapProcessor(std::move(before), std::move(after)));
}

// Bert/Roberta: {"cls": [token, id], "sep": [token, id]} -> cls A sep.
Expected<int32_t> token_pair_id(const nlohmann::json& json, const char* key, const std::string& where) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer() ||
      (*it)[1].get<int64_t>() < 0) {
    return invalid_argument(where + "." + key + " must be [token, id]");
  }
  return static_cast<int32_t>((*it)[1].get<int64_t>());
}

}  // namespace

std::unique_ptr<PostProcessor> post_processor_wrap(std::vector<int32_t> before, std::vector<int32_t> after) {
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after));
}

Expected<std::unique_ptr<PostProcessor>> post_processor_from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return std::unique_ptr<PostProcessor>();
  KILN_ASSIGN_OR_RETURN(std::string type, hf_json_type(json, where));
  if (type == "TemplateProcessing") return template_from_json(json, where);
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new NoopProcessor());
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    KILN_ASSIGN_OR_RETURN(int32_t cls, token_pair_id(json, "cls", where));
    KILN_ASSIGN_OR_RETURN(int32_t sep, token_pair_id(json, "sep", where));
    return post_processor_wrap({cls}, {sep});
  }
  if (type == "Sequence") {
    auto it = json.find("processors");
    if (it == json.end() || !it->is_array()) return invalid_argument(where + ".processors must be an array");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> part,
                            post_processor_from_json((*it)[i], where + ".processors[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PostProcessor>(new SequenceProcessor(std::move(parts)));
  }
  return unimplemented(where + ".type '" + type +
                       "' is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, "
                       "ByteLevel, Sequence)");
}

}  // namespace kiln::llm
