#include "llm/scheduling/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kiln::llm {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Allocates and computes `tokens` into a fresh table, as a sequence's prefill would.
KvBlockTable computed(KvBlockManager& m, const std::vector<int32_t>& tokens) {
  KvBlockTable t;
  EXPECT_TRUE(m.allocate(t, static_cast<int64_t>(tokens.size())));
  m.commit(t, tokens, static_cast<int64_t>(tokens.size()));
  return t;
}

TEST(KvBlockManager, AllocateAndReleaseBalance) {
  KvBlockManager m(8, 4, true);
  KvBlockTable a, b;
  ASSERT_TRUE(m.allocate(a, 9));  // 3 blocks
  ASSERT_TRUE(m.allocate(b, 4));  // 1 block
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(b.blocks.size(), 1u);
  EXPECT_EQ(m.available_blocks(), 4);
  EXPECT_EQ(m.stats().used, 4);
  ASSERT_TRUE(m.allocate(a, 12));  // still 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  for (int32_t blk : a.blocks) EXPECT_EQ(m.ref_count(blk), 1);
  EXPECT_TRUE(m.verify()) << m.verify().message();
  m.release(a);
  m.release(b);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(m.available_blocks(), 8);
  EXPECT_EQ(m.stats().used, 0);
  EXPECT_EQ(m.stats().free, 8);  // nothing was committed: nothing cached
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, AllocateFailsWithoutSideEffects) {
  KvBlockManager m(4, 4, true);
  KvBlockTable a, b;
  ASSERT_TRUE(m.allocate(a, 12));
  ASSERT_TRUE(m.allocate(b, 1));
  EXPECT_FALSE(m.allocate(b, 9));  // needs 2 more, 0 free
  EXPECT_EQ(b.blocks.size(), 1u);
  EXPECT_EQ(m.available_blocks(), 0);
  EXPECT_TRUE(m.verify()) << m.verify().message();
  m.release(a);
  m.release(b);
}

TEST(KvBlockManager, PrefixHitSharesFullBlocks) {
  KvBlockManager m(16, 4, true);
  const auto tokens = iota_tokens(10);  // blocks: [0,4) [4,8) full, [8,10) partial
  KvBlockTable a = computed(m, tokens);
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, tokens), 8);
  ASSERT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(m.ref_count(a.blocks[0]), 2);
  EXPECT_EQ(m.ref_count(a.blocks[2]), 1);  // the partial block is never shared
  ASSERT_TRUE(m.allocate(b, 10));
  EXPECT_NE(b.blocks[2], a.blocks[2]);
  EXPECT_TRUE(m.verify()) << m.verify().message();
  m.release(a);
  EXPECT_EQ(m.ref_count(b.blocks[0]), 1);
  m.release(b);
  EXPECT_EQ(m.stats().used, 0);
  EXPECT_EQ(m.stats().cached, 2);  // the two full blocks stay reusable
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, PrefixMatchStopsAtFirstDifferentBlock) {
  KvBlockManager m(16, 4, true);
  auto tokens = iota_tokens(16);
  KvBlockTable a = computed(m, tokens);
  tokens[9] = 7;  // third block differs
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, tokens), 8);
  m.release(a);
  m.release(b);
}

TEST(KvBlockManager, SameBlockAfterDifferentParentIsNotAHit) {
  KvBlockManager m(16, 4, true);
  std::vector<int32_t> x = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> y = {9, 9, 9, 9, 5, 6, 7, 8};  // second block equal, first not
  KvBlockTable a = computed(m, x);
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, y), 0);
  EXPECT_TRUE(b.blocks.empty());
  m.release(a);
}

