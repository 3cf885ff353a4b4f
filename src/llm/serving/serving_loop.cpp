#include "llm/serving/serving_loop.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "base/thread_name.h"
#include "llm/generation/sampling_params.h"
#include "llm/scheduling/kv_block_manager.h"
#include "llm/scheduling/scheduler.h"
#include "llm/serving/token_emitter.h"

namespace kiln::llm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

constexpr uint64_t kDefaultKvCap = uint64_t{1} << 30;

struct RequestState;

// One choice of one request: the scheduler's view (SequenceState) plus its sampling state.
struct ChoiceState final : SequenceState {
  RequestState* request = nullptr;
  int32_t index = 0;
  std::optional<TokenEmitter> emitter;
  bool done = false;
};

struct RequestState {
  std::shared_ptr<ResponseStream> stream;
  std::vector<std::unique_ptr<ChoiceState>> choices;
  int32_t choices_added = 0;   // handed to the scheduler
  int32_t choices_done = 0;
  bool started = false;        // some chunk of it was scheduled: it left the wait queue
  bool ended = false;          // its kFinished or kError was pushed
  bool first_token_seen = false;
  Clock::time_point first_scheduled, first_token;
  std::vector<TokenInfo> prompt_logprobs;  // collected so far, when asked
};

}  // namespace

struct ServingLoop::Impl {
  Impl(runtime::Executor& executor_in, const Tokenizer& tokenizer_in, std::vector<int32_t> eos_in,
       const ServingOptions& options_in, int64_t vocab_in, std::unique_ptr<runtime::KvCache> cache_in)
      : executor(executor_in),
        tokenizer(tokenizer_in),
        eos_ids(std::move(eos_in)),
        options(options_in),
        vocab(vocab_in),
        max_seq_len(executor_in.max_seq_len()),
        cache(std::move(cache_in)),
        blocks(cache->spec().num_blocks, options_in.block_size, options_in.prefix_caching),
        scheduler(blocks, SchedulerConfig{options_in.max_num_seqs, options_in.max_batch_tokens, max_seq_len}),
        queue(options_in.max_queue + static_cast<size_t>(options_in.max_num_seqs)) {}

  Status probe();
  void run();
  void intake(const std::shared_ptr<ResponseStream>& stream);
  void sweep();
  bool run_step(Clock::time_point iteration_start);
  void sample_all(std::span<const float> logits);
  void take_chosen(const runtime::SampledStep& chosen);
  void process(size_t index, std::span<const float> rows);
  void add_further_choices(RequestState& r);
  void finish_choice(ChoiceState& c);
  // Ends `r` with an error event; `cancelled` when its client cancelled it (counted apart).
  void end_with_error(RequestState& r, const std::string& message, bool cancelled = false);
  void mark_started(RequestState& r, Clock::time_point when);
  void publish_stats();

  runtime::Executor& executor;
  const Tokenizer& tokenizer;
  const std::vector<int32_t> eos_ids;
  const ServingOptions options;
  const int64_t vocab;
  const int64_t max_seq_len;
  std::unique_ptr<runtime::KvCache> cache;
  KvBlockManager blocks;
  Scheduler scheduler;
  RequestQueue queue;

  // Shared with other threads.
  std::atomic<int64_t> pending{0};   // submitted, not yet started or ended
  // Submitted and not yet ended: at most max_num_seqs + max_queue, so that max_queue requests
  // wait beyond the sequence slots however many of them are still on their way to a slot.
  std::atomic<int64_t> admitted{0};
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> deadline_ns{0};  // Clock ticks since its epoch, valid once stopping
  mutable std::mutex stats_mu;
  ServingStats published;
  std::mutex observer_mu;
  std::function<void(double, int64_t)> observer;
  std::mutex shutdown_mu;
  std::thread thread;

