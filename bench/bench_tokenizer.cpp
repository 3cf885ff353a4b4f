// Tokenizer encode throughput on real vocabularies: the parity corpus (all scripts, code, emoji)
// repeated to about 4 MB, encoded string by string on one thread. Reads the files written by
// tests/parity/setup.sh OUT_DIR from $KILN_PARITY_DIR; tests/parity/bench_tokenizers.mjs
// measures the Hugging Face reference the same way.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/tokenizers/bpe/gpt2_vocab.h"
#include "llm/tokenizers/hf/hf_tokenizer.h"
#include "llm/tokenizers/bpe/tiktoken.h"

namespace {

using kiln::Expected;
using kiln::llm::Tokenizer;

constexpr size_t kTargetBytes = 4 << 20;

std::string parity_dir() {
  const char* dir = std::getenv("KILN_PARITY_DIR");
  return dir == nullptr ? std::string() : std::string(dir);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The corpus strings, repeated until they add up to kTargetBytes.
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> base, out;
    std::ifstream in(parity_dir() + "/llama3.expected.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) base.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
    }
    size_t bytes = 0;
    while (!base.empty() && bytes < kTargetBytes) {
      for (const std::string& s : base) {
        out.push_back(s);
        bytes += s.size();
      }
    }
    return out;
  }();
  return texts;
}

Expected<std::unique_ptr<Tokenizer>> load(const std::string& name) {
  const std::string dir = parity_dir() + "/files/" + name + "/";
  if (name == "gpt2") return kiln::llm::gpt2_tokenizer_from_vocab(read_file(dir + "vocab.json"), read_file(dir + "merges.txt"));
  if (name == "cl100k_base") {
    return kiln::llm::tiktoken_tokenizer(read_file(dir + name + ".tiktoken"), kiln::llm::kTiktokenCl100kPattern,
                                         kiln::llm::tiktoken_cl100k_special_tokens());
  }
  if (name == "o200k_base") {
    return kiln::llm::tiktoken_tokenizer(read_file(dir + name + ".tiktoken"), kiln::llm::kTiktokenO200kPattern,
                                         kiln::llm::tiktoken_o200k_special_tokens());
  }
  return kiln::llm::hf_tokenizer_from_json(read_file(dir + "tokenizer.json"), read_file(dir + "tokenizer_config.json"));
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  if (parity_dir().empty()) {
    state.SkipWithError("set KILN_PARITY_DIR (tests/parity/setup.sh OUT_DIR)");
    return;
  }
  Expected<std::unique_ptr<Tokenizer>> tokenizer = load(name);
  if (!tokenizer.has_value()) {
    state.SkipWithError(tokenizer.status().message().c_str());
    return;
  }
  const std::vector<std::string>& texts = corpus();
  size_t bytes = 0, tokens = 0;
  for (auto _ : state) {
    for (const std::string& s : texts) {
      Expected<std::vector<int32_t>> ids = (*tokenizer)->encode(s, false);
      tokens += ids->size();
      bytes += s.size();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Encode, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, mistral, std::string("mistral"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, cl100k_base, std::string("cl100k_base"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, o200k_base, std::string("o200k_base"))->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
