// Structured outputs on Llama-3's 128k vocabulary ($KILN_PARITY_DIR/files/llama3, written by
// tests/parity/setup.sh OUT_DIR): the token mask per decoding step over a realistic token
// sequence (a JSON document valid for a typical schema, tokenised by Llama-3's tokenizer), as
// median and p99 per token, in three states of the caches:
//   cold        a freshly compiled grammar: every context mask is computed on first use
//   warm_other  the grammar after one document, a different document (a repeated schema)
//   warm_same   the same document again (every state mask cached)
// plus compiling the schema (text -> grammar -> compiled grammar, no masks) and a cache hit.
// The mask time includes the per-state cache lookup and copying the 16 KiB mask out.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "llm/structured/compiled_grammar.h"
#include "llm/structured/grammar_cache.h"
#include "llm/structured/grammar_matcher.h"
#include "llm/structured/json_schema.h"
#include "llm/tokenizers/tokenizer.h"

namespace {

using namespace kiln::llm;
using namespace kiln::llm::structured;
using Clock = std::chrono::steady_clock;

const char* const kSchema = R"({"type":"object","properties":{
  "id":{"type":"string","format":"uuid"},
  "name":{"type":"string","maxLength":64},
  "email":{"type":"string","format":"email"},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "created":{"type":"string","format":"date-time"},
  "status":{"enum":["active","suspended","deleted"]},
  "score":{"type":"number","minimum":0,"maximum":100},
  "tags":{"type":"array","items":{"type":"string","maxLength":24},"maxItems":8},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
    "zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["street","city","zip"],"additionalProperties":false},
  "orders":{"type":"array","items":{"$ref":"#/$defs/order"}},
  "note":{"anyOf":[{"type":"string"},{"type":"null"}]}},
 "required":["id","name","email","age","created","status","score","tags","address","orders","note"],
 "additionalProperties":false,
 "$defs":{"order":{"type":"object","properties":{"sku":{"type":"string"},"quantity":{"type":"integer","minimum":1},
   "price":{"type":"number","minimum":0}},"required":["sku","quantity","price"],"additionalProperties":false}}})";

const char* const kDocA = R"({"id": "3f2b8c9e-1d4a-4b6f-9e2c-7a1b5d3c8e0f", "name": "Margaret Dashwood", "email": "margaret.dashwood@norland.co.uk", "age": 42, "created": "2024-03-15T09:30:00Z", "status": "active", "score": 87.25, "tags": ["premium", "early-adopter", "newsletter"], "address": {"street": "12 Barton Cottage Lane", "city": "Devonshire", "zip": "10235"}, "orders": [{"sku": "BK-1811-SS", "quantity": 2, "price": 19.99}, {"sku": "TEA-EARL-GREY", "quantity": 10, "price": 4.5}], "note": "Prefers delivery before noon; call ahead if the gate is locked."})";
const char* const kDocB = "{\n  \"id\": \"a1b2c3d4-e5f6-4711-8899-aabbccddeeff\",\n  \"name\": \"Edward Ferrars\",\n  \"email\": \"e.ferrars@delaford.org\",\n  \"age\": 29,\n  \"created\": \"2023-11-02T17:05:42+01:00\",\n  \"status\": \"suspended\",\n  \"score\": 12,\n  \"tags\": [],\n  \"address\": {\n    \"street\": \"The Parsonage\",\n    \"city\": \"Delaford\",\n    \"zip\": \"99501\"\n  },\n  \"orders\": [\n    {\n      \"sku\": \"PEN-QUILL\",\n      \"quantity\": 1,\n      \"price\": 3.75\n    }\n  ],\n  \"note\": null\n}";

struct StructuredBench {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<GrammarCache> cache;
  std::vector<int32_t> doc_a, doc_b;
};

StructuredBench* structured_bench() {
  static StructuredBench* b = [] {
    auto* s = new StructuredBench;
    const char* dir = std::getenv("KILN_PARITY_DIR");
    if (!dir) return s;
    auto files = tokenizer_files_in_dir(std::string(dir) + "/files/llama3");
    if (!files) return s;
    auto t = tokenizer_from_files(*files);
    if (!t) return s;
    s->tokenizer = std::move(*t);
    s->cache = std::make_unique<GrammarCache>(*s->tokenizer);
    s->doc_a = *s->tokenizer->encode(kDocA, false);
    s->doc_b = *s->tokenizer->encode(kDocB, false);
    return s;
  }();
  return b;
}