  // Loop thread only.
  ServingStats counters;  // the growing counters; published with the gauges after each step
  std::vector<std::unique_ptr<RequestState>> requests;
  std::vector<std::shared_ptr<ResponseStream>> incoming;
  std::vector<ScheduledChunk> chunks;
  std::vector<runtime::SequenceStep> steps;
  runtime::SamplingBatch sampling;  // the step's rows, when the backend samples on its device
  // The step's sampled rows, one entry a chunk (sample_all or take_chosen), applied in chunk
  // order by process().
  struct Sampled {
    std::optional<Expected<int32_t>> token;  // empty: the chunk samples nothing, or its request had ended
    RequestEvent event;
  };
  std::vector<Sampled> sampled;
  std::vector<size_t> first_rows;  // each chunk's first logits row
};

namespace {

// Logits rows the step returns for a chunk: one for each of its tokens when asked, else its last.
size_t logit_rows(const ScheduledChunk& chunk) { return chunk.all_logits ? static_cast<size_t>(chunk.count) : 1; }

// Below this many logits to sample from in a step (8 rows of a 32,000-token vocabulary), sample_all
// stays on the loop thread: waking the other threads would cost more than it saves.
constexpr int64_t kParallelSamplingLogits = 256 * 1024;

}  // namespace

ServingLoop::ServingLoop(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ServingLoop::~ServingLoop() {
  if (impl_) shutdown(0);
}

Status ServingLoop::Impl::probe() {
  // The block it writes is free and will be overwritten.
  const int32_t token = 0, block = 0;
  runtime::SequenceStep step;
  step.tokens = {&token, 1};
  step.block_table = {&block, 1};
  try {
    auto logits = executor.step({&step, 1}, *cache);
    return logits ? Status::ok() : logits.status();
  } catch (const std::exception& e) {  // on the loop thread, where nothing may escape
    return internal_error(e.what());
  }
}

Expected<std::unique_ptr<ServingLoop>> ServingLoop::create(runtime::Executor& executor, const Tokenizer& tokenizer,
                                                               std::vector<int32_t> eos_ids,
                                                               const ServingOptions& options) {
  ServingOptions o = options;
  if (o.max_num_seqs < 1) return invalid_argument("max_num_seqs must be at least 1");
  if (o.block_size < 1) return invalid_argument("block_size must be at least 1");
  if (o.max_queue < 1) return invalid_argument("max_queue must be at least 1");
  const int64_t limit = executor.max_tokens();
  if (o.max_batch_tokens == 0) o.max_batch_tokens = limit;
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > limit) {
    return invalid_argument("max_batch_tokens " + std::to_string(o.max_batch_tokens) + " is outside [1, " +
                            std::to_string(limit) +
                            "], the engine file's limit (rebuild with a larger --max-batch-tokens)");
  }
  o.max_num_seqs = std::min(o.max_num_seqs, o.max_batch_tokens);
  const uint64_t block_bytes = executor.kv_cache_spec(1, o.block_size, o.kv_cache_dtype).block_bytes();
  int64_t num_blocks;
  if (o.kv_cache_bytes == 0) {
    const int64_t per_seq = (executor.max_seq_len() + o.block_size - 1) / o.block_size;
    num_blocks = std::min(o.max_num_seqs * per_seq, static_cast<int64_t>(kDefaultKvCap / block_bytes));
    num_blocks = std::max<int64_t>(num_blocks, 1);
  } else {
    num_blocks = static_cast<int64_t>(o.kv_cache_bytes / block_bytes);
    if (num_blocks < 1) {
      return invalid_argument("kv_cache_bytes " + std::to_string(o.kv_cache_bytes) + " holds no KV block (one block of " +
                              std::to_string(o.block_size) + " positions takes " + std::to_string(block_bytes) +
                              " bytes)");
    }
  }
  o.kv_cache_bytes = static_cast<uint64_t>(num_blocks) * block_bytes;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::KvCache> cache, executor.create_kv_cache(num_blocks, o.block_size, o.kv_cache_dtype));

  const int64_t vocab = executor.vocab_size();
  auto impl = std::make_unique<Impl>(executor, tokenizer, std::move(eos_ids), o, vocab, std::move(cache));
  std::unique_ptr<ServingLoop> loop(new ServingLoop(std::move(impl)));
  Impl* m = loop->impl_.get();
  m->publish_stats();
  // One token through the model before serving: checks that the executor runs and warms the
  // backend up, so that the first request does not pay for it. It runs on the loop thread, as
  // every later step does: a CPU backend's OpenMP runtime keeps a pool of worker threads for
  // each thread that starts parallel work, and an idle second pool (the caller's) counts against
  // the cores, after which workers sleep at every barrier instead of spinning briefly.
  std::promise<Status> probed;
  std::future<Status> probe_status = probed.get_future();
  m->thread = std::thread([m, probed = std::move(probed)]() mutable {
    set_current_thread_name("kiln-engine");
    if (m->options.on_loop_thread_start) m->options.on_loop_thread_start();
    Status status = m->probe();
    const bool ok = status.is_ok();
    probed.set_value(std::move(status));
    if (ok) m->run();
  });
  if (Status status = probe_status.get(); !status.is_ok()) {
    m->thread.join();
    return status.with_context("a first step through the loop failed");
  }
  return loop;
}

