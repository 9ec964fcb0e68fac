#include "kiln/exec/executor.h"

#include <chrono>
#include <thread>

#include "kiln/ir/structural_hash.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln {

Executor::Executor(Place place, ExecutionOptions options) : options_(std::move(options)) {
  options_.place = place;
  require_place_runs(place);
  unsigned threads = options_.num_threads ? options_.num_threads : std::thread::hardware_concurrency();
  if (threads == 0) threads = 1;
  options_.num_threads = threads;
  if (threads > 1 && options_.thread_plan != ThreadPlan::Sequential)
    queue_ = std::make_shared<WorkQueue>(threads - 1);
}

Executor::~Executor() {
  // acquire: pairs with the release of each run's last access (deliver()).
  while (in_flight_.load(std::memory_order_acquire) != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  last_run_.core.reset();
  lru_.clear();  // cores drop their kid scopes before the scope goes
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch) {
  return run(program, feed, fetch, scope_);
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, StepStats& stats) {
  stats.clear();
  std::shared_ptr<InterpreterCore> core;
  try {
    core = core_for(program, feed, fetch, scope_);
  } catch (const std::exception& e) {
    stats.failed = true;
    stats.error = e.what();
    throw;
  }
  FeedPointers ptrs(feed.size());
  std::size_t k = 0;
  for (const auto& [name, t] : feed) ptrs[k++] = const_cast<Tensor*>(&t);
  std::vector<Tensor> out(fetch.size());
  core->run(ptrs.span(), /*take=*/false, out, nullptr, &stats);
  return out;
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, Scope& scope) {
  std::vector<Tensor> out(fetch.size());
  run(program, feed, fetch, scope, out);
  return out;
}

void Executor::run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                   std::span<Tensor> results) {
  run(program, feed, fetch, scope_, results);
}

void Executor::run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                   Scope& scope, std::span<Tensor> results) {
  std::shared_ptr<InterpreterCore> core = core_for(program, feed, fetch, scope);
  // The core reads the map's tensors in place (names in map order, as the
  // core was built with); not taken: they are only shared into variables.
  FeedPointers ptrs(feed.size());
  std::size_t k = 0;
  for (const auto& [name, t] : feed) ptrs[k++] = const_cast<Tensor*>(&t);
  core->run(ptrs.span(), /*take=*/false, results);
}

std::vector<Tensor> Executor::run(const Program& program, const FeedMap& feed,
                                  const std::vector<FetchTarget>& fetch, const RunOptions& options) {
  std::shared_ptr<InterpreterCore> core = core_for(program, feed, fetch, scope_);
  FeedPointers ptrs(feed.size());
  std::size_t k = 0;
  for (const auto& [name, t] : feed) ptrs[k++] = const_cast<Tensor*>(&t);
  std::vector<Tensor> out(fetch.size());
  core->run(ptrs.span(), /*take=*/false, out, &options);
  return out;
}

void Executor::run_async(const Program& program, const FeedMap& feed,
                         const std::vector<FetchTarget>& fetch, const RunOptions& options,
                         RunDone done) {
  // Relaxed: the run's own hand-offs order it; the destructor's acquire
  // pairs with the release of the decrement.
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<InterpreterCore> core;
  try {
    core = core_for(program, feed, fetch, scope_);
  } catch (...) {
    InterpreterCore::fail_async(queue_ ? *queue_ : shared_async_queue(), std::move(done),
                                std::current_exception(), &in_flight_);
    return;
  }
  // Shared into the run (names in map order, as the core was built with).
  FeedPointers feeds(feed.size());
  std::size_t k = 0;
  for (const auto& [name, t] : feed) feeds[k++] = const_cast<Tensor*>(&t);
  InterpreterCore* c = core.get();
  c->run_async(feeds.span(), options, std::move(done), std::move(core), &in_flight_);
}

std::shared_ptr<InterpreterCore> Executor::core_for(const Program& program, const FeedMap& feed,
                                                    const std::vector<FetchTarget>& fetch, Scope& scope) {
  {
    // The training loop's case: the same request as last time, under a
    // spin lock (a handful of compares; a mutex's lock and unlock cost more).
    std::lock_guard fast(last_lock_);
    if (same_as_last_run(program, feed, fetch, scope)) {
      last_core_ = last_run_.core.get();
      return last_run_.core;
    }
  }
  std::shared_ptr<InterpreterCore> core;
  {
    std::lock_guard lock(mutex_);  // may build a core: waiters sleep
    core = find_or_build_core(program, feed, fetch, scope);
  }
  std::lock_guard fast(last_lock_);
  remember_last_run(program, feed, fetch, scope, core);
  last_core_ = core.get();
  return core;
}

// Under mutex_: the structural hash and value numbering of `program`,
// recomputed when the IR changed since.
const Executor::Memo& Executor::memo_for(const Program& program) {
  Memo& m = memos_[&program];
  const std::uint64_t epoch = ir_epoch();
  if (m.epoch == epoch && m.epoch != 0) return m;
  if (memos_.size() > 64) {  // programs come and go: keep the memo table small
    Memo keep = std::move(m);
    memos_.clear();
    memos_[&program] = std::move(keep);
  }
  Memo& mm = memos_[&program];
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

bool Executor::same_as_last_run(const Program& program, const FeedMap& feed,
                                const std::vector<FetchTarget>& fetch, const Scope& scope) const {
  const LastRun& l = last_run_;
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

void Executor::remember_last_run(const Program& program, const FeedMap& feed,
                                 const std::vector<FetchTarget>& fetch, const Scope& scope,
                                 std::shared_ptr<InterpreterCore> core) {
  LastRun& l = last_run_;
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
std::string Executor::cache_key(const Program& program, const FeedMap& feed,
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

// Under mutex_: the cached core for this request, built on a miss.
std::shared_ptr<InterpreterCore> Executor::find_or_build_core(const Program& program, const FeedMap& feed,
                                                              const std::vector<FetchTarget>& fetch,
                                                              Scope& scope) {
  std::string key = cache_key(program, feed, fetch, scope);
  if (auto it = index_.find(key); it != index_.end()) {
    if (it->second->core->scope_alive()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->core;
    }
    // Built for a scope now gone (this one has its address): build anew.
    lru_.erase(it->second);
    index_.erase(it);
  }
  std::vector<std::string> names;
  for (const auto& [name, t] : feed) names.push_back(name);
  auto made = std::make_shared<InterpreterCore>(program, scope, std::move(names), fetch, options_, queue_);
  ++cores_built_;
  lru_.push_front(Entry{key, made});
  index_[std::move(key)] = lru_.begin();
  while (lru_.size() > std::max<std::size_t>(1, options_.cache_capacity)) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return made;
}

}  // namespace kiln
