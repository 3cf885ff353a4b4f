#include "server/http/event_relay.h"

#include <boost/asio/post.hpp>
#include <utility>

namespace kiln::server {

void EventRelay::post(std::shared_ptr<Target> target) {
  {
    std::lock_guard lock(mu_);
    pending_.push_back(std::move(target));
    if (scheduled_) return;
    scheduled_ = true;
  }
  boost::asio::post(ioc_, [this] { flush(); });
}

void EventRelay::flush() {
  {
    std::lock_guard lock(mu_);
    running_.swap(pending_);  // both keep their capacity
    scheduled_ = false;
  }
  for (auto& target : running_) target->on_relayed();
  running_.clear();
}

}  // namespace kiln::server
