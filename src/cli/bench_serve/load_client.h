// The HTTP side of `kiln bench serve`: sends each prompt as one streaming OpenAI request at its
// arrival offset, over as many keep-alive connections as requests in flight, all from one
// io_context on the calling thread (Boost.Beast/Asio), and records when each token arrived.
// With max_concurrency, a request that arrives while that many are in flight waits for one to
// finish (closed loop when every arrival is at zero). The returned records belong to the caller;
// nothing here computes statistics (see bench_report).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/bench_serve/bench_dataset.h"
#include "cli/bench_serve/openai_stream.h"
#include "cli/bench_serve/server_url.h"

namespace kiln::cli::bench_serve {

struct LoadConfig {
  ServerUrl url;
  std::string path;  // the endpoint, e.g. "/v1/completions"
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string api_key;                    // sent as "Authorization: Bearer KEY" when not empty
  std::optional<int64_t> max_concurrency; // requests in flight at most
  double io_timeout_s = 300;              // a connect, write or read that waits longer fails the request
};

// What happened to one request. Times are seconds; send_s from the start of the run, the rest from
// the moment the request was sent (connecting included).
struct RequestRecord {
  bool success = false;
  std::string error;                       // why it failed, when it did
  int64_t expected_output_tokens = 0;      // max_tokens asked for
  std::optional<int64_t> prompt_tokens;    // the server's usage, else what the dataset knew
  int64_t output_tokens = 0;               // the server's usage, else the number of text chunks
  int64_t text_chunks = 0;                 // events that carried text
  bool done_seen = false;                  // the stream ended with [DONE]
  double send_s = 0, ttft_s = 0, e2el_s = 0;
  std::vector<double> itl_s;               // gaps between successive text chunks
};

struct LoadResult {
  std::vector<RequestRecord> records;      // one per prompt, in prompt order
  double duration_s = 0;                   // start of the run to the last completion
  int64_t peak_in_flight = 0;
};

// Sends prompts[i] at arrivals[i] (seconds from the start; same length as prompts). Calls
// `progress(done, total)` on the calling thread after each request finishes.
Expected<LoadResult> run_load(const LoadConfig& config, const std::vector<BenchPrompt>& prompts,
                              const std::vector<double>& arrivals,
                              const std::function<void(int64_t, int64_t)>& progress);

// The id of the first model GET /v1/models lists, for when --model is not given.
Expected<std::string> first_served_model(const LoadConfig& config);

}  // namespace kiln::cli::bench_serve
