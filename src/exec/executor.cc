#include "kiln/exec/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/work_queue.h"
#include "kiln/ir/program.h"
#include "kiln/ir/region.h"
#include "kiln/ir/structural_hash.h"
#include "kiln/runtime/scope.h"
#include "kiln/runtime/spin_lock.h"
#include "step_abort.h"

namespace kiln {

struct Executor::State {
  // Under mutex: the structural hash and value numbering of `program`,
  // recomputed when the IR changed since.
  struct Memo {
    std::uint64_t epoch = 0;
    std::uint64_t hash = 0;
    std::unordered_map<const detail::ValueImpl*, std::uint32_t> value_ids;
  };
  // A cached core and its key.
  struct Entry {
    std::string key;
    std::shared_ptr<InterpreterCore> core;  // a run in progress keeps its core alive
  };
  // The last run's request: a training loop repeats it, so it is checked
  // before the cache key is built (no string, no hashing, no look-up).
  struct LastRun {
    const Program* program = nullptr;
    std::uint64_t epoch = 0;
    const Scope* scope = nullptr;
    std::vector<std::string> feed_names;
    std::vector<const void*> fetch_values;  // ValueImpl*, null for names
    std::vector<std::string> fetch_names;
    std::shared_ptr<InterpreterCore> core;
  };

  explicit State(ExecutionOptions o) : options(std::move(o)) {}

  std::shared_ptr<InterpreterCore> core_for(const Program& program, const FeedMap& feed,
                                            const std::vector<FetchTarget>& fetch, Scope& scope);
  const Memo& memo_for(const Program& program);
  std::shared_ptr<InterpreterCore> find_or_build_core(const Program& program, const FeedMap& feed,
                                                      const std::vector<FetchTarget>& fetch, Scope& scope);
  std::string cache_key(const Program& program, const FeedMap& feed,
                        const std::vector<FetchTarget>& fetch, const Scope& scope);
  bool same_as_last_run(const Program& program, const FeedMap& feed,
                        const std::vector<FetchTarget>& fetch, const Scope& scope) const;
  void remember_last_run(const Program& program, const FeedMap& feed,
                         const std::vector<FetchTarget>& fetch, const Scope& scope,
                         std::shared_ptr<InterpreterCore> core);
  // Every synchronous run: the core for the request, the map's tensors read
  // in place (names in map order, as the core was built with; not taken:
  // they are only shared into variables).
  void run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
           Scope& scope, std::span<Tensor> results, const RunOptions* run_options,
           StepStats* stats);

  ExecutionOptions options;
  Scope scope;
  std::shared_ptr<WorkQueue> queue;
  std::unordered_map<const Program*, Memo> memos;
  std::list<Entry> lru;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;
  InterpreterCore* last_core = nullptr;
  LastRun last_run;
  std::size_t cores_built = 0;
  std::atomic<std::int64_t> in_flight{0};  // asynchronous runs not yet done
  std::atomic<std::uint64_t> evictions{0};  // evict() calls; bumped under mutex
  std::mutex mutex;     // guards memos, lru, index, cores_built
  SpinLock last_lock;   // guards last_run, last_core
};

namespace {

// The map's tensors, in map order (the order the core was built with).
void point_at(FeedPointers& ptrs, const FeedMap& feed) {
  std::size_t k = 0;
  for (const auto& [name, t] : feed) ptrs[k++] = const_cast<Tensor*>(&t);
}

}  // namespace

Executor::Executor() : Executor(Place::cpu(), ExecutionOptions{}) {}

Executor::Executor(Place place, ExecutionOptions options)
    : state_(std::make_unique<State>(std::move(options))) {
  ExecutionOptions& o = state_->options;
  o.place = place;
  require_place_runs(place);
  unsigned threads = o.num_threads ? o.num_threads : std::thread::hardware_concurrency();
  if (threads == 0) threads = 1;
  o.num_threads = threads;
  if (threads > 1 && o.thread_plan != ThreadPlan::Sequential)
    state_->queue = std::make_shared<WorkQueue>(threads - 1);
}

Executor::~Executor() {
  // acquire: pairs with the release of each run's last access (deliver()).
  while (state_->in_flight.load(std::memory_order_acquire) != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  state_->last_run.core.reset();
  state_->lru.clear();  // cores drop their kid scopes before the scope goes
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch) {
  std::vector<Tensor> out(fetch.size());
  state_->run(program, feed, fetch, state_->scope, out, nullptr, nullptr);
  return out;
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, StepStats& stats) {
  std::vector<Tensor> out(fetch.size());
  state_->run(program, feed, fetch, state_->scope, out, nullptr, &stats);
  return out;
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, Scope& scope) {
  std::vector<Tensor> out(fetch.size());
  state_->run(program, feed, fetch, scope, out, nullptr, nullptr);
  return out;
}

void Executor::run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                   std::span<Tensor> results) {
  state_->run(program, feed, fetch, state_->scope, results, nullptr, nullptr);
}

