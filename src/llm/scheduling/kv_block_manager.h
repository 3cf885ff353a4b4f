// KvBlockManager: which block of the paged KV cache holds which positions of which sequence. It
// hands out block ids from a fixed pool [0, num_blocks) and keeps, per block, a reference count
// and (for full blocks) the hash of its contents, so that sequences with the same prefix share
// blocks (automatic prefix caching). It never touches the cache's storage: the serving loop
// pairs it with one runtime::KvCache of the same num_blocks and block_size.
//
// A full block is named by a chain hash: xxh3 of its block_size tokens, seeded with the hash of
// the block before it (the first block with a fixed root). Equal hashes therefore mean equal
// token prefixes up to the end of the block, i.e. equal K/V contents; the manager also keeps
// each cached block's tokens and compares them on lookup, so a hash collision is a miss, never
// wrong attention.
//
// Ownership: callers own their KvBlockTable (one per sequence) and must give its blocks back
// with release() before dropping it. The manager owns the free list, the reference counts,
// the hash -> block map and the LRU list of cached blocks nobody references.
//
// Invariants (checked by verify()):
//   - every block is in exactly one state: free (on the free list), cached (refcount 0 with a
//     hash, on the LRU list: reusable by a prefix lookup, evicted when the free list is empty),
//     or used (refcount > 0, which equals the number of tables that list it);
//   - a block listed by two tables is full and registered under its hash: only the first
//     holder ever wrote it, and nobody writes a full block again;
//   - the hash map points only at blocks whose recorded hash is that key.
// Eviction takes the least recently released cached block; release() returns a table's blocks
// last-first, so a chain's tail is evicted before its head (a head is worth more: every longer
// prefix needs it).
//
// Not thread-safe: the serving loop's thread is its only user.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace kiln::llm {

// One sequence's blocks: blocks[i] holds positions [i * block_size, (i + 1) * block_size).
struct KvBlockTable {
  std::vector<int32_t> blocks;
  // Chain hashes of blocks[0, hashes.size()): the leading full blocks whose contents are known
  // (found by a prefix lookup or committed after they were computed).
  std::vector<uint64_t> hashes;
};

struct KvBlockStats {
  int64_t total = 0;
  int64_t used = 0;     // referenced by at least one table
  int64_t cached = 0;   // unreferenced, kept for prefix hits
  int64_t free = 0;     // never used or evicted
  int64_t prefix_queries = 0;  // tokens looked up (record_prefix_lookup)
  int64_t prefix_hits = 0;     // ... of which were found
  int64_t evictions = 0;
};

class KvBlockManager {
 public:
  // `prefix_caching` off: no hashing, no sharing; released blocks go straight back to the free list.
  KvBlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks allocate() can hand out now: free ones plus evictable cached ones.
  int64_t available_blocks() const { return static_cast<int64_t>(free_.size()) + lru_size_; }
  // Blocks needed to hold `num_positions` positions.
  int64_t blocks_for(int64_t num_positions) const { return (num_positions + block_size_ - 1) / block_size_; }

  // For an empty table: takes the longest run of leading full blocks of `tokens` that are
  // cached, adds a reference to each and lists them in `table`. Returns the tokens they cover (a
  // multiple of block_size). Always 0 when prefix caching is off.
  int64_t acquire_prefix(KvBlockTable& table, std::span<const int32_t> tokens);

  // Grows `table` until it covers `num_positions`, evicting cached blocks when the free list is
  // empty. Returns false, leaving everything unchanged, when the pool cannot supply enough.
  bool allocate(KvBlockTable& table, int64_t num_positions);

  // Records that `tokens[0, num_computed)` are now in the cache: every block of `table` that
  // became full gets its chain hash, and is registered for prefix lookups unless another block
  // already holds the same contents.
  void commit(KvBlockTable& table, std::span<const int32_t> tokens, int64_t num_computed);

  // Drops the table's references (last block first) and clears it.
  void release(KvBlockTable& table);

  // Counts a prefix lookup in the stats (the scheduler calls it once per admitted sequence).
  void record_prefix_lookup(int64_t queried_tokens, int64_t hit_tokens);

  KvBlockStats stats() const;
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  bool is_cached(int32_t block) const { return in_lru_[static_cast<size_t>(block)] != 0; }

  // Checks the invariants above (O(num_blocks)); for tests. An error names the first broken one.
  Status verify() const;

 private:
  uint64_t block_hash(uint64_t parent, std::span<const int32_t> block_tokens) const;
  int32_t take_block();  // from the free list, else by evicting the LRU head
  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);

  int64_t num_blocks_;
  int64_t block_size_;
  bool prefix_caching_;

  std::vector<int32_t> refs_;          // [num_blocks]
  std::vector<uint64_t> hash_;         // [num_blocks]: valid where registered_
  std::vector<uint8_t> registered_;    // [num_blocks]: in map_ under hash_
  std::vector<int32_t> tokens_;        // [num_blocks, block_size]: contents of registered blocks
  std::unordered_map<uint64_t, int32_t> map_;
  std::vector<int32_t> free_;          // a stack; blocks that hold nothing reusable

  // Doubly linked LRU list of cached blocks: head is evicted first.
  std::vector<int32_t> prev_, next_;   // [num_blocks]
  std::vector<uint8_t> in_lru_;        // [num_blocks]
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t lru_size_ = 0;

  int64_t used_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0, evictions_ = 0;
};

}  // namespace kiln::llm
