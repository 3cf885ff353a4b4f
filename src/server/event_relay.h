// EventRelay: hands work from the serving engine's thread to the network threads with one
// wake-up per batch. The engine tells up to max-num-seqs sessions a step that tokens are waiting,
// one after another; posting each to the event loop would wake a network thread (a futex or an
// eventfd write, and the scheduler's work) for every one of them. The relay queues them and posts
// a single flush while one is pending; the flush then posts each task from inside the event
// loop, where asio queues it without waking anyone. It only carries the wake-ups (a
// ResponseStream's notifier posts through it); the events themselves are handed over in
// llm/serving/request_queue.h, as every hand-off between the engine and its front ends is.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <mutex>
#include <vector>

namespace kiln::server {

class EventRelay {
 public:
  explicit EventRelay(boost::asio::io_context& ioc) : ioc_(ioc) {}

  // Any thread: `task` runs on a network thread after the next flush.
  void post(std::function<void()> task);

 private:
  void flush();

  boost::asio::io_context& ioc_;
  std::mutex mu_;
  std::vector<std::function<void()>> pending_;
  bool scheduled_ = false;  // a flush is posted and has not yet taken pending_
};

}  // namespace kiln::server