void Executor::run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                   Scope& scope, std::span<Tensor> results) {
  state_->run(program, feed, fetch, scope, results, nullptr, nullptr);
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, const RunOptions& options) {
  std::vector<Tensor> out(fetch.size());
  state_->run(program, feed, fetch, state_->scope, out, &options, nullptr);
  return out;
}

void Executor::State::run(const Program& program, const FeedMap& feed,
                          const std::vector<FetchTarget>& fetch, Scope& in_scope,
                          std::span<Tensor> results, const RunOptions* run_options,
                          StepStats* stats) {
  std::shared_ptr<InterpreterCore> core;
  if (stats) stats->clear();
  try {
    core = core_for(program, feed, fetch, in_scope);
  } catch (const std::exception& e) {
    if (stats) {
      stats->failed = true;
      stats->error = e.what();
    }
    if (run_options && run_options->rendezvous)
      abort_step(*run_options->rendezvous, run_options->step_id, "building a run's plan", std::current_exception());
    throw;
  }
  FeedPointers ptrs(feed.size());
  point_at(ptrs, feed);
  core->run(ptrs.span(), /*take=*/false, results, run_options, stats);
}

void Executor::run_async(const Program& program, const FeedMap& feed,
                         const std::vector<FetchTarget>& fetch, const RunOptions& options,
                         RunDone done) {
  State& s = *state_;
  // Relaxed: the run's own hand-offs order it; the destructor's acquire
  // pairs with the release of the decrement.
  s.in_flight.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<InterpreterCore> core;
  try {
    core = s.core_for(program, feed, fetch, s.scope);
  } catch (...) {
    if (options.rendezvous)
      abort_step(*options.rendezvous, options.step_id, "building a run's plan", std::current_exception());
    InterpreterCore::fail_async(s.queue ? *s.queue : shared_async_queue(), std::move(done),
                                std::current_exception(), &s.in_flight);
    return;
  }
  // Shared into the run, not taken.
  FeedPointers feeds(feed.size());
  point_at(feeds, feed);
  InterpreterCore* c = core.get();
  c->run_async(feeds.span(), options, std::move(done), std::move(core), &s.in_flight);
}

std::int64_t Executor::runs_in_flight() const {
  return state_->in_flight.load(std::memory_order_acquire);
}
Scope& Executor::scope() { return state_->scope; }
Place Executor::place() const { return state_->options.place; }
const ExecutionOptions& Executor::options() const { return state_->options; }
InterpreterCore* Executor::last_core() const { return state_->last_core; }
std::size_t Executor::num_cores_built() const { return state_->cores_built; }
std::size_t Executor::cache_size() const { return state_->lru.size(); }

void Executor::evict(const Program& program) {
  std::vector<std::shared_ptr<InterpreterCore>> dropped;  // destroyed after the locks
  {
    std::lock_guard lock(state_->mutex);
    const std::uint64_t hash = state_->memo_for(program).hash;
    const std::string_view prefix(reinterpret_cast<const char*>(&hash), sizeof hash);
    for (auto it = state_->lru.begin(); it != state_->lru.end();) {
      if (!it->key.starts_with(prefix)) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(it->core));
      state_->index.erase(it->key);
      it = state_->lru.erase(it);
    }
    state_->memos.erase(&program);
    state_->evictions.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard fast(state_->last_lock);
  const auto& last = state_->last_run;
  if (last.program == &program || std::find(dropped.begin(), dropped.end(), last.core) != dropped.end()) {
    dropped.push_back(std::move(state_->last_run.core));
    state_->last_run = {};
  }
  for (const auto& core : dropped)
    if (state_->last_core == core.get()) state_->last_core = nullptr;
}
const std::shared_ptr<WorkQueue>& Executor::work_queue() const { return state_->queue; }

std::shared_ptr<InterpreterCore> Executor::State::core_for(const Program& program, const FeedMap& feed,
                                                    const std::vector<FetchTarget>& fetch, Scope& scope) {
  {
    // The training loop's case: the same request as last time, under a
    // spin lock (a handful of compares; a mutex's lock and unlock cost more).
    std::lock_guard fast(last_lock);
    if (same_as_last_run(program, feed, fetch, scope)) {
      last_core = last_run.core.get();
      return last_run.core;
    }
  }
  std::shared_ptr<InterpreterCore> core;
  std::uint64_t evicted;
  {
    std::lock_guard lock(mutex);  // may build a core: waiters sleep
    core = find_or_build_core(program, feed, fetch, scope);
    evicted = evictions.load(std::memory_order_relaxed);
  }
  std::lock_guard fast(last_lock);
  // An evict() since the look-up may have dropped this core: not remembered.
  if (evicted == evictions.load(std::memory_order_relaxed))
    remember_last_run(program, feed, fetch, scope, core);
  last_core = core.get();
  return core;
}

