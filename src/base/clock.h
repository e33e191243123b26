// Monotonic time and deadlines for every bounded wait.
#pragma once

#include <chrono>
#include <cstdint>

namespace strata {

inline double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A point in time after which a wait gives up.
class Deadline {
 public:
  explicit Deadline(double seconds) : end_(nowSec() + seconds) {}
  bool expired() const { return nowSec() >= end_; }
  // Milliseconds left, at least 0 and at most maxMs.
  int remainingMs(int maxMs = 1 << 30) const {
    double left = (end_ - nowSec()) * 1e3;
    if (left <= 0) return 0;
    return left > maxMs ? maxMs : static_cast<int>(left) + 1;
  }

 private:
  double end_;
};

}  // namespace strata
