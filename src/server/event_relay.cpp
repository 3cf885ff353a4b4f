#include "server/event_relay.h"

#include <boost/asio/post.hpp>
#include <utility>

namespace kiln::server {

void EventRelay::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    pending_.push_back(std::move(task));
    if (scheduled_) return;
    scheduled_ = true;
  }
  boost::asio::post(ioc_, [this] { flush(); });
}

void EventRelay::flush() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(pending_);
    scheduled_ = false;
  }
  for (auto& task : tasks) task();
}

}  // namespace kiln::server
