#include "base/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace strata {
namespace {
std::atomic<uint64_t> gCounter{0};
}

ShmSegment ShmSegment::create(size_t bytes) {
  ShmSegment s;
  s.name_ = format("/strata-%d-%llu", getpid(), static_cast<unsigned long long>(gCounter++));
  int fd = shm_open(s.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) failErrno(("shm_open(" + s.name_ + ")").c_str());
  s.owner_ = true;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    shm_unlink(s.name_.c_str());
    failErrno("ftruncate of a shared-memory segment (is /dev/shm full?)");
  }
  // MAP_POPULATE pre-faults: page faults cost 13-24 us each on VMs, so pay them once here.
  s.data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    shm_unlink(s.name_.c_str());
    failErrno("mmap of a shared-memory segment");
  }
  s.size_ = bytes;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name) {
  ShmSegment s;
  s.name_ = name;
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) failErrno(("shm_open(" + name + ") of a peer's segment").c_str());
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    failErrno("fstat of a shared-memory segment");
  }
  s.size_ = static_cast<size_t>(st.st_size);
  s.data_ = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    failErrno("mmap of a peer's shared-memory segment");
  }
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    this->~ShmSegment();
    data_ = other.data_;
    size_ = other.size_;
    name_ = std::move(other.name_);
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.owner_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_) munmap(data_, size_);
  if (owner_) shm_unlink(name_.c_str());
  data_ = nullptr;
  owner_ = false;
}

void ShmSegment::unlinkName() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

void removeStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    int pid = 0;
    if (sscanf(e->d_name, "strata-%d-", &pid) != 1 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // creator still alive
    shm_unlink((std::string("/") + e->d_name).c_str());
  }
  closedir(dir);
}

}  // namespace strata
