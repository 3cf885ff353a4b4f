#include "engine/engine_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_file.h"

namespace kiln::engine {
namespace {

// Threads that fill blobs at once, at most.
constexpr size_t kMaxFillThreads = 8;

// a + b, or false if it does not fit in 64 bits.
bool checked_add(uint64_t a, uint64_t b, uint64_t* sum) {
  if (b > std::numeric_limits<uint64_t>::max() - a) return false;
  *sum = a + b;
  return true;
}

bool checked_align_up(uint64_t value, uint64_t alignment, uint64_t* aligned) {
  if (!checked_add(value, alignment - 1, aligned)) return false;
  *aligned -= *aligned % alignment;
  return true;
}

std::string errno_text() { return std::strerror(errno); }

// The temporary output file, mapped read-write. Unless commit() succeeds, the destructor removes
// it, so a failure at any point (including an exception from a fill function) leaves nothing.
class TempOutput {
 public:
  explicit TempOutput(std::string path) : path_(std::move(path)) {}
  ~TempOutput() {
    if (data_ != nullptr) munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !committed_) ::unlink(path_.c_str());
  }
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;

  // Creates the file with `size` zero bytes, with its disk space reserved so that filling the
  // mapping cannot fail later for lack of space, and maps it.
  Status create(uint64_t size) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return io_error("cannot create " + path_ + ": " + errno_text());
    created_ = true;
    if (size > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
      return invalid_argument("engine of " + std::to_string(size) + " bytes is too large to write");
    }
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return io_error("cannot resize " + path_ + " to " + std::to_string(size) + " bytes: " +
                      errno_text());
    }
    if (int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(size)); err != 0) {
      return io_error("cannot reserve " + std::to_string(size) + " bytes for " + path_ + ": " +
                      std::strerror(err) + (err == ENOSPC ? " — free some disk space" : ""));
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return io_error("cannot map " + path_ + ": " + errno_text());
    data_ = static_cast<std::byte*>(p);
    size_ = size;
    return Status::ok();
  }

  std::span<std::byte> bytes() const { return {data_, size_}; }

  // Flushes the file to disk and renames it onto `final_path`.
  Status commit(const std::string& final_path) {
    if (munmap(data_, size_) != 0) return io_error("cannot unmap " + path_ + ": " + errno_text());
    data_ = nullptr;
    if (::fsync(fd_) != 0) return io_error("cannot flush " + path_ + ": " + errno_text());
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return io_error("cannot close " + path_ + ": " + errno_text());
    if (std::rename(path_.c_str(), final_path.c_str()) != 0) {
      return io_error("cannot rename " + path_ + " to " + final_path + ": " + errno_text());
    }
    committed_ = true;
    return Status::ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool created_ = false;
  bool committed_ = false;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

struct HashState {
  void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};

}  // namespace

void EngineWriter::set_header(std::string target, std::string build_options) {
  target_ = std::move(target);
  build_options_ = std::move(build_options);
}

void EngineWriter::add_blob(std::string name, uint64_t size, FillFn fill) {
  blobs_.push_back({std::move(name), size, std::move(fill)});
}

