// LocalRendezvous: the in-process table through which one executor's send
// reaches another's recv (seed 003: Rendezvous Send / RecvAsync / StartAbort,
// the channel RunAsync reads inputs from and writes outputs to, and the one a
// group of executors shares so the first failure aborts them all). Values are
// delivered FIFO per RendezvousKey; a send never blocks; a receive calls back
// as soon as a value is there — inline when one is already queued.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kiln/runtime/callback.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/dialect/rendezvous_key.h"
#include "kiln/runtime/small_queue.h"
#include "kiln/runtime/tensor.h"
#include "kiln/support/data_type.h"
#include "kiln/support/error.h"

namespace kiln {

// What travels through a rendezvous: a tensor, and whether it is dead (seed
// 003's dead tensors: the untaken branch of a dataflow switch, whose tensor
// may be uninitialized).
struct RendezvousValue {
  Tensor tensor;
  bool is_dead = false;
};

// A receive's continuation: `error` is null and `value` the value sent, or
// `error` says why there is none (Cancelled, or the abort's error) and
// `value` is empty. It may run on the receiving thread (a value was queued),
// the sending thread, the cancelling thread or the aborting thread, and must
// not throw.
using RecvCallback = Callback<void(const Error* error, RendezvousValue&& value)>;

class LocalRendezvous {
 public:
  LocalRendezvous();
  // Receives still pending get ErrorKind::Cancelled ("destroyed"); values
  // never received are dropped.
  ~LocalRendezvous();
  LocalRendezvous(const LocalRendezvous&) = delete;
  LocalRendezvous& operator=(const LocalRendezvous&) = delete;

  // Hands `value` to the oldest receive waiting on `key` (its callback runs
  // on this thread, after the lock is released), or queues it. Never blocks.
  // After abort(), throws the abort's error.
  void send(const RendezvousKey& key, RendezvousValue value);
  void send(const RendezvousKey& key, Tensor tensor, bool is_dead = false) {
    send(key, RendezvousValue{std::move(tensor), is_dead});
  }

  // Calls `done` with the oldest value queued on `key`, at once and on this
  // thread when there is one, else when a send delivers it. With
  // `cancellation`, cancelling it removes this receive and calls `done` with
  // ErrorKind::Cancelled (at once when it is already cancelled); a value sent
  // later goes to the next receive. After abort(), calls `done` with the
  // abort's error.
  void recv_async(const RendezvousKey& key, RecvCallback done,
                  CancellationManager* cancellation = nullptr);

  // Blocks until a value arrives on `key`. Throws the error recv_async would
  // pass (Cancelled, or the abort's).
  RendezvousValue recv(const RendezvousKey& key, CancellationManager* cancellation = nullptr);
  // Like recv(key), then checks a live value's dtype: kiln::Error
  // (InvalidArgument) naming the key, the expected and the received dtype.
  RendezvousValue recv(const RendezvousKey& key, DataType expected,
                       CancellationManager* cancellation = nullptr);

  // Fails the rendezvous with `error` (sticky; the first abort wins): every
  // pending receive is called with it, queued values are dropped, and every
  // later send or receive fails with it.
  void abort(const Error& error);
  bool is_aborted() const noexcept;

 private:
  struct Waiter {
    RecvCallback done;
    CancellationManager* cancellation = nullptr;
    CancellationToken token = kNoCancellationToken;
    std::uint64_t id = 0;
  };
  // One key's FIFO: values sent and not yet received, or receives waiting for
  // a value — never both at once.
  struct Entry {
    explicit Entry(const RendezvousKey& k) : key(k) {}
    bool idle() const noexcept { return values.empty() && waiters.empty(); }
    RendezvousKey key;
    SmallQueue<RendezvousValue, 1> values;
    SmallQueue<Waiter, 1> waiters;
  };
  // Keyed by the key's hash (the cancellation callback finds its waiter by
  // hash and id); a second key with the same 64-bit hash is an Internal error.
  using Table = std::unordered_map<std::uint64_t, Entry>;
  // Idle entries stay (a key used every step costs no allocation) until a
  // shard holds more than this many and more idle than busy ones; then the
  // idle ones are erased (keys of loop iterations do not pile up).
  static constexpr std::size_t kSweepIdleAt = 64;
  static constexpr std::size_t kShards = 16;

  struct alignas(64) Shard {
    std::mutex mutex;
    Table table;                  // guarded by mutex
    std::size_t idle = 0;         // idle entries in table, guarded by mutex
    std::uint64_t next_id = 0;    // waiter ids, guarded by mutex
    bool aborted = false;         // guarded by mutex; set once by abort()
  };

  Shard& shard_for(std::uint64_t hash) noexcept { return shards_[(hash >> 59) & (kShards - 1)]; }
  // Finds or creates key's entry. Caller holds s.mutex.
  Entry& entry_for(Shard& s, const RendezvousKey& key);
  // Call after taking the last item of e (caller holds s.mutex); e may be
  // erased.
  void became_idle(Shard& s) noexcept;
  void cancel_waiter(std::uint64_t hash, std::uint64_t id) noexcept;
  // Under s.mutex: takes the oldest value on key into `out` when there is one.
  bool try_take(Shard& s, const RendezvousKey& key, RendezvousValue& out);

  std::array<Shard, kShards> shards_;
  std::mutex abort_mutex_;
  // Set once by abort(), before any shard is marked aborted; read after
  // seeing a shard's `aborted` under that shard's mutex, or under abort_mutex_.
  std::unique_ptr<const Error> abort_error_;
  // Set by abort() after abort_error_; for is_aborted() only.
  std::atomic<bool> aborted_{false};
};

// ---------------------------------------------------------------------------

inline bool LocalRendezvous::is_aborted() const noexcept {
  // acquire: pairs with abort()'s release store, so abort_error_ is visible to
  // a caller that sees true (send / recv read it under a shard's mutex).
  return aborted_.load(std::memory_order_acquire);
}

}  // namespace kiln
