#include "base/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>

namespace strata {
namespace {

std::mutex gMutex;
std::map<std::string, std::weak_ptr<Doorbell>>& registry() {
  static std::map<std::string, std::weak_ptr<Doorbell>> r;
  return r;
}

}  // namespace

std::shared_ptr<Doorbell> Doorbell::create() {
  std::shared_ptr<Doorbell> bell(new Doorbell(ShmSegment::create(64)));
  std::lock_guard<std::mutex> lock(gMutex);
  registry()[bell->name()] = bell;
  return bell;
}

Doorbell::~Doorbell() {
  // Each communicator makes a bell and maps its peers': without this the registry
  // grew by one entry per bell for the life of the process (~150 bytes each).
  std::lock_guard<std::mutex> lock(gMutex);
  auto it = registry().find(name());
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

std::shared_ptr<Doorbell> Doorbell::attach(const std::string& name) {
  std::lock_guard<std::mutex> lock(gMutex);
  auto& slot = registry()[name];
  if (auto live = slot.lock()) return live;
  std::shared_ptr<Doorbell> bell(new Doorbell(ShmSegment::open(name)));
  slot = bell;
  return bell;
}

void Doorbell::ring() {
  Word* w = word();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w->sleepers.load(std::memory_order_seq_cst) == 0) return;
  w->seq.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, &w->seq, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

Doorbell::Sleep::Sleep(Doorbell& bell) : bell_(bell) {
  bell_.word()->sleepers.fetch_add(1, std::memory_order_seq_cst);
  seen_ = bell_.word()->seq.load(std::memory_order_seq_cst);
}

Doorbell::Sleep::~Sleep() { bell_.word()->sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void Doorbell::Sleep::wait(int timeoutUs) {
  timespec ts{timeoutUs / 1000000, (timeoutUs % 1000000) * 1000L};
  syscall(SYS_futex, &bell_.word()->seq, FUTEX_WAIT, seen_, &ts, nullptr, 0);
}

}  // namespace strata
