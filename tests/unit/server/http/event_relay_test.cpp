#include "server/http/event_relay.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <thread>
#include <vector>

namespace kiln::server {
namespace {

struct Recorder : EventRelay::Target {
  Recorder(std::vector<int>& log, int id) : log_(log), id_(id) {}
  void on_relayed() override { log_.push_back(id_); }
  std::vector<int>& log_;
  int id_;
};

TEST(EventRelay, ABatchOfTargetsCostsTheEventLoopOneHandler) {
  boost::asio::io_context ioc;
  EventRelay relay(ioc);
  std::vector<int> ran;
  std::thread engine([&] {
    for (int i = 0; i < 64; ++i) relay.post(std::make_shared<Recorder>(ran, i));
  });
  engine.join();
  // One flush was posted for all 64; it calls them in the order they came.
  EXPECT_EQ(ioc.run(), 1u);
  ASSERT_EQ(ran.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)], i);
}

TEST(EventRelay, TargetsAfterAFlushGetANewOne) {
  boost::asio::io_context ioc;
  EventRelay relay(ioc);
  std::vector<int> ran;
  auto target = std::make_shared<Recorder>(ran, 7);
  relay.post(target);
  EXPECT_EQ(ioc.run(), 1u);
  ioc.restart();
  relay.post(target);
  relay.post(target);
  EXPECT_EQ(ioc.run(), 1u);
  EXPECT_EQ(ran, (std::vector<int>{7, 7, 7}));
}

TEST(EventRelay, KeepsATargetAliveUntilItIsCalled) {
  boost::asio::io_context ioc;
  EventRelay relay(ioc);
  std::vector<int> ran;
  auto target = std::make_shared<Recorder>(ran, 1);
  std::weak_ptr<Recorder> weak = target;
  relay.post(std::move(target));
  EXPECT_FALSE(weak.expired());
  ioc.run();
  EXPECT_EQ(ran, (std::vector<int>{1}));
  EXPECT_TRUE(weak.expired());  // released once called
}

}  // namespace
}  // namespace kiln::server
