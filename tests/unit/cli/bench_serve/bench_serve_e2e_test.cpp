// `kiln bench serve` driving the real `kiln serve` on loopback with the demo model: every request
// completes with exactly the tokens it asked for, and the JSON report counts them. Skipped while the
// binary has no `serve` command.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "cli/bench_serve/load_client.h"
#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {
namespace {

namespace fs = std::filesystem;

int run(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(KILN_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) {
    if (out) out->append(buf.data(), n);
  }
  const int raw = pclose(p);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The port in the server's "ready on http://127.0.0.1:PORT" line, or 0 before it is written.
int ready_port(const fs::path& server_log) {
  const std::string text = read_text(server_log);
  const std::string mark = "ready on http://127.0.0.1:";
  const size_t at = text.find(mark);
  if (at == std::string::npos) return 0;
  return std::atoi(text.c_str() + at + mark.size());
}

class BenchServeE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_bench_serve_e2e_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string engine = (dir_ / "demo.kiln").string();
    std::string log;
    // Untimed kernels: the build takes a second instead of most of a minute under the sanitizers.
    ASSERT_EQ(run("build " + std::string(KILN_SOURCE_DIR) + "/models/demo -o " + engine + " --dtype bf16 --no-autotune",
                  &log),
              0)
        << log;
    // The server picks its own port (--port 0) and prints it when ready: a port chosen here and
    // passed on could be taken by another test's server in between, and the probe below would
    // then reach that server.
    const fs::path server_log = dir_ / "server.log";
    server_ = fork();
    ASSERT_GE(server_, 0);
    if (server_ == 0) {
      if (std::freopen(server_log.c_str(), "w", stdout) == nullptr) _exit(127);
      dup2(fileno(stdout), STDERR_FILENO);
      execl(KILN_BINARY, KILN_BINARY, "serve", engine.c_str(), "--host", "127.0.0.1", "--port", "0", "--threads", "1",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      port_ = ready_port(server_log);
      int status = 0;
      ASSERT_EQ(waitpid(server_, &status, WNOHANG), 0) << "kiln serve exited early";
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(port_, 0) << "kiln serve did not print its address within a minute";
    LoadConfig probe;
    probe.url = *parse_server_url(url());
    probe.io_timeout_s = 5;
    ASSERT_TRUE(first_served_model(probe)) << "kiln serve printed its address but does not answer GET /v1/models";
  }
  void TearDown() override {
    if (server_ > 0) {
      kill(server_, SIGTERM);
      int status = 0;
      waitpid(server_, &status, 0);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        ADD_FAILURE() << "kiln serve did not exit 0 on SIGTERM (status " << status << "); its log:\n"
                      << read_text(dir_ / "server.log");
      }
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  nlohmann::json bench(const std::string& args) {
    const std::string json = (dir_ / "report.json").string();
    std::string out;
    EXPECT_EQ(run("bench serve --url " + url() + " --tokenizer " + std::string(KILN_SOURCE_DIR) + "/models/demo " +
                      args + " --json " + json,
                  &out),
              0)
        << out;
    std::ifstream in(json);
    return nlohmann::json::parse(in, nullptr, false);
  }

  fs::path dir_;
  int port_ = 0;
  pid_t server_ = -1;
};

TEST_F(BenchServeE2e, CompletionsCountEveryToken) {
  const nlohmann::json r =
      bench("--num-prompts 6 --max-concurrency 3 --random-input-len 16 --random-output-len 8 --seed 1");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["num_prompts"], 6);
  EXPECT_EQ(r["completed"], 6);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["output_len_mismatch"], 0);
  EXPECT_EQ(r["total_output_tokens"], 48);
  EXPECT_GE(r["total_input_tokens"].get<int64_t>(), 6 * 16);  // 16 ids each, plus any BOS the server adds
  EXPECT_EQ(r["requests"].size(), 6u);
  // One gap between successive text chunks; a server may hold back a token that ends inside a UTF-8
  // sequence and send it with the next, so there are at most 7 gaps a request.
  EXPECT_GT(r["itl_ms"]["count"].get<int64_t>(), 0);
  EXPECT_LE(r["itl_ms"]["count"].get<int64_t>(), 6 * 7);
}

TEST_F(BenchServeE2e, ChatCompletionsAtAPoissonRate) {
  const nlohmann::json r = bench(
      "--endpoint /v1/chat/completions --num-prompts 4 --request-rate 20 --random-input-len 12 "
      "--random-output-len 5 --seed 2 --goodput e2el:600000");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["total_output_tokens"], 20);
  EXPECT_EQ(r["goodput"]["good_requests"], 4);
}

}  // namespace
}  // namespace kiln::cli::bench_serve
