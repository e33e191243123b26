// The stream helpers of emu_wire.h.
#include "emu_wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

namespace verbs_emu {

// Stores in ascending address order, as PCIe posted writes land: a reader that
// polls the last word of a small write sees the words before it.
// A small write of whole aligned words (a FIFO entry) ends with a release store of
// its last word, so an acquire load of that word sees the rest.
void landAscending(char* dst, const char* src, size_t n) {
  bool words = n >= 8 && n <= 256 && n % 8 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0;
  if (words) {
    auto* d = reinterpret_cast<uint64_t*>(dst);
    for (size_t i = 0; i < n / 8; ++i) {
      uint64_t w;
      memcpy(&w, src + 8 * i, 8);
      __atomic_store_n(d + i, w, i + 1 == n / 8 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
    }
    return;
  }
  __atomic_thread_fence(__ATOMIC_RELEASE);
  if (n > 256) {
    memcpy(dst, src, n);
  } else {
    for (size_t i = 0; i < n; ++i) __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
  }
}

namespace {

constexpr size_t kMaxHeld = 64u << 20;  // more held in one region lands at once, as hardware's would by then

bool holdDeviceWrites() {
  const char* v = getenv("STRATA_VERBS_EMU_DEVICE_WRITES");
  return !v || strcmp(v, "visible") != 0;
}

}  // namespace

void landInto(Mr* m, uint64_t addr, const char* src, size_t n) {
  if (n == 0) return;
  if (!m->host || !holdDeviceWrites()) {
    landAscending(m->at(addr), src, n);
    return;
  }
  State& s = state();
  s.held.emplace_back(m->at(addr), std::string(src, n));
  s.heldBytes += n + 64;  // and the entry's own cost
  if (s.heldBytes > kMaxHeld) settle(m);
}

void settle(Mr* m) {
  State& s = state();
  if (!m->host || s.held.empty()) return;
  for (const auto& [dst, bytes] : s.held) landAscending(dst, bytes.data(), bytes.size());
  s.held.clear();
  s.heldBytes = 0;
}

Mr* findRemote(ibv_pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int access) {
  Mr* m = findLocal(pd, rkey ^ kRkeyBit, addr, len);
  return m && m->mr.rkey == rkey && (m->access & access) ? m : nullptr;
}

// Writes what it can without blocking; false when the stream is broken.
bool flushOut(int fd, std::string* out) {
  while (!out->empty()) {
    ssize_t n = send(fd, out->data(), out->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out->erase(0, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

// Reads what is there (up to `cap` buffered); false on end of stream or error.
bool fillIn(int fd, std::string* in, size_t cap) {
  char buf[1 << 16];
  while (in->size() < cap) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in->append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace verbs_emu
