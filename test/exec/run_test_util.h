// Helpers for the tests of asynchronous runs and rendezvous programs: a
// RunDone that records what it got (and how often) for the test to wait on,
// and small tensor helpers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kiln/exec/run_options.h"
#include "kiln/runtime/tensor.h"
#include "kiln/support/error.h"

namespace kiln_exec_test {

// What one asynchronous run's `done` saw.
class DoneRecord {
 public:
  kiln::RunDone callback() {
    return [this](const kiln::Error* error, std::vector<kiln::Tensor>&& fetched) {
      std::lock_guard lock(mutex_);
      if (error) error_.emplace(*error);
      fetched_ = std::move(fetched);
      thread_ = std::this_thread::get_id();
      ++calls_;
      cv_.notify_all();  // under the lock: the record may go once it is released
    };
  }
  // Waits (at most `limit`) for the first call; false when none came.
  bool wait(std::chrono::milliseconds limit = std::chrono::milliseconds(20000)) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [this] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  bool done() { return calls() > 0; }
  const std::optional<kiln::Error>& error() const { return error_; }
  const std::vector<kiln::Tensor>& fetched() const { return fetched_; }
  std::thread::id thread() const { return thread_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int calls_ = 0;
  std::optional<kiln::Error> error_;
  std::vector<kiln::Tensor> fetched_;
  std::thread::id thread_;
};

inline kiln::Tensor scalar_f32(float v) { return kiln::Tensor::from_vector<float>(kiln::Dims({1}), {v}); }
inline float value_f32(const kiln::Tensor& t) { return t.to_vector<float>().at(0); }

}  // namespace kiln_exec_test
