// backends/cpu/parallel.h: every iteration runs exactly once, on one thread or on several; a region
// that is not to be parallel, or has one thread to run on, runs its body once on the calling
// thread, outside any OpenMP region, and its worksharing loops run whole there.
#include "backends/cpu/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <vector>

namespace kiln::cpu {
namespace {

// Sets the OpenMP thread count for a scope, and puts the old one back.
class Threads {
 public:
  explicit Threads(int n) : old_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(old_); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int old_;
};

TEST(Parallel, ForRunsEveryIterationOnce) {
  for (int threads : {1, 2, 3}) {
    const Threads scope(threads);
    for (bool parallel : {false, true}) {
      std::vector<std::atomic<int>> hits(1000);
      parallel_for(5, 1000, parallel, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (size_t i = 0; i < hits.size(); ++i) {
        ASSERT_EQ(hits[i].load(), i < 5 ? 0 : 1) << "iteration " << i << ", " << threads << " threads, parallel "
                                                 << parallel;
      }
    }
  }
}

TEST(Parallel, RegionSplitsItsLoopsAmongItsThreadsOrRunsThemWhole) {
  for (int threads : {1, 3}) {
    const Threads scope(threads);
    for (bool parallel : {false, true}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, parallel " + std::to_string(parallel));
      std::atomic<int> bodies{0}, inside{0};
      std::vector<std::atomic<int>> hits(64);
      parallel_region(parallel, [&] {
        ++bodies;
        if (omp_in_parallel() != 0) ++inside;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < 64; ++i) hits[static_cast<size_t>(i)]++;
#pragma omp barrier
      });
      const bool team = parallel && threads > 1;
      EXPECT_EQ(bodies.load(), team ? threads : 1);
      EXPECT_EQ(inside.load(), team ? threads : 0);
      for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "iteration " << i;
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
