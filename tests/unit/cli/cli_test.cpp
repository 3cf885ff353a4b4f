// End-to-end tests of the `kiln` binary: what a user sees for good and bad inputs. Every bad
// input must give exit status 1 and one line on stderr that names the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "nlohmann/json.hpp"
#include "support/npy_reader.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(KILN_SOURCE_DIR) + "/tests/golden/data/";

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// `env`: assignments put before the command ("NAME=value ...").
Result kiln(const std::string& args, const std::string& env = "") {
  const std::string cmd = (env.empty() ? "" : env + " ") + std::string(KILN_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

void expect_user_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.rfind("kiln: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line expected: " << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.out;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A copy of a golden checkpoint with its config.json edited by `edit`.
  std::string edited_checkpoint(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path copy = dir_ / ("ckpt_" + name);
    fs::copy(kGolden + name, copy, fs::copy_options::recursive);
    std::ifstream in(copy / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    in.close();
    edit(config);
    std::ofstream(copy / "config.json") << config.dump(2);
    return copy.string();
  }

  std::string build_engine() {
    const std::string engine = path("model.kiln");
    Result r = kiln("build " + kGolden + "llama_gqa -o " + engine + " --no-autotune");
    EXPECT_EQ(r.status, 0) << r.out;
    return engine;
  }

  fs::path dir_;
};

TEST_F(CliTest, BuildInspectAndEvalWork) {
  const std::string engine = build_engine();
  Result inspect = kiln("inspect " + engine);
  ASSERT_EQ(inspect.status, 0) << inspect.out;
  for (const char* s : {"target        cpu-", "LlamaForCausalLM", "kernels", "silu_mul", "attention"}) {
    EXPECT_NE(inspect.out.find(s), std::string::npos) << s;
  }
  const std::string npy = path("logits.npy");
  Result eval = kiln("eval " + engine + " --ids 5,6,7,8 --logits-out " + npy + " --generate 3");
  ASSERT_EQ(eval.status, 0) << eval.out;
  EXPECT_NE(eval.out.find("greedy: "), std::string::npos);
  auto logits = testing::npy_read_f32(npy);
  EXPECT_EQ(logits.shape, (std::vector<int64_t>{4, 384}));
}

// --kv-cache-dtype auto (the default) follows the engine's precision: bf16 for a bf16 engine, fp32
// for an fp32 one; an explicit element overrides it.
TEST_F(CliTest, TheKvCacheFollowsTheEnginesPrecisionUnlessToldOtherwise) {
  const std::string f32 = build_engine();
  const std::string bf16 = path("bf16.kiln");
  Result built = kiln("build " + kGolden + "llama_gqa -o " + bf16 + " --dtype bf16 --no-autotune");
  ASSERT_EQ(built.status, 0) << built.out;
  auto kv_line = [](const Result& r) {
    const size_t at = r.out.find("kv cache ");
    return at == std::string::npos ? r.out : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string bench = " --prompt 4 --decode 2 --repeat 1 --threads 2";
  EXPECT_EQ(kv_line(kiln("bench " + f32 + bench)), "kv cache fp32");
  EXPECT_EQ(kv_line(kiln("bench " + bf16 + bench)), "kv cache bf16");
  EXPECT_EQ(kv_line(kiln("bench " + bf16 + bench + " --kv-cache-dtype fp32")), "kv cache fp32");
  EXPECT_EQ(kv_line(kiln("bench " + f32 + bench + " --kv-cache-dtype bf16")), "kv cache bf16");
  EXPECT_EQ(kv_line(kiln("bench " + f32 + bench + " --kv-cache-dtype fp8")), "kv cache fp8");
  const std::string f8 = path("f8kv.kiln");
  built = kiln("build " + kGolden + "llama_gqa -o " + f8 + " --dtype fp8 --no-autotune");
  ASSERT_EQ(built.status, 0) << built.out;
  EXPECT_EQ(kv_line(kiln("bench " + f8 + bench)), "kv cache bf16") << "fp8 weights round far more than a bf16 cache";
}

// KILN_CPU_PROFILE=1 makes the CPU backend print where its steps' time went when it ends.
TEST_F(CliTest, CpuProfilePrintsTheTimePerOpOfAnLlmEngine) {
  const std::string engine = build_engine();
  Result r = kiln("eval " + engine + " --ids 5,6,7 --generate 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("kiln cpu profile"), std::string::npos) << r.out;
  r = kiln("eval " + engine + " --ids 5,6,7 --generate 3", "KILN_CPU_PROFILE=1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("kiln cpu profile: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" steps, "), std::string::npos) << r.out;
  for (const char* kind : {"attention", "rope", "rms_norm", "matmul "}) {
    EXPECT_NE(r.out.find("\n  " + std::string(kind)), std::string::npos) << kind << " in: " << r.out;
  }
}

// fp8 weights are a GPU format, but an engine of them runs on the CPU too (widened to fp32).
TEST_F(CliTest, Fp8EnginesBuildInspectAndRunOnTheCpu) {
  const std::string f8 = path("f8.kiln");
  Result built = kiln("build " + kGolden + "llama_gqa -o " + f8 + " --dtype fp8 --no-autotune");
  ASSERT_EQ(built.status, 0) << built.out;
  EXPECT_NE(built.out.find(", f8) in "), std::string::npos) << built.out;
  Result inspect = kiln("inspect " + f8);
  ASSERT_EQ(inspect.status, 0) << inspect.out;
  EXPECT_NE(inspect.out.find("format=f8"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("f8."), std::string::npos) << "the matmul kernels read f8: " << inspect.out;
  Result run = kiln("eval " + f8 + " --ids 1,2,3 --generate 4");
  EXPECT_EQ(run.status, 0) << run.out;
}

TEST_F(CliTest, DumpAfterPrintsTheGraph) {
  Result r = kiln("build " + kGolden + "gpt2 -o " + path("g.kiln") + " --no-autotune --dump-after fold_constants");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("== after fold_constants =="), std::string::npos);
  EXPECT_EQ(r.out.find("transpose("), std::string::npos) << "transposes must be folded";
  EXPECT_NE(r.out.find("gelu_tanh("), std::string::npos);
}

TEST_F(CliTest, BuildErrorsNameTheProblem) {
  expect_user_error(kiln("build " + path("nowhere") + " -o " + path("x.kiln")), "nowhere is not a directory");
  expect_user_error(kiln("build " + kGolden + "llama_gqa -o " + path("x.kiln") + " --dtype int3"), "--dtype");
  expect_user_error(kiln("build " + kGolden + "llama_gqa -o " + path("x.kiln") + " --dtype int4 --group 64"), "--group");
  expect_user_error(kiln("build " + kGolden + "llama_gqa -o " + path("x.kiln") + " --dtype fp8 --group 32"), "--group");
  expect_user_error(kiln("build " + kGolden + "gpt2 -o " + path("x.kiln") + " --max-seq-len 100000"), "n_positions");

  auto more_layers = edited_checkpoint("llama_gqa", [](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
  expect_user_error(kiln("build " + more_layers + " -o " + path("x.kiln")), "model.layers.2.");
  auto wider = edited_checkpoint("qwen2_tied", [](nlohmann::json& c) { c["intermediate_size"] = 999; });
  expect_user_error(kiln("build " + wider + " -o " + path("x.kiln")), "has shape");
  auto unknown = edited_checkpoint("gpt2", [](nlohmann::json& c) { c["architectures"] = {"FalconForCausalLM"}; });
  expect_user_error(kiln("build " + unknown + " -o " + path("x.kiln")), "FalconForCausalLM");
  EXPECT_FALSE(fs::exists(path("x.kiln"))) << "a failed build must leave no engine behind";
}

TEST_F(CliTest, GpuMemoryFractionIsForCudaEnginesAlone) {
  const std::string engine = build_engine();
  expect_user_error(kiln("serve " + engine + " --port 0 --gpu-memory-fraction 0.9"), "--kv-cache-memory");
  expect_user_error(kiln("serve " + engine + " --port 0 --gpu-memory-fraction 0.9 --kv-cache-memory 1GiB"), "not both");
  expect_user_error(kiln("serve " + engine + " --port 0 --gpu-memory-fraction 1.5"), "(0, 1]");
  // kiln bench --offline sizes its pool the same way, with --kv-cache-gib as the manual flag.
  const std::string offline = "bench " + engine + " --offline --batch 2 --prompt 4 --decode 2";
  expect_user_error(kiln(offline + " --gpu-memory-fraction 0.9"), "--kv-cache-gib");
  expect_user_error(kiln(offline + " --gpu-memory-fraction 0.9 --kv-cache-gib 1"), "not both");
  expect_user_error(kiln(offline + " --gpu-memory-fraction 2"), "(0, 1]");
}

TEST_F(CliTest, DamagedEnginesAreRefusedWithAFix) {
  const std::string engine = build_engine();
  const auto size = fs::file_size(engine);
  {
    fs::copy_file(engine, path("short.kiln"));
    fs::resize_file(path("short.kiln"), size - 100);
    expect_user_error(kiln("inspect " + path("short.kiln")), "truncated");
  }
  {
    fs::copy_file(engine, path("flipped.kiln"));
    std::fstream f(path("flipped.kiln"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 10));
    f.put('\x5a');
    f.close();
    expect_user_error(kiln("eval " + path("flipped.kiln") + " --ids 1"), "corrupt");
  }
  {
    std::ofstream(path("text.kiln")) << "this is not an engine, just some text that is long enough";
    expect_user_error(kiln("inspect " + path("text.kiln")), "not a Kiln engine");
  }
  expect_user_error(kiln("bench " + path("missing.kiln")), "missing.kiln");
}

TEST_F(CliTest, BadTokenIdsAreUserErrors) {
  const std::string engine = build_engine();
  expect_user_error(kiln("eval " + engine + " --ids 1,99999"), "outside the vocabulary");
  expect_user_error(kiln("eval " + engine + " --ids 1,,2"), "empty item");
  expect_user_error(kiln("eval " + engine + " --ids 1,x"), "'x' is not a token id");
}

// The bundled demo model end to end: tokenizer, engine, greedy sampling and streaming
// detokenisation must reproduce the greedy text transformers generated for the same checkpoint
// (recorded in models/demo/training_log.json when it was trained).
TEST_F(CliTest, DemoModelReproducesTheReferenceGreedyText) {
  const std::string demo = std::string(KILN_SOURCE_DIR) + "/models/demo";
  const std::string engine = path("demo.kiln");
  Result build = kiln("build " + demo + " -o " + engine + " --dtype bf16 --no-autotune");
  ASSERT_EQ(build.status, 0) << build.out;
  std::ifstream in(demo + "/training_log.json");
  const auto log = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& sample : log.at("samples")) {
    const std::string prompt = sample.at("prompt").get<std::string>();
    const std::string reference = sample.at("greedy").get<std::string>();
    // The tokenizer gives the reference's prompt ids.
    std::string ids;
    for (const auto& id : sample.at("prompt_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
    Result tok = kiln("tokenize " + engine + " --text '" + prompt + "'");
    ASSERT_EQ(tok.status, 0) << tok.out;
    EXPECT_EQ(tok.out, ids + "\n");
    Result run = kiln("run " + engine + " -p '" + prompt + "' -n 24 --temperature 0 --no-stats --threads 2");
    ASSERT_EQ(run.status, 0) << run.out;
    ASSERT_EQ(run.out.rfind(prompt, 0), 0u) << run.out;
    std::string generated = run.out.substr(prompt.size());
    ASSERT_FALSE(generated.empty());
    if (generated.back() == '\n') generated.pop_back();  // kiln run ends the output with a newline
    ASSERT_GT(generated.size(), 40u) << run.out;
    EXPECT_EQ(reference.rfind(generated, 0), 0u) << "kiln: " << generated << "\nreference: " << reference;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(CliTest, SameSeedSameTextAndPerplexityOfHeldOutText) {
  const std::string demo = std::string(KILN_SOURCE_DIR) + "/models/demo";
  const std::string engine = path("demo.kiln");
  ASSERT_EQ(kiln("build " + demo + " -o " + engine + " --dtype bf16 --no-autotune").status, 0);
  const std::string args = "run " + engine + " -p 'The sea' -n 20 --temperature 0.9 --top-p 0.95 --no-stats --threads 2";
  Result a = kiln(args + " --seed 7"), b = kiln(args + " --seed 7"), c = kiln(args + " --seed 8");
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  // Perplexity of the first 6 KB of the held-out text: a finite number well below the
  // vocabulary size (a model that learned nothing scores about 8192).
  std::ifstream heldout(demo + "/heldout.txt");
  std::string text(6000, '\0');
  heldout.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(heldout.gcount()));
  std::ofstream(path("part.txt")) << text;
  Result ppl = kiln("eval " + engine + " --text " + path("part.txt") + " --threads 2");
  ASSERT_EQ(ppl.status, 0) << ppl.out;
  const double value = std::stod(ppl.out.substr(ppl.out.find("perplexity ") + 11));
  EXPECT_GT(value, 5.0);
  EXPECT_LT(value, 200.0);
  expect_user_error(kiln("eval " + engine + " --text " + path("missing.txt")), "missing.txt");
  expect_user_error(kiln("run " + engine + " -p hi --top-p 1.5"), "top_p");
  // An fp32 KV cache (a bf16 engine's default is bf16) runs the same command; an unknown element
  // type names the flag.
  Result fp32 = kiln("run " + engine + " -p 'The sea' -n 8 --temperature 0 --no-stats --threads 2 --kv-cache-dtype fp32");
  ASSERT_EQ(fp32.status, 0) << fp32.out;
  EXPECT_EQ(fp32.out.rfind("The sea", 0), 0u) << fp32.out;
  EXPECT_GT(fp32.out.size(), std::string("The sea").size() + 8) << fp32.out;
  Result fp8 = kiln("run " + engine + " -p 'The sea' -n 8 --temperature 0 --no-stats --threads 2 --kv-cache-dtype fp8");
  ASSERT_EQ(fp8.status, 0) << fp8.out;
  EXPECT_EQ(fp8.out.rfind("The sea", 0), 0u) << fp8.out;
  expect_user_error(kiln("run " + engine + " -p hi --kv-cache-dtype fp16"), "--kv-cache-dtype");
  // Perplexity with an fp8 cache: keys and values rounded to 4 significant bits move it a little.
  Result ppl8 = kiln("eval " + engine + " --text " + path("part.txt") + " --threads 2 --kv-cache-dtype fp8");
  ASSERT_EQ(ppl8.status, 0) << ppl8.out;
  const double value8 = std::stod(ppl8.out.substr(ppl8.out.find("perplexity ") + 11));
  EXPECT_NE(value8, value);
  EXPECT_NEAR(value8, value, 0.02 * value);
  expect_user_error(kiln("eval " + engine + " --text " + path("part.txt") + " --kv-cache-dtype int4"),
                    "--kv-cache-dtype");
}

// kiln run --chat: the conversation goes through the chat template and keeps its history, so
// each turn's prompt holds every earlier turn; end of input leaves cleanly.
TEST_F(CliTest, ChatKeepsHistoryThroughTheTemplate) {
  const std::string root = std::string(KILN_SOURCE_DIR);
  const fs::path model = dir_ / "demo_chat";
  fs::copy(root + "/models/demo", model, fs::copy_options::recursive);
  std::ifstream tin(root + "/tests/templates/templates/chatml.jinja");
  const std::string chatml((std::istreambuf_iterator<char>(tin)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(chatml.empty());
  std::ifstream cin(model / "tokenizer_config.json");
  auto config = nlohmann::json::parse(cin);
  cin.close();
  config["chat_template"] = chatml;
  std::ofstream(model / "tokenizer_config.json") << config.dump();
  const std::string engine = path("chat.kiln");
  ASSERT_EQ(kiln("build " + model.string() + " -o " + engine + " --no-autotune").status, 0);

  const std::string cmd = "printf 'Who are you?\\nWhere is the sea?\\n' | " + std::string(KILN_BINARY) + " run " +
                          engine + " --chat --system 'Answer briefly.' -n 12 --temperature 0 --threads 2 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int raw = pclose(p);
  ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << out;
  // One stats line per turn: "[P prompt tokens, G generated ...]".
  std::vector<std::pair<long, long>> turns;
  for (size_t at = out.find("prompt tokens"); at != std::string::npos; at = out.find("prompt tokens", at + 1)) {
    const size_t open = out.rfind('[', at);
    const long prompt = std::stol(out.substr(open + 1));
    const long generated = std::stol(out.substr(at + 15));
    turns.emplace_back(prompt, generated);
  }
  ASSERT_EQ(turns.size(), 2u) << out;
  // The second prompt holds the first prompt, the first answer and the new question.
  EXPECT_GT(turns[1].first, turns[0].first + turns[0].second) << out;
}

}  // namespace
}  // namespace kiln::cli
