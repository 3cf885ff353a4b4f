// set_current_thread_name (base/thread_name.h), read back with pthread_getname_np.
#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

#include "base/thread_name.h"

namespace kiln {
namespace {

// The name a fresh thread has after set_current_thread_name(name).
std::string name_after(const char* name) {
  std::string seen;
  std::thread t([&] {
    set_current_thread_name(name);
    char buf[64] = {};
    if (pthread_getname_np(pthread_self(), buf, sizeof(buf)) == 0) seen = buf;
  });
  t.join();
  return seen;
}

TEST(ThreadName, NamesTheCallingThread) { EXPECT_EQ(name_after("kiln-http"), "kiln-http"); }

TEST(ThreadName, TruncatesToFifteenBytes) {
  // Linux refuses names of 16 bytes or more; the function keeps the first 15 instead.
  EXPECT_EQ(name_after("kiln-engine-loop-thread"), "kiln-engine-loo");
  EXPECT_EQ(name_after("exactly15bytes!"), "exactly15bytes!");
}

}  // namespace
}  // namespace kiln