std::shared_ptr<const CompiledGrammar> structured_compile(const StructuredBench& b) {
  auto g = json_schema_grammar(kSchema, "schema");
  return *CompiledGrammar::compile(*g, b.cache->vocabulary());
}

// Masks every step of `tokens` (then accepts the token), appending each step's time in us.
bool structured_run(const std::shared_ptr<const CompiledGrammar>& g, const std::vector<int32_t>& tokens,
                    std::vector<double>& times) {
  GrammarMatcher m(g);
  std::vector<uint64_t> mask(g->vocabulary().mask_words());
  for (int32_t t : tokens) {
    const auto start = Clock::now();
    m.fill_mask(mask);
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (!(mask[static_cast<size_t>(t) >> 6] >> (t & 63) & 1) || !m.accept_token(t)) return false;
  }
  return m.is_complete();
}

void structured_report(benchmark::State& state, std::vector<double> times) {
  std::sort(times.begin(), times.end());
  state.counters["median_us"] = times[times.size() / 2];
  state.counters["p99_us"] = times[std::min(times.size() - 1, times.size() * 99 / 100)];
  state.counters["max_us"] = times.back();
  state.counters["tokens"] = static_cast<double>(times.size());
}

bool structured_ready(benchmark::State& state) {
  if (structured_bench()->tokenizer) return true;
  state.SkipWithError("set KILN_PARITY_DIR to the output of tests/parity/setup.sh (Llama-3's tokenizer)");
  return false;
}

void BM_StructuredVocabulary(benchmark::State& state) {
  if (!structured_ready(state)) return;
  for (auto _ : state) benchmark::DoNotOptimize(TokenVocabulary::from_tokenizer(*structured_bench()->tokenizer));
}

void BM_StructuredCompile(benchmark::State& state) {
  if (!structured_ready(state)) return;
  const StructuredBench& b = *structured_bench();
  for (auto _ : state) benchmark::DoNotOptimize(structured_compile(b));
}

void BM_StructuredCacheHit(benchmark::State& state) {
  if (!structured_ready(state)) return;
  GrammarCache& cache = *structured_bench()->cache;
  (void)cache.get(ConstraintKind::kJsonSchema, kSchema, "schema");
  for (auto _ : state) benchmark::DoNotOptimize(cache.get(ConstraintKind::kJsonSchema, kSchema, "schema"));
}

void BM_StructuredMaskCold(benchmark::State& state) {
  if (!structured_ready(state)) return;
  const StructuredBench& b = *structured_bench();
  std::vector<double> times;
  for (auto _ : state) {
    state.PauseTiming();
    auto g = structured_compile(b);
    state.ResumeTiming();
    if (!structured_run(g, b.doc_a, times)) state.SkipWithError("the document does not follow the schema");
  }
  structured_report(state, times);
}

void BM_StructuredMaskWarmOther(benchmark::State& state) {
  if (!structured_ready(state)) return;
  const StructuredBench& b = *structured_bench();
  std::vector<double> times;
  for (auto _ : state) {
    state.PauseTiming();
    auto g = structured_compile(b);
    std::vector<double> ignored;
    (void)structured_run(g, b.doc_a, ignored);
    state.ResumeTiming();
    if (!structured_run(g, b.doc_b, times)) state.SkipWithError("the document does not follow the schema");
  }
  structured_report(state, times);
}

void BM_StructuredMaskWarmSame(benchmark::State& state) {
  if (!structured_ready(state)) return;
  const StructuredBench& b = *structured_bench();
  auto g = structured_compile(b);
  std::vector<double> times;
  (void)structured_run(g, b.doc_a, times);
  times.clear();
  for (auto _ : state) {
    if (!structured_run(g, b.doc_a, times)) state.SkipWithError("the document does not follow the schema");
  }
  structured_report(state, times);
}

BENCHMARK(BM_StructuredVocabulary)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_StructuredCompile)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StructuredCacheHit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StructuredMaskCold)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_StructuredMaskWarmOther)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_StructuredMaskWarmSame)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