Expected<std::shared_ptr<ResponseStream>> ServingLoop::submit(GenerationRequest request) {
  Impl& m = *impl_;
  if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (request.n < 1) return invalid_argument("n must be at least 1, not " + std::to_string(request.n));
  if (request.notify_every < 0) {
    return invalid_argument("notify_every must be >= 0, not " + std::to_string(request.notify_every));
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > kMaxLogprobs) {
    return invalid_argument("prompt_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], not " +
                            std::to_string(request.prompt_logprobs));
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t id = request.prompt[i];
    if (id < 0 || id >= m.vocab) {
      return invalid_argument("prompt token " + std::to_string(i) + " is " + std::to_string(id) +
                              ", outside the vocabulary [0, " + std::to_string(m.vocab) + ")");
    }
  }
  KILN_RETURN_IF_ERROR(validate(request.params, m.vocab));
  KILN_RETURN_IF_ERROR(
      m.scheduler.check_admissible(static_cast<int64_t>(request.prompt.size()), request.params.max_tokens));
  if (m.stopping.load()) return resource_exhausted("the server is shutting down");
  const auto limit = static_cast<int64_t>(m.options.max_queue);
  const auto busy = [&] {
    return resource_exhausted(std::to_string(m.options.max_num_seqs) + " sequences are running and " + std::to_string(limit) +
                              " requests are waiting already; try again later");
  };
  if (m.admitted.fetch_add(1) >= limit + m.options.max_num_seqs) {
    m.admitted.fetch_sub(1);
    return busy();
  }
  m.pending.fetch_add(1);
  auto stream = std::make_shared<ResponseStream>(std::move(request));
  if (!m.queue.try_push(stream)) {
    m.pending.fetch_sub(1);
    m.admitted.fetch_sub(1);
    if (m.queue.closed()) return resource_exhausted("the server is shutting down");
    return busy();
  }
  return stream;
}

ServingStats ServingLoop::stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->published;
}

void ServingLoop::set_step_observer(std::function<void(double seconds, int64_t tokens)> observer) {
  std::lock_guard lock(impl_->observer_mu);
  impl_->observer = std::move(observer);
}

void ServingLoop::shutdown(double grace_seconds) {
  Impl& m = *impl_;
  std::lock_guard lock(m.shutdown_mu);
  if (!m.thread.joinable()) return;
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(grace_seconds, 0.0)));
  m.deadline_ns.store((Clock::now() + grace).time_since_epoch().count());
  m.stopping.store(true);
  m.queue.close();  // refuses new requests and wakes the loop thread
  m.thread.join();
}

int64_t ServingLoop::max_seq_len() const { return impl_->max_seq_len; }
int64_t ServingLoop::vocab_size() const { return impl_->vocab; }
const ServingOptions& ServingLoop::options() const { return impl_->options; }

