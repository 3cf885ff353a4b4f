// Every hand-off between the serving loop's thread and the threads of its front ends lives
// here, and nowhere else:
//   - RequestQueue: front ends push new requests (bounded: a full queue refuses at once, so the
//     server can answer 429); the loop thread drains it at the start of each step, or sleeps
//     on it while it has nothing to run.
//   - ResponseStream: one per request; the loop thread pushes events, one front-end thread
//     pops them. The consumer registers a notifier that is called (on the loop thread, so it
//     must only schedule work, e.g. post to an event loop) whenever events become available.
//     cancel() from any thread asks the loop to drop the request at its next step.
// Both are mutex-guarded; the loop never blocks on a consumer and a consumer never blocks on
// a model step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "llm/serving/request.h"

namespace kiln::llm {

class ResponseStream {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ResponseStream(GenerationRequest request) : request_(std::move(request)), submitted_(Clock::now()) {}

  // Consumer side. `notify` runs on the loop thread after events were pushed, as often as the
  // request's notify_every asks (and once at registration if some are already waiting); it must
  // not block.
  void set_notifier(std::function<void()> notify);
  // Moves every waiting event into `out` (appending); returns whether the stream is complete
  // (its kFinished or kError event has been popped, now or before).
  bool pop_all(std::vector<RequestEvent>& out);
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // Engine side.
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  void push(RequestEvent event);
  const GenerationRequest& request() const { return request_; }
  Clock::time_point submitted() const { return submitted_; }

 private:
  GenerationRequest request_;
  Clock::time_point submitted_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::deque<RequestEvent> events_;
  std::function<void()> notify_;
  bool ended_ = false;   // a kFinished or kError was pushed
  bool drained_ = false; // ... and popped
  bool delivered_first_token_ = false;
  int64_t tokens_unannounced_ = 0;  // tokens pushed since the notifier last ran
};

class RequestQueue {
 public:
  explicit RequestQueue(size_t capacity) : capacity_(capacity) {}

  // Front-end side: false when the queue holds `capacity` requests already or is closed.
  bool try_push(std::shared_ptr<ResponseStream> stream);
  // Refuses every later push; wakes the loop.
  void close();
  bool closed() const;
  size_t size() const;

  // Engine side: moves every queued request into `out`. With `wait`, sleeps until one arrives,
  // the queue closes, or `timeout` passes.
  void drain(std::vector<std::shared_ptr<ResponseStream>>& out, bool wait,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(100));
  // Wakes a drain() that waits, e.g. when a running request was cancelled.
  void wake();

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ResponseStream>> queue_;
  bool closed_ = false;
  bool woken_ = false;
};

}  // namespace kiln::llm
