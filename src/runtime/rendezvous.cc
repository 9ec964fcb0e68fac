#include "kiln/runtime/rendezvous.h"

#include <condition_variable>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

LocalRendezvous::LocalRendezvous() = default;

LocalRendezvous::~LocalRendezvous() {
  bool pending = false;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto& [hash, entry] : s.table) pending = pending || !entry.waiters.empty();
  }
  // Wakes the receives and takes their cancellation callbacks (which point
  // at this rendezvous) off their managers.
  if (pending)
    abort(make_error(ErrorKind::Cancelled, "the rendezvous was destroyed with receives pending"));
}

LocalRendezvous::Entry& LocalRendezvous::entry_for(Shard& s, const RendezvousKey& key) {
  auto it = s.table.find(key.hash());
  if (it == s.table.end()) {
    it = s.table.try_emplace(key.hash(), key).first;
    ++s.idle;
    return it->second;
  }
  if (!(it->second.key == key))
    throw_error(ErrorKind::Internal, "rendezvous keys '", key.to_string(), "' and '",
                it->second.key.to_string(), "' have the same 64-bit hash");
  return it->second;
}

void LocalRendezvous::became_idle(Shard& s) noexcept {
  if (++s.idle <= kSweepIdleAt || s.idle * 2 <= s.table.size()) return;
  std::erase_if(s.table, [](const auto& item) { return item.second.idle(); });
  s.idle = 0;
}

bool LocalRendezvous::try_take(Shard& s, const RendezvousKey& key, RendezvousValue& out) {
  auto it = s.table.find(key.hash());
  // A key colliding with another one falls through to entry_for's error.
  if (it == s.table.end() || it->second.values.empty() || !(it->second.key == key)) return false;
  Entry& e = it->second;
  out = std::move(e.values.front());
  e.values.pop_front();
  if (e.idle()) became_idle(s);
  return true;
}

void LocalRendezvous::send(const RendezvousKey& key, RendezvousValue value) {
  Shard& s = shard_for(key.hash());
  Waiter w;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.aborted) {
      lock.unlock();
      throw Error(*abort_error_);
    }
    Entry& e = entry_for(s, key);
    if (e.waiters.empty()) {
      if (e.values.empty()) --s.idle;
      e.values.push_back(std::move(value));
      return;
    }
    w = std::move(e.waiters.front());
    e.waiters.pop_front();
    if (e.idle()) became_idle(s);
  }
  // Taken off the queue under the lock, so a racing cancellation callback
  // finds nothing: the value is this waiter's. deregister_callback is called
  // unlocked (it may wait for that callback, which takes the shard's lock).
  if (w.cancellation) w.cancellation->deregister_callback(w.token);
  w.done(nullptr, std::move(value));
}

void LocalRendezvous::recv_async(const RendezvousKey& key, RecvCallback done,
                                 CancellationManager* cancellation) {
  Shard& s = shard_for(key.hash());
  RendezvousValue value;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.aborted) {
      lock.unlock();
      done(abort_error_.get(), RendezvousValue{});
      return;
    }
    if (!try_take(s, key, value)) {
      Entry& e = entry_for(s, key);
      Waiter w{std::move(done), cancellation, kNoCancellationToken, ++s.next_id};
      if (cancellation) {
        // Registered under the shard's lock, so the callback (which takes
        // it) cannot look for the waiter before it is queued. Lock order:
        // shard, then the manager's; callbacks run without the manager's.
        w.token = cancellation->register_callback(
            [this, hash = key.hash(), id = w.id] { cancel_waiter(hash, id); });
        if (w.token == kNoCancellationToken) {
          lock.unlock();
          const Error error = make_error(ErrorKind::Cancelled, "rendezvous recv of '",
                                         key.to_string(), "' was cancelled");
          w.done(&error, RendezvousValue{});
          return;
        }
      }
      if (e.waiters.empty()) --s.idle;
      e.waiters.push_back(std::move(w));
      return;
    }
  }
  done(nullptr, std::move(value));
}

void LocalRendezvous::cancel_waiter(std::uint64_t hash, std::uint64_t id) noexcept {
  Shard& s = shard_for(hash);
  Waiter w;
  std::string key_text;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.table.find(hash);
    if (it == s.table.end()) return;
    Entry& e = it->second;
    // Absent when a send or an abort took it first.
    if (!e.waiters.remove_first_if([id](const Waiter& x) { return x.id == id; }, w)) return;
    key_text = e.key.to_string();
    if (e.idle()) became_idle(s);
  }
  const Error error =
      make_error(ErrorKind::Cancelled, "rendezvous recv of '", key_text, "' was cancelled");
  w.done(&error, RendezvousValue{});
}

RendezvousValue LocalRendezvous::recv(const RendezvousKey& key,
                                      CancellationManager* cancellation) {
  {
    // Fast path: a value is queued; no callback, no wait.
    Shard& s = shard_for(key.hash());
    std::lock_guard<std::mutex> lock(s.mutex);
    RendezvousValue value;
    if (!s.aborted && try_take(s, key, value)) return value;
  }
  struct Sync {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;  // guarded by mutex
    std::optional<Error> error;
    RendezvousValue value;
  } sync;
  recv_async(
      key,
      [&sync](const Error* error, RendezvousValue&& value) {
        std::lock_guard<std::mutex> lock(sync.mutex);
        if (error) {
          sync.error.emplace(*error);
        } else {
          sync.value = std::move(value);
        }
        sync.done = true;
        // Notified under the lock: once it is released the waiter may
        // return and destroy `sync`.
        sync.cv.notify_one();
      },
      cancellation);
  std::unique_lock<std::mutex> lock(sync.mutex);
  sync.cv.wait(lock, [&sync] { return sync.done; });
  if (sync.error) throw Error(*sync.error);
  return std::move(sync.value);
}

RendezvousValue LocalRendezvous::recv(const RendezvousKey& key, DataType expected,
                                      CancellationManager* cancellation) {
  RendezvousValue value = recv(key, cancellation);
  if (!value.is_dead && value.tensor.dtype() != expected)
    throw_error(ErrorKind::InvalidArgument, "rendezvous key '", key.to_string(),
                "': expected dtype ", to_string(expected), ", received ",
                to_string(value.tensor.dtype()), " (", value.tensor.type_string(), ")");
  return value;
}

void LocalRendezvous::abort(const Error& error) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (abort_error_) return;
    abort_error_ = std::make_unique<const Error>(error);
  }
  // release: see is_aborted().
  aborted_.store(true, std::memory_order_release);
  for (Shard& s : shards_) {
    std::vector<Waiter> waiters;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.aborted = true;
      for (auto& [hash, entry] : s.table)
        entry.waiters.drain([&waiters](Waiter&& w) { waiters.push_back(std::move(w)); });
      s.table.clear();
      s.idle = 0;
    }
    for (Waiter& w : waiters) {
      if (w.cancellation) w.cancellation->deregister_callback(w.token);
      w.done(abort_error_.get(), RendezvousValue{});
    }
  }
}

}  // namespace kiln