// ---- The loop thread ----

void ServingLoop::Impl::run() {
  bool wait = true;
  while (true) {
    incoming.clear();
    queue.drain(incoming, wait, wait && !requests.empty() ? std::chrono::milliseconds(1) : std::chrono::milliseconds(100));
    const auto iteration_start = Clock::now();
    for (auto& stream : incoming) {
      try {
        intake(stream);
      } catch (const std::exception& e) {
        pending.fetch_sub(1);
        admitted.fetch_sub(1);
        RequestEvent error;
        error.kind = RequestEvent::Kind::kError;
        error.error = std::string("internal error in the serving loop: ") + e.what();
        stream->push(std::move(error));
        ++counters.requests_failed;
      }
    }
    sweep();
    if (stopping.load()) {
      const bool past_deadline = Clock::now().time_since_epoch().count() >= deadline_ns.load();
      if (requests.empty() && queue.size() == 0) break;
      if (past_deadline) {
        for (auto& r : requests) {
          if (!r->ended) end_with_error(*r, "the server is shutting down");
        }
        incoming.clear();
        queue.drain(incoming, false);
        for (auto& stream : incoming) {
          pending.fetch_sub(1);
          admitted.fetch_sub(1);
          RequestEvent e;
          e.kind = RequestEvent::Kind::kError;
          e.error = "the server is shutting down";
          stream->push(std::move(e));
          ++counters.requests_failed;
        }
        sweep();
        break;
      }
    }
    bool ran = false;
    try {
      ran = run_step(iteration_start);
    } catch (const std::exception& e) {
      // Nothing a request carries should get here; if something does, the requests in flight
      // end with an error and the loop carries on.
      for (auto& r : requests) {
        if (!r->ended && r->started) end_with_error(*r, std::string("internal error in the serving loop: ") + e.what());
      }
      sweep();
    }
    // Sleep on the queue when there is nothing to run (briefly, if requests wait for blocks).
    wait = !ran;
    publish_stats();
  }
  publish_stats();
}

void ServingLoop::Impl::intake(const std::shared_ptr<ResponseStream>& stream) {
  const GenerationRequest& req = stream->request();
  auto r = std::make_unique<RequestState>();
  r->stream = stream;
  if (r->stream->cancelled()) {
    pending.fetch_sub(1);
    admitted.fetch_sub(1);
    RequestEvent e;
    e.kind = RequestEvent::Kind::kError;
    e.error = "the request was cancelled";
    r->stream->push(std::move(e));
    ++counters.requests_cancelled;
    return;
  }
  const auto prompt_len = static_cast<int64_t>(req.prompt.size());
  for (int32_t i = 0; i < req.n; ++i) {
    auto c = std::make_unique<ChoiceState>();
    c->request = r.get();
    c->index = i;
    c->tokens.reserve(static_cast<size_t>(prompt_len + req.params.max_tokens));
    c->tokens.assign(req.prompt.begin(), req.prompt.end());
    c->prompt_len = prompt_len;
    SamplingParams params = req.params;
    if (params.seed) params.seed = *params.seed + static_cast<uint64_t>(i);
    c->emitter.emplace(params, req.prompt, tokenizer, req.skip_special_tokens, eos_ids, max_seq_len, req.grammar);
    r->choices.push_back(std::move(c));
  }
  ChoiceState& first = *r->choices[0];
  if (req.prompt_logprobs >= 0) {
    first.prompt_logits = true;
    r->prompt_logprobs.reserve(static_cast<size_t>(prompt_len));
    r->prompt_logprobs.push_back(TokenInfo{req.prompt[0], std::nullopt, {}});  // the first token has none
  }
  r->choices_added = 1;
  requests.push_back(std::move(r));
  scheduler.add(&first);
}

void ServingLoop::Impl::sweep() {
  for (auto& r : requests) {
    if (!r->ended && r->stream->cancelled()) end_with_error(*r, "the request was cancelled", /*cancelled=*/true);
  }
  std::erase_if(requests, [](const std::unique_ptr<RequestState>& r) { return r->ended; });
}

