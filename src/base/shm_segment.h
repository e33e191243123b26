// POSIX shared memory segments, named so that leftovers of dead processes can be found and removed.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

// A mapped POSIX shared-memory object. The creator unlinks the name when it
// is destroyed; mappings held by other processes stay valid until they unmap.
class ShmSegment {
 public:
  // Creates a new zero-filled segment named "/strata-<pid>-<n>" and pre-faults it.
  static ShmSegment create(size_t bytes);
  // Maps an existing segment by name.
  static ShmSegment open(const std::string& name);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name now (the memory lives on while mapped).
  void unlinkName();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
};

// Unlinks /dev/shm/strata-<pid>-* segments whose creating process no longer exists.
void removeStaleSegments();

}  // namespace strata
