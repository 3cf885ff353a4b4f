#include "llm/scheduling/kv_block_manager.h"

#include <xxhash.h>

#include <algorithm>
#include <string>

namespace kiln::llm {
namespace {

constexpr uint64_t kRootHash = 0x6b696c6e2d6b7601ULL;  // the parent of every sequence's first block

}  // namespace

KvBlockManager::KvBlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  KILN_CHECK(num_blocks > 0 && block_size > 0);
  const auto n = static_cast<size_t>(num_blocks);
  refs_.assign(n, 0);
  hash_.assign(n, 0);
  registered_.assign(n, 0);
  if (prefix_caching_) tokens_.assign(n * static_cast<size_t>(block_size), 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  in_lru_.assign(n, 0);
  free_.reserve(n);
  // A stack: block 0 is handed out first.
  for (int64_t b = num_blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
}

uint64_t KvBlockManager::block_hash(uint64_t parent, std::span<const int32_t> block_tokens) const {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

void KvBlockManager::lru_push_back(int32_t block) {
  const auto b = static_cast<size_t>(block);
  prev_[b] = lru_tail_;
  next_[b] = -1;
  if (lru_tail_ >= 0) {
    next_[static_cast<size_t>(lru_tail_)] = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  in_lru_[b] = 1;
  ++lru_size_;
}

void KvBlockManager::lru_remove(int32_t block) {
  const auto b = static_cast<size_t>(block);
  KILN_CHECK(in_lru_[b]);
  if (prev_[b] >= 0) {
    next_[static_cast<size_t>(prev_[b])] = next_[b];
  } else {
    lru_head_ = next_[b];
  }
  if (next_[b] >= 0) {
    prev_[static_cast<size_t>(next_[b])] = prev_[b];
  } else {
    lru_tail_ = prev_[b];
  }
  prev_[b] = next_[b] = -1;
  in_lru_[b] = 0;
  --lru_size_;
}

int32_t KvBlockManager::take_block() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    KILN_CHECK(lru_head_ >= 0);
    block = lru_head_;
    lru_remove(block);
    const auto b = static_cast<size_t>(block);
    KILN_CHECK(registered_[b]);
    map_.erase(hash_[b]);
    registered_[b] = 0;
    ++evictions_;
  }
  KILN_CHECK(refs_[static_cast<size_t>(block)] == 0);
  refs_[static_cast<size_t>(block)] = 1;
  ++used_;
  return block;
}

int64_t KvBlockManager::acquire_prefix(KvBlockTable& table, std::span<const int32_t> tokens) {
  KILN_CHECK(table.blocks.empty() && table.hashes.empty());
  if (!prefix_caching_) return 0;
  const auto bs = static_cast<size_t>(block_size_);
  uint64_t parent = kRootHash;
  for (size_t start = 0; start + bs <= tokens.size(); start += bs) {
    const std::span<const int32_t> block_tokens = tokens.subspan(start, bs);
    const uint64_t h = block_hash(parent, block_tokens);
    const auto it = map_.find(h);
    if (it == map_.end()) break;
    const int32_t block = it->second;
    const auto b = static_cast<size_t>(block);
    if (!std::equal(block_tokens.begin(), block_tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(b * bs))) {
      break;  // a hash collision: treat as a miss
    }
    if (refs_[b] == 0) {
      lru_remove(block);
      ++used_;
    }
    ++refs_[b];
    table.blocks.push_back(block);
    table.hashes.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(table.blocks.size()) * block_size_;
}

bool KvBlockManager::allocate(KvBlockTable& table, int64_t num_positions) {
  const int64_t extra = blocks_for(num_positions) - static_cast<int64_t>(table.blocks.size());
  if (extra <= 0) return true;
  if (extra > available_blocks()) return false;
  for (int64_t i = 0; i < extra; ++i) table.blocks.push_back(take_block());
  return true;
}

void KvBlockManager::commit(KvBlockTable& table, std::span<const int32_t> tokens, int64_t num_computed) {
  if (!prefix_caching_) return;
  KILN_CHECK(num_computed <= static_cast<int64_t>(tokens.size()));
  const auto bs = static_cast<size_t>(block_size_);
  const size_t full = std::min(static_cast<size_t>(num_computed) / bs, table.blocks.size());
  while (table.hashes.size() < full) {
    const size_t i = table.hashes.size();
    const uint64_t parent = i == 0 ? kRootHash : table.hashes[i - 1];
    const std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t h = block_hash(parent, block_tokens);
    table.hashes.push_back(h);
    const int32_t block = table.blocks[i];
    const auto b = static_cast<size_t>(block);
    if (registered_[b]) continue;  // (cannot happen for a block this table filled; kept for safety)
    if (map_.contains(h)) continue;  // another block holds the same contents: this one stays private
    map_.emplace(h, block);
    hash_[b] = h;
    registered_[b] = 1;
    std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(b * bs));
  }
}

void KvBlockManager::release(KvBlockTable& table) {
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    const int32_t block = *it;
    const auto b = static_cast<size_t>(block);
    KILN_CHECK(refs_[b] > 0);
    if (--refs_[b] > 0) continue;
    --used_;
    if (registered_[b]) {
      lru_push_back(block);
    } else {
      free_.push_back(block);
    }
  }
  table.blocks.clear();
  table.hashes.clear();
}

void KvBlockManager::record_prefix_lookup(int64_t queried_tokens, int64_t hit_tokens) {
  prefix_queries_ += queried_tokens;
  prefix_hits_ += hit_tokens;
}

KvBlockStats KvBlockManager::stats() const {
  KvBlockStats s;
  s.total = num_blocks_;
  s.used = used_;
  s.cached = lru_size_;
  s.free = static_cast<int64_t>(free_.size());
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  s.evictions = evictions_;
  return s;
}

Status KvBlockManager::verify() const {
  const auto n = static_cast<size_t>(num_blocks_);
  std::vector<uint8_t> on_free(n, 0);
  for (int32_t b : free_) {
    if (b < 0 || static_cast<size_t>(b) >= n) return internal_error("free list holds block " + std::to_string(b));
    if (on_free[static_cast<size_t>(b)]++) return internal_error("block " + std::to_string(b) + " is on the free list twice");
  }
  int64_t lru_count = 0;
  int32_t prev = -1;
  for (int32_t b = lru_head_; b >= 0; b = next_[static_cast<size_t>(b)]) {
    if (++lru_count > num_blocks_) return internal_error("the LRU list has a cycle");
    if (prev_[static_cast<size_t>(b)] != prev) return internal_error("LRU back link of block " + std::to_string(b));
    if (!in_lru_[static_cast<size_t>(b)]) return internal_error("block " + std::to_string(b) + " is linked but not marked cached");
    prev = b;
  }
  if (prev != lru_tail_ || lru_count != lru_size_) return internal_error("LRU list length or tail is wrong");
  int64_t used = 0;
  for (size_t b = 0; b < n; ++b) {
    const std::string name = "block " + std::to_string(b);
    const int states = (on_free[b] ? 1 : 0) + (in_lru_[b] ? 1 : 0) + (refs_[b] > 0 ? 1 : 0);
    if (refs_[b] < 0) return internal_error(name + " has a negative reference count");
    if (states != 1) return internal_error(name + " is in " + std::to_string(states) + " of the states free, cached, used");
    if (in_lru_[b] && !registered_[b]) return internal_error(name + " is cached without a hash");
    if (on_free[b] && registered_[b]) return internal_error(name + " is free but still registered");
    if (registered_[b]) {
      const auto it = map_.find(hash_[b]);
      if (it == map_.end() || it->second != static_cast<int32_t>(b)) return internal_error(name + " is registered but not mapped");
    }
    used += refs_[b] > 0 ? 1 : 0;
  }
  if (used != used_) return internal_error("used-block count " + std::to_string(used_) + " != " + std::to_string(used));
  for (const auto& [h, b] : map_) {
    if (!registered_[static_cast<size_t>(b)] || hash_[static_cast<size_t>(b)] != h) {
      return internal_error("the hash map points at block " + std::to_string(b) + " under a stale hash");
    }
  }
  return Status::ok();
}

}  // namespace kiln::llm