void ServingLoop::Impl::mark_started(RequestState& r, Clock::time_point when) {
  if (r.started) return;
  r.started = true;
  r.first_scheduled = when;
  pending.fetch_sub(1);
}

void ServingLoop::Impl::end_with_error(RequestState& r, const std::string& message, bool cancelled) {
  for (auto& c : r.choices) {
    if (c->queue != SequenceState::Queue::kNone) scheduler.remove(c.get());
    c->done = true;
  }
  if (!r.started) {
    r.started = true;
    pending.fetch_sub(1);
  }
  RequestEvent e;
  e.kind = RequestEvent::Kind::kError;
  e.error = message;
  r.stream->push(std::move(e));
  r.ended = true;
  admitted.fetch_sub(1);
  ++(cancelled ? counters.requests_cancelled : counters.requests_failed);
}

bool ServingLoop::Impl::run_step(Clock::time_point iteration_start) {
  const std::span<const ScheduledChunk> plan = scheduler.schedule();
  if (plan.empty()) return false;
  // A copy: finishing a sequence removes it from the scheduler's plan.
  chunks.assign(plan.begin(), plan.end());
  steps.clear();
  int64_t num_tokens = 0, step_prompt_tokens = 0;
  for (const ScheduledChunk& chunk : chunks) {
    SequenceState& seq = *chunk.seq;
    runtime::SequenceStep step;
    step.tokens = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(chunk.begin),
                                                                static_cast<size_t>(chunk.count));
    step.context_len = chunk.begin;
    step.block_table = seq.blocks.blocks;
    step.all_logits = chunk.all_logits;
    steps.push_back(step);
    num_tokens += chunk.count;
    step_prompt_tokens += std::max<int64_t>(0, std::min(chunk.begin + chunk.count, seq.prompt_len) - chunk.begin);
    mark_started(*static_cast<ChoiceState&>(seq).request, iteration_start);
  }
  counters.prompt_tokens += step_prompt_tokens;

  // The backend chooses the tokens when it samples on its device and no chunk needs the logits of
  // every token (prompt logprobs). A choice that reports token logprobs has its row's logits
  // copied back and samples it here.
  const bool on_device = executor.samples_on_device() &&
                         std::none_of(chunks.begin(), chunks.end(), [](const auto& c) { return c.all_logits; });
  if (on_device) {
    sampling.clear();
    for (size_t i = 0; i < chunks.size(); ++i) {
      ChoiceState& c = static_cast<ChoiceState&>(*chunks[i].seq);
      if (chunks[i].samples && !c.request->ended && c.emitter->device_capable()) {
        c.emitter->add_device_row(sampling);
        continue;
      }
      sampling.add_row();  // a greedy row whose choice nobody reads
      if (chunks[i].samples && !c.request->ended) sampling.host_rows.push_back(static_cast<int32_t>(i));
    }
  }

  const auto step_start = Clock::now();
  Expected<std::span<const float>> logits = std::span<const float>();
  Expected<runtime::SampledStep> chosen = runtime::SampledStep{};
  if (on_device) {
    chosen = executor.step_sampled(steps, *cache, sampling);
  } else {
    logits = executor.step(steps, *cache);
  }
  const auto step_end = Clock::now();
  const double step_seconds = seconds_between(step_start, step_end);
  if (!logits || !chosen) {
    // The executor checks every step before it touches the cache; a refusal means one of these
    // requests carries something the model cannot run. They end; the others carry on.
    const std::string message = "the model step failed: " + (on_device ? chosen.status() : logits.status()).message();
    for (const ScheduledChunk& chunk : chunks) {
      RequestState& r = *static_cast<ChoiceState&>(*chunk.seq).request;
      if (!r.ended) end_with_error(r, message);
    }
    return true;
  }
  scheduler.complete_step();

  first_rows.clear();
  size_t row = 0;
  for (const ScheduledChunk& chunk : chunks) {
    first_rows.push_back(row);
    row += logit_rows(chunk);
  }
  if (on_device) {
    take_chosen(*chosen);
  } else {
    sample_all(*logits);
  }
  const auto v = static_cast<size_t>(vocab);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& chunk = chunks[i];
    RequestState& r = *static_cast<ChoiceState&>(*chunk.seq).request;
    if (!r.ended) {
      try {
        process(i, on_device ? std::span<const float>() : logits->subspan(first_rows[i] * v, logit_rows(chunk) * v));
      } catch (const std::exception& e) {
        if (!r.ended) end_with_error(r, std::string("internal error in the serving loop: ") + e.what());
      }
    }
  }
  const auto end = Clock::now();

  ++counters.steps;
  counters.step_seconds += step_seconds;
  if (step_prompt_tokens == 0) {
    ++counters.decode_steps;
    counters.decode_rows += num_tokens;
    counters.decode_step_seconds += step_seconds;
  }
  counters.loop_seconds += seconds_between(iteration_start, end) - step_seconds;
  {
    std::lock_guard lock(observer_mu);
    if (observer) observer(step_seconds, num_tokens);
  }
  return true;
}

