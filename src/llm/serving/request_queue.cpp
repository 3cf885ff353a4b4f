#include "llm/serving/request_queue.h"

namespace kiln::llm {

void ResponseStream::set_notifier(std::function<void()> notify) {
  std::function<void()> now;
  {
    std::lock_guard lock(mu_);
    notify_ = std::move(notify);
    if (!events_.empty()) {
      now = notify_;
      tokens_unannounced_ = 0;
    }
  }
  if (now) now();
}

bool ResponseStream::pop_all(std::vector<RequestEvent>& out) {
  std::lock_guard lock(mu_);
  for (auto& e : events_) out.push_back(std::move(e));
  events_.clear();
  if (ended_) drained_ = true;
  return drained_;
}

void ResponseStream::push(RequestEvent event) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    if (ended_) return;  // nothing follows a request's last event
    ended_ = event.kind == RequestEvent::Kind::kFinished || event.kind == RequestEvent::Kind::kError;
    event.pushed = Clock::now();
    const int32_t every = request_.notify_every;
    bool due = ended_ || every == 1;
    if (!due && every > 1) {
      if (event.kind == RequestEvent::Kind::kDelta) {
        tokens_unannounced_ += static_cast<int64_t>(event.tokens.size());
        due = !delivered_first_token_ || tokens_unannounced_ >= every || event.finish != FinishReason::kNone;
        if (!event.tokens.empty()) delivered_first_token_ = true;
      } else {
        due = true;
      }
    }
    events_.push_back(std::move(event));
    if (!due) return;
    tokens_unannounced_ = 0;
    notify = notify_;
  }
  if (notify) notify();
}

bool RequestQueue::try_push(std::shared_ptr<ResponseStream> stream) {
  {
    std::lock_guard lock(mu_);
    if (closed_ || queue_.size() >= capacity_) return false;
    queue_.push_back(std::move(stream));
  }
  cv_.notify_one();
  return true;
}

void RequestQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool RequestQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

size_t RequestQueue::size() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void RequestQueue::drain(std::vector<std::shared_ptr<ResponseStream>>& out, bool wait,
                         std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (wait) cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_ || woken_; });
  woken_ = false;
  for (auto& s : queue_) out.push_back(std::move(s));
  queue_.clear();
}

void RequestQueue::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

}  // namespace kiln::llm
