// The dynamic batcher as plain scheduling code: the run function below stands for a model that
// maps each row of "x" [rows, 2] to its sum, [rows, 1], and records the batches it was given.
#include "server/repository/dynamic_batcher.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

namespace kiln::server {
namespace {

using namespace std::chrono_literals;

struct RowSums {
  std::mutex mu;
  std::vector<int64_t> batches;  // rows of each run, in order
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = true;

  DynamicBatcher::RunFn fn() {
    return [this](const std::map<std::string, ir::Tensor>& in) -> Expected<TensorList> {
      {
        std::unique_lock lock(gate_mu);
        gate_cv.wait(lock, [&] { return open; });
      }
      const ir::Tensor& x = in.at("x");
      const int64_t rows = x.shape()[0];
      {
        std::lock_guard lock(mu);
        batches.push_back(rows);
      }
      ir::Tensor y(ir::DType::kF32, {rows, 1});
      for (int64_t r = 0; r < rows; ++r) y.mutable_data<float>()[r] = x.data<float>()[2 * r] + x.data<float>()[2 * r + 1];
      return TensorList{{"y", std::move(y)}};
    };
  }
  void set_open(bool o) {
    {
      std::lock_guard lock(gate_mu);
      open = o;
    }
    gate_cv.notify_all();
  }
};

std::map<std::string, ir::Tensor> rows_input(std::vector<float> values) {
  const int64_t rows = static_cast<int64_t>(values.size()) / 2;
  ir::Tensor x(ir::DType::kF32, {rows, 2});
  std::copy(values.begin(), values.end(), x.mutable_data<float>());
  return {{"x", std::move(x)}};
}

void wait_done(InferTicket& t) {
  std::promise<void> p;
  t.set_notifier([&p] { p.set_value(); });
  ASSERT_EQ(p.get_future().wait_for(10s), std::future_status::ready);
}

DynamicBatcher::Options batching(int64_t max_batch, std::chrono::microseconds delay, std::vector<int64_t> preferred = {}) {
  DynamicBatcher::Options o;
  o.model = "sums";
  o.dynamic_batching = true;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.preferred_batch_sizes = std::move(preferred);
  return o;
}

TEST(DynamicBatcher, RequestsQueuedWithinTheDelayRunAsOneBatchAndEachGetsItsRows) {
  RowSums model;
  model.set_open(false);  // hold the single instance while the requests queue up
  DynamicBatcher batcher(batching(8, 50ms), {model.fn()});
  auto first = batcher.submit(rows_input({1, 2}), 1);
  ASSERT_TRUE(first);
  std::this_thread::sleep_for(100ms);  // the first batch forms alone and waits at the gate
  std::vector<std::shared_ptr<InferTicket>> tickets;
  for (int i = 0; i < 5; ++i) {
    auto t = batcher.submit(rows_input({float(i), 10.0f * i, float(i), 1.0f}), 2);  // 2 rows each
    ASSERT_TRUE(t);
    tickets.push_back(*t);
  }
  model.set_open(true);
  wait_done(**first);
  for (auto& t : tickets) wait_done(*t);
  EXPECT_EQ((*first)->outputs[0].second.data<float>()[0], 3.0f);
  for (int i = 0; i < 5; ++i) {
    const InferTicket& t = *tickets[i];
    ASSERT_TRUE(t.status) << t.status.message();
    const ir::Tensor& y = t.outputs.at(0).second;
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(y.data<float>()[0], 11.0f * i);
    EXPECT_EQ(y.data<float>()[1], i + 1.0f);
  }
  std::lock_guard lock(model.mu);
  // 1 alone, then 4 requests of 2 rows fill max_batch_size 8, then the fifth.
  EXPECT_EQ(model.batches, (std::vector<int64_t>{1, 8, 2}));
}

TEST(DynamicBatcher, APreferredSizeRunsWithoutWaitingForTheDelay) {
  RowSums model;
  DynamicBatcher batcher(batching(16, 10s, {2}), {model.fn()});
  const auto start = std::chrono::steady_clock::now();
  auto a = batcher.submit(rows_input({1, 1}), 1);
  auto b = batcher.submit(rows_input({2, 2}), 1);
  ASSERT_TRUE(a && b);
  wait_done(**a);
  wait_done(**b);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // far less than the 10 s delay
  EXPECT_EQ((*b)->outputs[0].second.data<float>()[0], 4.0f);
}

TEST(DynamicBatcher, WithoutDynamicBatchingEveryRequestRunsAlone) {
  RowSums model;
  model.set_open(false);
  DynamicBatcher::Options o;
  o.model = "sums";
  o.max_batch_size = 8;
  DynamicBatcher batcher(o, {model.fn()});
  std::vector<std::shared_ptr<InferTicket>> tickets;
  for (int i = 0; i < 4; ++i) tickets.push_back(*batcher.submit(rows_input({1, float(i)}), 1));
  model.set_open(true);
  for (auto& t : tickets) wait_done(*t);
  std::lock_guard lock(model.mu);
  EXPECT_EQ(model.batches, (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(DynamicBatcher, RequestsOfDifferentShapesDoNotShareABatch) {
  RowSums model;
  model.set_open(false);
  DynamicBatcher batcher(batching(8, 20ms), {model.fn()});
  auto hold = *batcher.submit(rows_input({0, 0}), 1);
  std::this_thread::sleep_for(50ms);
  ir::Tensor wide(ir::DType::kF32, {1, 4});
  std::fill_n(wide.mutable_data<float>(), 4, 1.0f);
  auto odd = *batcher.submit({{"x", std::move(wide)}}, 1);
  auto plain = *batcher.submit(rows_input({5, 5}), 1);
  model.set_open(true);
  wait_done(*hold);
  wait_done(*odd);
  wait_done(*plain);
  EXPECT_EQ(plain->outputs[0].second.data<float>()[0], 10.0f);
  std::lock_guard lock(model.mu);
  EXPECT_EQ(model.batches.size(), 3u);
}

TEST(DynamicBatcher, AFullQueueRefusesAndStopRunsWhatIsQueued) {
  RowSums model;
  model.set_open(false);
  auto o = batching(1, 0us);
  o.max_queue = 2;
  DynamicBatcher batcher(o, {model.fn()});
  auto running = *batcher.submit(rows_input({1, 1}), 1);
  std::this_thread::sleep_for(50ms);  // taken by the instance, which waits at the gate
  auto q1 = batcher.submit(rows_input({2, 2}), 1);
  auto q2 = batcher.submit(rows_input({3, 3}), 1);
  auto refused = batcher.submit(rows_input({4, 4}), 1);
  ASSERT_TRUE(q1 && q2);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  model.set_open(true);
  batcher.stop();
  EXPECT_TRUE((*q2)->done());
  EXPECT_EQ((*q2)->outputs[0].second.data<float>()[0], 6.0f);
  auto late = batcher.submit(rows_input({1, 1}), 1);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.status().code(), StatusCode::kNotFound);
}

TEST(DynamicBatcher, AnOutputWithoutTheBatchDimensionFailsTheBatchClearly) {
  DynamicBatcher::RunFn collapse = [](const std::map<std::string, ir::Tensor>&) -> Expected<TensorList> {
    ir::Tensor y(ir::DType::kF32, {1});
    y.mutable_data<float>()[0] = 0;
    return TensorList{{"total", std::move(y)}};
  };
  // Both requests arrive well within the delay, so they share one batch of 2 rows.
  DynamicBatcher batcher(batching(4, 200ms), {collapse});
  auto a = *batcher.submit(rows_input({1, 1}), 1);
  auto b = *batcher.submit(rows_input({1, 1}), 1);
  wait_done(*a);
  wait_done(*b);
  ASSERT_EQ(a->batch_rows, 2);
  for (const auto* t : {a.get(), b.get()}) {
    EXPECT_FALSE(t->status);
    EXPECT_NE(t->status.message().find("output 'total' does not keep the batch dimension"), std::string::npos);
  }
}

TEST(DynamicBatcher, SeveralInstancesRunBatchesAtOnce) {
  RowSums one, two;
  std::atomic<int> running{0}, most{0};
  auto counted = [&](DynamicBatcher::RunFn fn) {
    return [&, fn](const std::map<std::string, ir::Tensor>& in) {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {}
      std::this_thread::sleep_for(100ms);
      --running;
      return fn(in);
    };
  };
  DynamicBatcher::Options o;
  o.model = "sums";
  o.max_batch_size = 1;
  DynamicBatcher batcher(o, {counted(one.fn()), counted(two.fn())});
  auto a = *batcher.submit(rows_input({1, 1}), 1);
  auto b = *batcher.submit(rows_input({2, 2}), 1);
  wait_done(*a);
  wait_done(*b);
  EXPECT_EQ(most.load(), 2);
}

}  // namespace
}  // namespace kiln::server
