#include "cli/bench_serve/bench_dataset.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {
namespace {

using nlohmann::json;

Expected<BenchPrompt> parse_line(const json& line, std::optional<int64_t> default_output_len) {
  if (!line.is_object()) return invalid_argument("expected a JSON object, got " + std::string(line.type_name()));
  BenchPrompt p;
  const auto prompt = line.find("prompt");
  if (prompt == line.end()) return invalid_argument("no \"prompt\" field");
  if (prompt->is_string()) {
    p.text = prompt->get<std::string>();
    if (p.text.empty()) return invalid_argument("\"prompt\" is empty");
  } else if (prompt->is_array()) {
    if (prompt->empty()) return invalid_argument("\"prompt\" is an empty list");
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& id = (*prompt)[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return invalid_argument("\"prompt\"[" + std::to_string(i) + "] is " + id.dump() +
                                ", not a token id (a non-negative integer)");
      }
      p.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    p.prompt_tokens = static_cast<int64_t>(p.ids.size());
  } else {
    return invalid_argument("\"prompt\" must be a string or a list of token ids, got " +
                            std::string(prompt->type_name()));
  }
  auto output = line.find("output_len");
  const char* output_name = "output_len";
  if (output == line.end()) {
    output = line.find("max_tokens");
    output_name = "max_tokens";
  }
  if (output == line.end()) {
    if (!default_output_len) return invalid_argument("no \"output_len\" field, and no --random-output-len to default to");
    p.output_len = *default_output_len;
  } else {
    if (!output->is_number_integer() || output->get<int64_t>() < 1) {
      return invalid_argument("\"" + std::string(output_name) + "\" must be an integer >= 1, got " + output->dump());
    }
    p.output_len = output->get<int64_t>();
  }
  return p;
}

}  // namespace

Expected<std::vector<BenchPrompt>> parse_jsonl_dataset(std::string_view content, const std::string& name,
                                                       std::optional<int64_t> default_output_len) {
  std::vector<BenchPrompt> prompts;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view text = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = name + ":" + std::to_string(line_no) + ": ";
    const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded()) return invalid_argument(where + "not valid JSON");
    auto prompt = parse_line(line, default_output_len);
    if (!prompt) return prompt.status().with_context(where.substr(0, where.size() - 2));
    prompts.push_back(std::move(*prompt));
  }
  if (prompts.empty()) return invalid_argument(name + ": no prompts (the file is empty)");
  return prompts;
}

Expected<std::vector<BenchPrompt>> load_jsonl_dataset(const std::string& path,
                                                      std::optional<int64_t> default_output_len) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open the dataset file");
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return io_error(path + ": read error");
  return parse_jsonl_dataset(content.str(), path, default_output_len);
}

}  // namespace kiln::cli::bench_serve
