#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Maps `size` bytes (of `fd` from offset 0, or anonymous memory with fd -1) at a 2 MiB-aligned
// address and asks for huge pages.
//
// Streaming gigabytes of weights through 4 KiB pages costs a TLB miss every 4 KiB (and a
// two-level walk under virtualisation); 2 MiB mappings remove nearly all of them. The kernel
// can map page-cache folios of 2 MiB with one entry only where the virtual address and the file
// offset agree modulo 2 MiB, and MADV_HUGEPAGE makes it read uncached parts of the file into
// such folios. Both are requests: where they do not apply, the mapping works as usual.
void* map_huge_aligned(int fd, size_t size, int prot) {
  void* area = mmap(nullptr, size + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return MAP_FAILED;
  const auto start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  const int flags = MAP_PRIVATE | MAP_FIXED | (fd < 0 ? MAP_ANONYMOUS : 0);
  void* p = mmap(reinterpret_cast<void*>(aligned), size, prot, flags, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    munmap(area, size + kHugePage);
    errno = err;
    return MAP_FAILED;
  }
  // Release the slack before and after the range.
  if (aligned > start) munmap(area, aligned - start);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = aligned + (size + page - 1) / page * page;
  if (start + size + kHugePage > end) munmap(reinterpret_cast<void*>(end), start + size + kHugePage - end);
  madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void* map_read_only(int fd, size_t size) {
  if (size < kHugePage) return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  return map_huge_aligned(fd, size, PROT_READ);
}

}  // namespace

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) {
    munmap(const_cast<std::byte*>(data_), size_);
  }
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr && size_ > 0) munmap(const_cast<std::byte*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Expected<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  "cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + " is not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = map_read_only(fd, file.size_);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      file.size_ = 0;
      return io_error("cannot map " + path + ": " + std::strerror(err));
    }
    file.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return file;
}

void* map_zeroed_huge(size_t bytes) {
  void* p = map_huge_aligned(-1, bytes, PROT_READ | PROT_WRITE);
  return p == MAP_FAILED ? nullptr : p;
}

std::optional<uint64_t> huge_page_bytes(std::span<const std::byte> range) {
  std::ifstream in("/proc/self/smaps");
  if (!in || range.empty()) return std::nullopt;
  const auto lo = reinterpret_cast<uintptr_t>(range.data());
  const uintptr_t hi = lo + range.size();
  bool inside = false, found = false;
  uint64_t kib = 0;
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-') {  // "start-end perms ..." opens a mapping
      inside = start < hi && end > lo;
      found = found || inside;
      continue;
    }
    if (!inside) continue;
    for (const char* key : {"FilePmdMapped:", "AnonHugePages:"}) {
      if (line.rfind(key, 0) == 0) kib += std::stoull(line.substr(std::strlen(key)));
    }
  }
  if (!found) return std::nullopt;
  return kib * 1024;
}

Expected<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("cannot read " + path);
  return ss.str();
}

}  // namespace kiln
