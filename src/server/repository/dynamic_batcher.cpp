#include "server/repository/dynamic_batcher.h"

#include <algorithm>
#include <cstring>
#include <exception>

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

// Two requests can share a batch when they send the same inputs with the same dtypes and the
// same shapes apart from the batch dimension.
bool can_share_batch(const std::map<std::string, ir::Tensor>& a, const std::map<std::string, ir::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.dtype() != ib->second.dtype()) return false;
    const auto& sa = ia->second.shape();
    const auto& sb = ib->second.shape();
    if (sa.size() != sb.size() || sa.empty() || !std::equal(sa.begin() + 1, sa.end(), sb.begin() + 1)) return false;
  }
  return true;
}

}  // namespace

void InferTicket::set_notifier(std::function<void()> notify) {
  std::unique_lock lock(mu_);
  if (done_) {
    lock.unlock();
    if (notify) notify();
    return;
  }
  notify_ = std::move(notify);
}

bool InferTicket::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void InferTicket::complete() {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    done_ = true;
    notify = std::move(notify_);
  }
  if (notify) notify();
}

DynamicBatcher::DynamicBatcher(Options options, std::vector<RunFn> instances)
    : options_(std::move(options)), instances_(std::move(instances)) {
  for (size_t i = 0; i < instances_.size(); ++i) workers_.emplace_back([this, i] { work(i); });
}

DynamicBatcher::~DynamicBatcher() { stop(); }

Expected<std::shared_ptr<InferTicket>> DynamicBatcher::submit(std::map<std::string, ir::Tensor> inputs, int64_t batch) {
  auto ticket = std::make_shared<InferTicket>();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return not_found("model '" + options_.model + "' is unloading");
    if (queue_.size() >= options_.max_queue) {
      return resource_exhausted("model '" + options_.model + "' has " + std::to_string(queue_.size()) + " requests waiting");
    }
    queue_.push_back(Pending{std::move(inputs), batch, ticket, Clock::now()});
  }
  cv_.notify_all();
  return ticket;
}

void DynamicBatcher::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

int64_t DynamicBatcher::rows_joining_head() const {
  const Pending& head = queue_.front();
  int64_t rows = 0;
  for (const Pending& p : queue_) {
    if (p.ticket->cancelled() || !can_share_batch(head.inputs, p.inputs)) continue;
    if (rows + p.batch > options_.max_batch_size) break;
    rows += p.batch;
  }
  return rows;
}

std::vector<DynamicBatcher::Pending> DynamicBatcher::take_batch(int64_t max_rows) {
  std::vector<Pending> batch;
  int64_t rows = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->ticket->cancelled()) {  // the client went away: drop it unanswered
      it = queue_.erase(it);
      continue;
    }
    if (!batch.empty() && (!can_share_batch(batch.front().inputs, it->inputs) || rows + it->batch > max_rows)) {
      if (rows + 1 > max_rows) break;
      ++it;
      continue;
    }
    rows += it->batch;
    batch.push_back(std::move(*it));
    it = queue_.erase(it);
    if (!options_.dynamic_batching || rows >= max_rows) break;
  }
  return batch;
}

void DynamicBatcher::work(size_t instance) {
  if (options_.on_worker_start) options_.on_worker_start();
  for (;;) {
    std::vector<Pending> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return (!queue_.empty() && !forming_) || (stopping_ && queue_.empty()); });
      if (queue_.empty()) return;
      int64_t max_rows = options_.max_batch_size;
      if (options_.dynamic_batching) {
        forming_ = true;
        const Clock::time_point deadline = queue_.front().enqueued + options_.max_queue_delay;
        for (;;) {
          while (!queue_.empty() && queue_.front().ticket->cancelled()) queue_.pop_front();
          if (queue_.empty()) break;
          const int64_t rows = rows_joining_head();
          if (rows >= options_.max_batch_size || stopping_ || Clock::now() >= deadline) break;
          // A preferred size that the queue can fill now runs now (the largest such).
          int64_t preferred = 0;
          for (int64_t p : options_.preferred_batch_sizes) {
            if (p <= rows) preferred = p;
          }
          if (preferred > 0) {
            max_rows = preferred;
            break;
          }
          cv_.wait_until(lock, deadline);
        }
        forming_ = false;
      }
      if (!queue_.empty()) batch = take_batch(std::max<int64_t>(max_rows, 1));
    }
    cv_.notify_all();
    if (!batch.empty()) run_batch(instance, batch);
  }
}

void DynamicBatcher::run_batch(size_t instance, std::vector<Pending>& batch) {
  const Clock::time_point start = Clock::now();
  int64_t rows = 0;
  for (const Pending& p : batch) rows += p.batch;
  Status status;
  TensorList outputs;
  try {
    Expected<TensorList> ran = internal_error("not run");
    if (batch.size() == 1) {
      ran = instances_[instance](batch.front().inputs);
    } else {
      // Each input of the batch: the requests' rows one after another, [rows, ...].
      std::map<std::string, ir::Tensor> joined;
      for (const auto& [name, first] : batch.front().inputs) {
        std::vector<int64_t> shape = first.shape();
        shape[0] = rows;
        ir::Tensor t(first.dtype(), shape);
        size_t offset = 0;
        for (const Pending& p : batch) {
          const ir::Tensor& part = p.inputs.at(name);
          if (part.byte_size() > 0) std::memcpy(t.mutable_bytes() + offset, part.bytes(), part.byte_size());
          offset += part.byte_size();
        }
        joined.emplace(name, std::move(t));
      }
      ran = instances_[instance](joined);
    }
    if (ran) {
      outputs = std::move(*ran);
    } else {
      status = ran.status();
    }
  } catch (const std::exception& e) {  // nothing may escape a worker
    status = internal_error(std::string("running model '") + options_.model + "': " + e.what());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options_.on_batch) options_.on_batch(static_cast<int64_t>(batch.size()), rows, seconds);
  if (status && batch.size() > 1) {
    for (const auto& [name, t] : outputs) {
      if (t.rank() == 0 || t.shape()[0] != rows) {
        status = invalid_argument("model '" + options_.model + "': output '" + name +
                                  "' does not keep the batch dimension, so requests cannot share a batch "
                                  "(remove dynamic_batching from config.pbtxt)");
        break;
      }
    }
  }
  int64_t row = 0;
  for (Pending& p : batch) {
    InferTicket& ticket = *p.ticket;
    ticket.status = status;
    ticket.queue_seconds = std::chrono::duration<double>(start - p.enqueued).count();
    ticket.compute_seconds = seconds;
    ticket.batch_rows = rows;
    if (status) {
      if (batch.size() == 1) {
        ticket.outputs = std::move(outputs);
      } else {
        for (const auto& [name, t] : outputs) {
          std::vector<int64_t> shape = t.shape();
          const size_t row_bytes = t.byte_size() / static_cast<size_t>(rows);
          shape[0] = p.batch;
          ir::Tensor mine(t.dtype(), shape);
          if (mine.byte_size() > 0) std::memcpy(mine.mutable_bytes(), t.bytes() + row * row_bytes, mine.byte_size());
          ticket.outputs.emplace_back(name, std::move(mine));
        }
      }
    }
    row += p.batch;
    ticket.complete();
  }
}

}  // namespace kiln::server
