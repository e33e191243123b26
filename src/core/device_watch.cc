#include "core/device_watch.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace strata::core {
namespace {

// One per process. A forked child makes its own (the parent's thread is not in the
// child, and its lock may have been held at the fork), leaving the parent's untouched.
struct Watch {
  explicit Watch(pid_t p) : pid(p) {}
  pid_t pid;
  std::mutex mutex;
  std::condition_variable wake;
  struct Entry {
    DeviceWatched w;
    bool stopped = false;
  };
  std::map<uint64_t, Entry> watched;
  uint64_t nextId = 0;
  bool running = false;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      for (auto& [id, e] : watched) {
        if (e.stopped) continue;
        int peer = e.w.exitedPeer();
        if (peer < 0) continue;
        e.stopped = true;
        e.w.stop(peer);
      }
    }
  }
};

Watch& watch() {
  static std::atomic<Watch*> current{nullptr};
  Watch* w = current.load(std::memory_order_acquire);
  pid_t pid = getpid();
  while (!w || w->pid != pid) {
    Watch* fresh = new Watch(pid);  // lives as long as the process: its thread never ends
    if (current.compare_exchange_strong(w, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread of this process made it first
  }
  return *w;
}

}  // namespace

std::shared_ptr<void> watchDevicePeers(DeviceWatched w) {
  Watch& s = watch();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    id = s.nextId++;
    s.watched.emplace(id, Watch::Entry{std::move(w)});
    if (!s.running) {
      s.running = true;
      std::thread([&s] { s.run(); }).detach();
    }
  }
  return std::shared_ptr<void>(reinterpret_cast<void*>(id + 1), [&s, id](void*) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.watched.erase(id);
  });
}

}  // namespace strata::core
