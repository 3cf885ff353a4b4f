// EventRelay: hands work from the serving loop's thread to one network thread's event loop with
// one wake-up per batch. The engine tells up to max-num-seqs sessions a step that tokens are
// waiting, one after another; posting each to the event loop would wake the network thread (a
// futex or an eventfd write, and the scheduler's work) for every one of them. The relay queues
// the sessions and posts a single flush while one is pending; the flush, on the loop's own thread,
// calls each one in the order they came. Queuing allocates nothing once the relay's two lists have
// grown to a step's size. It only carries the wake-ups (a ResponseStream's notifier posts through
// it); the events themselves are handed over in llm/serving/request_queue.h, as every hand-off
// between the engine and its front ends is.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::server {

class EventRelay {
 public:
  // What the relay wakes: called on the event loop's thread.
  class Target {
   public:
    virtual ~Target() = default;
    virtual void on_relayed() = 0;
  };

  explicit EventRelay(boost::asio::io_context& ioc) : ioc_(ioc) {}

  // Any thread: `target` is called on the event loop's thread after the next flush; the relay
  // keeps it alive until then.
  void post(std::shared_ptr<Target> target);

 private:
  void flush();

  boost::asio::io_context& ioc_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Target>> pending_;
  std::vector<std::shared_ptr<Target>> running_;  // the loop's thread only: the batch being flushed
  bool scheduled_ = false;                        // a flush is posted and has not yet taken pending_
};

}  // namespace kiln::server