// Under mutex: the structural hash and value numbering of `program`,
// recomputed when the IR changed since.
const Executor::State::Memo& Executor::State::memo_for(const Program& program) {
  Memo& m = memos[&program];
  const std::uint64_t epoch = ir_epoch();
  if (m.epoch == epoch && m.epoch != 0) return m;
  if (memos.size() > 64) {  // programs come and go: keep the memo table small
    Memo keep = std::move(m);
    memos.clear();
    memos[&program] = std::move(keep);
  }
  Memo& mm = memos[&program];
  mm.hash = structural_hash(program);
  mm.value_ids.clear();
  std::uint32_t id = 0;
  auto number = [&](auto& self, const Block& b) -> void {
    for (std::uint32_t a = 0; a < b.num_arguments(); ++a) mm.value_ids[b.argument(a).impl()] = id++;
    for (Operation* op : b) {
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (Block* inner : op->region(r)) self(self, *inner);
      for (std::uint32_t i = 0; i < op->num_results(); ++i) mm.value_ids[op->result(i).impl()] = id++;
    }
  };
  number(number, program.block());
  mm.epoch = ir_epoch();  // hashing itself does not change the IR
  return mm;
}

bool Executor::State::same_as_last_run(const Program& program, const FeedMap& feed,
                                const std::vector<FetchTarget>& fetch, const Scope& scope) const {
  const LastRun& l = last_run;
  if (!l.core || l.program != &program || l.scope != &scope || l.epoch != ir_epoch() || !l.core->scope_alive() ||
      l.feed_names.size() != feed.size() || l.fetch_values.size() != fetch.size())
    return false;
  std::size_t k = 0;
  for (const auto& [name, t] : feed)
    if (l.feed_names[k++] != name) return false;
  for (k = 0; k < fetch.size(); ++k) {
    if (l.fetch_values[k] != static_cast<const void*>(fetch[k].value.impl())) return false;
    if (!fetch[k].value && l.fetch_names[k] != fetch[k].name) return false;
  }
  return true;
}

void Executor::State::remember_last_run(const Program& program, const FeedMap& feed,
                                 const std::vector<FetchTarget>& fetch, const Scope& scope,
                                 std::shared_ptr<InterpreterCore> core) {
  LastRun& l = last_run;
  l.program = &program;
  l.scope = &scope;
  l.epoch = ir_epoch();
  l.feed_names.clear();
  for (const auto& [name, t] : feed) l.feed_names.push_back(name);
  l.fetch_values.clear();
  l.fetch_names.clear();
  for (const auto& f : fetch) {
    l.fetch_values.push_back(f.value.impl());
    l.fetch_names.push_back(f.value ? std::string() : f.name);
  }
  l.core = std::move(core);
}

// (structural hash, scope, feed names, fetch targets by value number or name).
std::string Executor::State::cache_key(const Program& program, const FeedMap& feed,
                                const std::vector<FetchTarget>& fetch, const Scope& scope) {
  const Memo& memo = memo_for(program);
  std::string key;
  key.reserve(64);
  key.append(reinterpret_cast<const char*>(&memo.hash), sizeof memo.hash);
  const Scope* sp = &scope;
  key.append(reinterpret_cast<const char*>(&sp), sizeof sp);
  for (const auto& [name, t] : feed) {
    key += "\x01";
    key += name;
  }
  for (const auto& f : fetch) {
    if (f.value) {
      auto it = memo.value_ids.find(f.value.impl());
      if (it == memo.value_ids.end())
        throw_error(ErrorKind::InvalidArgument, "a fetch target is a value that is not in this program");
      key += "\x02%";
      key += std::to_string(it->second);
    } else {
      key += "\x03";
      key += f.name;
    }
  }
  return key;
}

// Under mutex: the cached core for this request, built on a miss.
std::shared_ptr<InterpreterCore> Executor::State::find_or_build_core(const Program& program, const FeedMap& feed,
                                                              const std::vector<FetchTarget>& fetch,
                                                              Scope& scope) {
  std::string key = cache_key(program, feed, fetch, scope);
  if (auto it = index.find(key); it != index.end()) {
    if (it->second->core->scope_alive()) {
      lru.splice(lru.begin(), lru, it->second);
      return it->second->core;
    }
    // Built for a scope now gone (this one has its address): build anew.
    lru.erase(it->second);
    index.erase(it);
  }
  std::vector<std::string> names;
  for (const auto& [name, t] : feed) names.push_back(name);
  auto made = std::make_shared<InterpreterCore>(program, scope, std::move(names), fetch, options, queue);
  ++cores_built;
  lru.push_front(Entry{key, made});
  index[std::move(key)] = lru.begin();
  while (lru.size() > std::max<std::size_t>(1, options.cache_capacity)) {
    index.erase(lru.back().key);
    lru.pop_back();
  }
  return made;
}

}  // namespace kiln