void ServingLoop::Impl::sample_all(std::span<const float> logits) {
  // Each choice samples with its own emitter (sampler, stop matcher, stream decoder) from its own
  // logits row, and the tokenizer is safe to share: the rows of a batch are sampled in parallel.
  // Everything shared (counters, streams, the scheduler) is left to process(), in chunk order.
  sampled.resize(chunks.size());
  const auto v = static_cast<size_t>(vocab);
  int64_t choices = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    sampled[i].token.reset();
    if (chunks[i].samples) ++choices;
  }
  const auto n = static_cast<int64_t>(chunks.size());
  const auto sample = [&](int64_t i) {
    const ScheduledChunk& chunk = chunks[static_cast<size_t>(i)];
    ChoiceState& c = static_cast<ChoiceState&>(*chunk.seq);
    if (!chunk.samples || c.request->ended) return;
    Sampled& out = sampled[static_cast<size_t>(i)];
    const size_t last = first_rows[static_cast<size_t>(i)] + logit_rows(chunk) - 1;
    try {
      out.event = RequestEvent{};
      out.event.choice = c.index;
      out.token = c.emitter->step(logits.subspan(last * v, v), out.event);
    } catch (const std::exception& e) {
      out.token = Status(StatusCode::kInternal, std::string("internal error in the serving loop: ") + e.what());
    }
  };
  // A parallel region costs a system call even when an `if` clause keeps it to this thread, so
  // small steps do not enter one.
  if (choices * vocab >= kParallelSamplingLogits && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t i = 0; i < n; ++i) sample(i);
  } else {
    for (int64_t i = 0; i < n; ++i) sample(i);
  }
}

void ServingLoop::Impl::take_chosen(const runtime::SampledStep& chosen) {
  sampled.resize(chunks.size());
  const auto v = static_cast<size_t>(vocab);
  size_t host = 0;  // the next of sampling.host_rows
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& chunk = chunks[i];
    ChoiceState& c = static_cast<ChoiceState&>(*chunk.seq);
    Sampled& out = sampled[i];
    out.token.reset();
    if (!chunk.samples || c.request->ended) continue;
    const auto row = static_cast<int32_t>(first_rows[i]);
    const bool on_host = host < sampling.host_rows.size() && sampling.host_rows[host] == row;
    try {
      out.event = RequestEvent{};
      out.event.choice = c.index;
      out.token = on_host ? c.emitter->step(chosen.logits.subspan(host++ * v, v), out.event)
                          : c.emitter->step_chosen(chosen.ids[first_rows[i]], out.event);
    } catch (const std::exception& e) {
      out.token = Status(StatusCode::kInternal, std::string("internal error in the serving loop: ") + e.what());
    }
  }
}