TEST(KvBlockManager, LruEvictsTailsOfOldestChainsFirst) {
  KvBlockManager m(4, 2, true);
  const std::vector<int32_t> a_tokens = {1, 2, 3, 4};
  const std::vector<int32_t> b_tokens = {5, 6, 7, 8};
  KvBlockTable a = computed(m, a_tokens);
  KvBlockTable b = computed(m, b_tokens);
  m.release(a);  // LRU: a1 a0
  m.release(b);  // LRU: a1 a0 b1 b0
  EXPECT_EQ(m.stats().cached, 4);
  EXPECT_EQ(m.available_blocks(), 4);

  KvBlockTable c;
  ASSERT_TRUE(m.allocate(c, 1));  // evicts a1
  EXPECT_EQ(m.stats().evictions, 1);
  EXPECT_TRUE(m.verify()) << m.verify().message();
  KvBlockTable probe;
  EXPECT_EQ(m.acquire_prefix(probe, a_tokens), 2);  // a0 survives
  m.release(probe);                                 // a0 is now the most recently used
  KvBlockTable probe_b;
  EXPECT_EQ(m.acquire_prefix(probe_b, b_tokens), 4);
  m.release(probe_b);  // LRU: a0 b1 b0

  ASSERT_TRUE(m.allocate(c, 4));  // evicts a0
  KvBlockTable probe2;
  EXPECT_EQ(m.acquire_prefix(probe2, a_tokens), 0);
  EXPECT_EQ(m.acquire_prefix(probe2, b_tokens), 4);
  EXPECT_TRUE(m.verify()) << m.verify().message();
  m.release(probe2);
  m.release(c);
  EXPECT_EQ(m.stats().used, 0);
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, HitRevivesACachedBlockWithoutEvictingIt) {
  KvBlockManager m(2, 2, true);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  KvBlockTable a = computed(m, tokens);
  m.release(a);
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, tokens), 4);
  EXPECT_EQ(m.available_blocks(), 0);
  KvBlockTable c;
  EXPECT_FALSE(m.allocate(c, 1));  // both blocks are referenced again
  m.release(b);
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, DuplicateContentStaysPrivate) {
  KvBlockManager m(8, 2, true);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  KvBlockTable a = computed(m, tokens);
  KvBlockTable b = computed(m, tokens);  // computed twice side by side, no lookup
  EXPECT_NE(a.blocks[0], b.blocks[0]);
  EXPECT_EQ(a.hashes, b.hashes);
  m.release(b);
  EXPECT_EQ(m.stats().cached, 0);  // b's copies were never registered
  EXPECT_EQ(m.stats().free, 6);
  m.release(a);
  EXPECT_EQ(m.stats().cached, 2);
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, PrefixCachingOff) {
  KvBlockManager m(8, 2, false);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  KvBlockTable a = computed(m, tokens);
  EXPECT_TRUE(a.hashes.empty());
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, tokens), 0);
  m.release(a);
  EXPECT_EQ(m.stats().cached, 0);
  EXPECT_EQ(m.stats().free, 8);
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, CommitIsIncremental) {
  KvBlockManager m(8, 2, true);
  std::vector<int32_t> tokens = {1, 2, 3};
  KvBlockTable a;
  ASSERT_TRUE(m.allocate(a, 3));
  m.commit(a, tokens, 3);
  EXPECT_EQ(a.hashes.size(), 1u);
  tokens.push_back(4);
  ASSERT_TRUE(m.allocate(a, 4));
  m.commit(a, tokens, 4);
  EXPECT_EQ(a.hashes.size(), 2u);
  KvBlockTable b;
  EXPECT_EQ(m.acquire_prefix(b, tokens), 4);
  m.release(a);
  m.release(b);
  EXPECT_TRUE(m.verify()) << m.verify().message();
}

TEST(KvBlockManager, PrefixStatsCountTokens) {
  KvBlockManager m(8, 2, true);
  m.record_prefix_lookup(10, 4);
  m.record_prefix_lookup(3, 0);
  EXPECT_EQ(m.stats().prefix_queries, 13);
  EXPECT_EQ(m.stats().prefix_hits, 4);
}

}  // namespace
}  // namespace kiln::llm
