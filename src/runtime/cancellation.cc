#include "kiln/runtime/cancellation.h"

#include <utility>

namespace kiln {

CancellationToken CancellationManager::register_callback(Task callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  // relaxed: cancelled_ is only written under mutex_, which we hold.
  if (cancelled_.load(std::memory_order_relaxed)) return kNoCancellationToken;
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  slot.callback = std::move(callback);
  return make_token(index, slot.generation);
}

bool CancellationManager::deregister_callback(CancellationToken token) {
  if (token == kNoCancellationToken) return false;
  const auto index = static_cast<std::uint32_t>(token);
  const auto generation = static_cast<std::uint32_t>(token >> 32);
  Task dropped;  // destroyed after the lock is released
  std::unique_lock<std::mutex> lock(mutex_);
  if (index < slots_.size() && slots_[index].generation == generation && slots_[index].callback) {
    Slot& slot = slots_[index];
    dropped = std::move(slot.callback);
    if (++slot.generation == 0) slot.generation = 1;
    free_.push_back(index);
    return true;
  }
  // Not registered any more: it ran, is running, or was deregistered. Wait
  // for a cancellation in progress unless this is the cancelling thread
  // (a callback deregistering another would wait for itself).
  if (cancelled_.load(std::memory_order_relaxed) &&
      cancelling_thread_ != std::this_thread::get_id()) {
    done_cv_.wait(lock, [this] { return callbacks_done_; });
  }
  return false;
}

void CancellationManager::start_cancel() noexcept {
  std::vector<Task> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // relaxed: read under mutex_, where every write happens.
    if (cancelled_.load(std::memory_order_relaxed)) return;
    // release: see is_cancelled().
    cancelled_.store(true, std::memory_order_release);
    cancelling_thread_ = std::this_thread::get_id();
    callbacks.reserve(slots_.size() - free_.size());
    for (Slot& slot : slots_) {
      if (slot.callback) callbacks.push_back(std::move(slot.callback));
    }
    slots_.clear();
    free_.clear();
  }
  for (Task& callback : callbacks) callback();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callbacks_done_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace kiln