void ServingLoop::Impl::process(size_t index, std::span<const float> rows) {
  const ScheduledChunk& chunk = chunks[index];
  ChoiceState& c = static_cast<ChoiceState&>(*chunk.seq);
  RequestState& r = *c.request;
  const GenerationRequest& req = r.stream->request();
  const auto v = static_cast<size_t>(vocab);

  if (chunk.all_logits && c.prompt_logits) {
    // Row j predicts the token at position begin + j + 1. Rows recomputed after a preemption
    // find their entries already there.
    for (int64_t j = 0; j < chunk.count; ++j) {
      const int64_t pos = chunk.begin + j + 1;
      if (pos >= c.prompt_len) break;
      if (pos != static_cast<int64_t>(r.prompt_logprobs.size())) continue;
      r.prompt_logprobs.push_back(prompt_token_info(rows.subspan(static_cast<size_t>(j) * v, v),
                                                    req.prompt[static_cast<size_t>(pos)], req.prompt_logprobs));
    }
    if (static_cast<int64_t>(r.prompt_logprobs.size()) == c.prompt_len) {
      c.prompt_logits = false;
      RequestEvent e;
      e.kind = RequestEvent::Kind::kPromptLogprobs;
      e.tokens = std::move(r.prompt_logprobs);
      r.stream->push(std::move(e));
    }
  }
  if (!chunk.samples) return;
  Sampled& s = sampled[index];
  // Sampled unless its request had ended before this step; one ended since (an earlier choice's
  // error) is skipped by the caller.
  if (!s.token) return;
  RequestEvent& event = s.event;
  Expected<int32_t>& token = *s.token;
  if (!token) {
    end_with_error(r, "choice " + std::to_string(c.index) + ": " + token.status().message());
    return;
  }
  ++counters.generated_tokens;
  if (!r.first_token_seen) {
    r.first_token_seen = true;
    r.first_token = Clock::now();
  }
  const bool finished = c.emitter->finished();
  if (!finished) c.tokens.push_back(*token);
  r.stream->push(std::move(event));
  if (c.index == 0 && r.choices_added < static_cast<int32_t>(r.choices.size())) add_further_choices(r);
  if (finished) finish_choice(c);
}

void ServingLoop::Impl::add_further_choices(RequestState& r) {
  // The first choice has computed the prompt (and committed its full blocks): the others join
  // ahead of newer requests, in choice order.
  for (size_t i = r.choices.size(); i-- > static_cast<size_t>(r.choices_added);) scheduler.add(r.choices[i].get(), true);
  r.choices_added = static_cast<int32_t>(r.choices.size());
}

void ServingLoop::Impl::finish_choice(ChoiceState& c) {
  scheduler.remove(&c);
  c.done = true;
  RequestState& r = *c.request;
  if (++r.choices_done < static_cast<int32_t>(r.choices.size())) return;
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinished;
  e.usage.prompt_tokens = r.choices[0]->prompt_len;
  for (const auto& choice : r.choices) e.usage.completion_tokens += choice->emitter->num_generated();
  e.usage.cached_prompt_tokens = r.choices[0]->cached_prompt_tokens;
  const auto submitted = r.stream->submitted();
  e.first_token_s = seconds_between(submitted, r.first_token);
  e.queue_s = seconds_between(submitted, r.first_scheduled);
  r.stream->push(std::move(e));
  r.ended = true;
  admitted.fetch_sub(1);
  ++counters.requests_finished;
}

void ServingLoop::Impl::publish_stats() {
  const KvBlockStats kv = blocks.stats();
  std::lock_guard lock(stats_mu);
  published = counters;
  published.running = scheduler.num_running();
  published.waiting = scheduler.num_waiting() + static_cast<int64_t>(queue.size());
  published.kv_blocks_total = kv.total;
  published.kv_blocks_used = kv.used;
  published.kv_blocks_cached = kv.cached;
  published.prefix_queries = kv.prefix_queries;
  published.prefix_hits = kv.prefix_hits;
  published.preemptions = scheduler.num_preemptions();
}

}  // namespace kiln::llm