Status EngineWriter::write(const std::string& path, nlohmann::json metadata,
                           const ProgressFn& progress) const {
  if (target_.empty()) {
    return invalid_argument("engine target is not set; call EngineWriter::set_header before write");
  }
  if (!metadata.is_object()) {
    return invalid_argument("engine metadata must be a JSON object, not " +
                            std::string(metadata.type_name()));
  }
  if (metadata.contains(kBlobsKey)) {
    return invalid_argument("engine metadata must not contain the key \"blobs\"; the writer adds it");
  }

  // Layout: blob offsets relative to the data section, each on a kBlobAlignment boundary.
  const std::string too_large = "the blobs of " + path + " add up to more than 2^64 bytes";
  nlohmann::json table = nlohmann::json::object();
  std::vector<uint64_t> offsets;
  offsets.reserve(blobs_.size());
  uint64_t data_size = 0;
  uint64_t total_blob_bytes = 0;
  for (const Blob& blob : blobs_) {
    if (!blob.fill) {
      return invalid_argument("engine blob \"" + blob.name + "\" has no fill function");
    }
    if (table.contains(blob.name)) {
      return invalid_argument("engine blob \"" + blob.name + "\" is declared twice");
    }
    uint64_t offset = 0;
    if (!checked_align_up(data_size, kBlobAlignment, &offset) ||
        !checked_add(offset, blob.size, &data_size) ||
        !checked_add(total_blob_bytes, blob.size, &total_blob_bytes)) {
      return invalid_argument(too_large);
    }
    table[blob.name] = {{"offset", offset}, {"size", blob.size}};
    offsets.push_back(offset);
  }
  metadata[kBlobsKey] = std::move(table);
  std::string text;
  try {
    text = metadata.dump();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("engine metadata cannot be written as JSON: ") + e.what());
  }

  EngineHeader header;
  header.kiln_version = KILN_VERSION;
  header.target = target_;
  header.build_options = build_options_;
  header.metadata_offset = kHeaderSize;
  header.metadata_size = text.size();
  header.data_size = data_size;
  if (!checked_align_up(kHeaderSize + header.metadata_size, kDataAlignment, &header.data_offset) ||
      !checked_add(header.data_offset, data_size, &header.file_size)) {
    return invalid_argument(too_large);
  }
  // Encode once before creating anything, so a header field that does not fit fails early.
  std::vector<std::byte> scratch(kHeaderSize);
  KILN_RETURN_IF_ERROR(encode_engine_header(header, scratch));

  TempOutput out(path + ".tmp");
  KILN_RETURN_IF_ERROR(out.create(header.file_size));
  const std::span<std::byte> file = out.bytes();
  std::memcpy(file.data() + header.metadata_offset, text.data(), text.size());

  // Blobs are independent: threads fill them in parallel, taking the next one as they finish
  // (converting and quantising weights is most of a build's time). Each thread holds one
  // weight's floats at a time, so the threads are capped to bound memory.
  const size_t workers = std::min<size_t>({blobs_.size(), kMaxFillThreads,
                                           std::max<size_t>(1, std::thread::hardware_concurrency())});
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;  // guards first_error, done and the progress callback
  Status first_error = Status::ok();
  size_t first_error_blob = blobs_.size();
  uint64_t done = 0;
  if (progress) progress(0, total_blob_bytes);
  auto fill_blobs = [&] {
    for (size_t i = next++; i < blobs_.size() && !failed.load(); i = next++) {
      const Blob& blob = blobs_[i];
      Status filled = blob.fill(file.subspan(header.data_offset + offsets[i], blob.size));
      std::lock_guard lock(mu);
      if (!filled.is_ok()) {
        failed.store(true);
        if (i < first_error_blob) {  // the same error whatever the threads' timing
          first_error_blob = i;
          first_error = filled.with_context("writing blob \"" + blob.name + "\" of " + path);
        }
        continue;
      }
      done += blob.size;
      if (progress) progress(done, total_blob_bytes);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(fill_blobs);
  fill_blobs();
  for (std::thread& t : threads) t.join();
  if (!first_error.is_ok()) return first_error;

  // The content checksum, over the file after the header, in file order.
  std::unique_ptr<XXH3_state_t, HashState> hash(XXH3_createState());
  if (hash == nullptr || XXH3_64bits_reset(hash.get()) != XXH_OK) {
    return internal_error("cannot start the engine checksum");
  }
  XXH3_64bits_update(hash.get(), file.data() + kHeaderSize, header.file_size - kHeaderSize);
  header.checksum = XXH3_64bits_digest(hash.get());
  KILN_RETURN_IF_ERROR(encode_engine_header(header, file.first(kHeaderSize)));
  return out.commit(path);
}

}  // namespace kiln::engine
