#include "server/event_relay.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <thread>
#include <vector>

namespace kiln::server {
namespace {

TEST(EventRelay, ABatchOfTasksCostsTheEventLoopOneHandler) {
  boost::asio::io_context ioc;
  EventRelay relay(ioc);
  std::vector<int> ran;
  std::thread engine([&] {
    for (int i = 0; i < 64; ++i) relay.post([&ran, i] { ran.push_back(i); });
  });
  engine.join();
  // One flush was posted for all 64; it runs them in the order they came.
  EXPECT_EQ(ioc.run(), 1u);
  ASSERT_EQ(ran.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)], i);
}

TEST(EventRelay, TasksAfterAFlushGetANewOne) {
  boost::asio::io_context ioc;
  EventRelay relay(ioc);
  int ran = 0;
  relay.post([&] { ++ran; });
  EXPECT_EQ(ioc.run(), 1u);
  ioc.restart();
  relay.post([&] { ++ran; });
  relay.post([&] { ++ran; });
  EXPECT_EQ(ioc.run(), 1u);
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace kiln::server
