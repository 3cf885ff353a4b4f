// DynamicBatcher: the scheduler of one served general model. Requests wait in one bounded FIFO
// queue; each model instance is a worker thread with a run function of its own (its own
// TensorGraphRunner), taking one batch at a time. With dynamic batching on, a worker holds the
// oldest request up to `max_queue_delay` for others to join it: it runs at once when the queued
// requests that can share its batch (the same shapes apart from the batch dimension) fill
// max_batch_size or a preferred batch size, else when the delay ends. A batch's inputs are
// concatenated along the batch dimension, run once, and each request gets its own rows of every
// output. Without dynamic batching every request runs alone, in arrival order.
//
// Threads: submit() and stop() from any thread. One worker at a time forms a batch (it owns the
// head of the queue while it waits); the others wait for the next. A ticket is completed, and its
// notifier called, on the worker thread that ran it. The batcher must outlive its tickets' runs
// (stop() joins the workers); tickets themselves are shared with the jobs waiting on them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"
#include "server/repository/infer_protocol.h"

namespace kiln::server {

// One request's place in the batcher: completed once (status, outputs, timings), then notified.
class InferTicket {
 public:
  // Calls `notify` when the ticket completes, or at once when it has.
  void set_notifier(std::function<void()> notify);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool done() const;

  // Valid once done() (read on the waiting side after the notifier has run).
  Status status;
  TensorList outputs;
  double queue_seconds = 0, compute_seconds = 0;
  int64_t batch_rows = 0;  // rows of the batch it ran in

  // The batcher's side: fills the results first, then completes.
  void complete();

 private:
  mutable std::mutex mu_;
  bool done_ = false;
  std::function<void()> notify_;
  std::atomic<bool> cancelled_{false};
};

class DynamicBatcher {
 public:
  using RunFn = std::function<Expected<TensorList>(const std::map<std::string, ir::Tensor>& inputs)>;
  struct Options {
    std::string model;                  // for messages
    bool dynamic_batching = false;
    int64_t max_batch_size = 0;         // 0: the inputs have no batch dimension
    std::vector<int64_t> preferred_batch_sizes;  // ascending
    std::chrono::microseconds max_queue_delay{0};
    size_t max_queue = 256;             // waiting requests at most; more are refused
    std::function<void()> on_worker_start;  // runs first on each worker thread
    // After each batch: its requests, its rows and its run time in seconds.
    std::function<void(int64_t requests, int64_t rows, double seconds)> on_batch;
  };

  // One worker per run function (the model's instances).
  DynamicBatcher(Options options, std::vector<RunFn> instances);
  ~DynamicBatcher();  // stop()

  // `batch`: the requests' batch-dimension size (1 without one). Refused with kResourceExhausted
  // when the queue is full, and with kNotFound once stop() has begun.
  Expected<std::shared_ptr<InferTicket>> submit(std::map<std::string, ir::Tensor> inputs, int64_t batch);

  // Refuses new requests, runs the queued ones, joins the workers. Idempotent.
  void stop();

 private:
  struct Pending {
    std::map<std::string, ir::Tensor> inputs;
    int64_t batch = 1;
    std::shared_ptr<InferTicket> ticket;
    std::chrono::steady_clock::time_point enqueued;
  };
  void work(size_t instance);
  int64_t rows_joining_head() const;                 // mu_ held
  std::vector<Pending> take_batch(int64_t max_rows);  // mu_ held
  void run_batch(size_t instance, std::vector<Pending>& batch);

  Options options_;
  std::vector<RunFn> instances_;
  std::vector<std::thread> workers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool forming_ = false;   // a worker owns the head of the queue while it waits for a batch
  bool stopping_ = false;
};

}  // namespace kiln::server
