// tokenizer_from_files and tokenizer_files_in_dir (declared in tokenizer.h): which tokenizer
// format a model's files hold, and reading those files from a model directory.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "llm/tokenizers/tokenizer.h"
#include "llm/tokenizers/tokenizer_formats.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;

// Every file a tokenizer may need, in the order tokenizer_from_files considers them.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
    "merges.txt",     "special_tokens_map.json",
};

const std::string* find_file(const std::map<std::string, std::string>& files, const std::string& name) {
  auto it = files.find(name);
  return it == files.end() ? nullptr : &it->second;
}

std::string file_list(const std::map<std::string, std::string>& files) {
  if (files.empty()) return "none";
  std::string out;
  for (const auto& [name, contents] : files) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> tokenizer_from_files(const std::map<std::string, std::string>& files) {
  const std::string* config = find_file(files, "tokenizer_config.json");
  const std::string_view config_json = config ? std::string_view(*config) : std::string_view();
  if (const std::string* json = find_file(files, "tokenizer.json")) {
    auto t = hf_tokenizer_from_json(*json, config_json);
    if (!t) return t.status().with_context("tokenizer.json");
    return t;
  }
  if (const std::string* model = find_file(files, "tokenizer.model")) {
    return sentencepiece_tokenizer_from_model(*model, config_json);
  }
  const std::string* vocab = find_file(files, "vocab.json");
  const std::string* merges = find_file(files, "merges.txt");
  if (vocab && merges) {
    auto t = gpt2_tokenizer_from_vocab(*vocab, *merges);
    if (!t) return t.status().with_context("vocab.json + merges.txt");
    return t;
  }
  return not_found(
      "no tokenizer: looked for tokenizer.json, tokenizer.model, or vocab.json with merges.txt (found: " +
      file_list(files) + ")");
}

Expected<std::map<std::string, std::string>> tokenizer_files_in_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("'" + dir + "' is not a directory");
  std::map<std::string, std::string> files;
  for (const char* name : kTokenizerFiles) {
    const fs::path path = fs::path(dir) / name;
    if (!fs::is_regular_file(path, ec)) continue;
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) return io_error("cannot open " + path.string());
    std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return io_error("cannot read " + path.string());
    files.emplace(name, std::move(contents));
  }
  return files;
}

}  // namespace kiln::llm
