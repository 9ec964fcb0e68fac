#include "kiln/exec/interpreter_core.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <shared_mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/dependency_builder.h"
#include "kiln/kernel/blas.h"
#include "kiln/ir/printer.h"

namespace kiln {

namespace {
constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// Counts c down by one; true when it reached 0. With `solo` (one thread
// touches every counter this run) a relaxed load and store suffice and skip
// the locked RMW; otherwise acq_rel: the thread that reaches 0 sees the
// writes of every thread that counted down before it.
[[gnu::always_inline]] inline bool count_down(std::atomic<std::int32_t>& c, bool solo) {
  if (solo) {
    const std::int32_t v = c.load(std::memory_order_relaxed) - 1;
    c.store(v, std::memory_order_relaxed);
    return v == 0;
  }
  return c.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

// See InterpreterCore::run: who may change or rely on BLAS's thread count.
std::shared_mutex g_blas_mutex;
std::mutex g_blas_set_mutex;
std::atomic<bool> g_blas_plan_used{false};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- kernels of the instructions the core makes itself ----

struct CopyFlags {
  bool deep = false;
};

// Output 0 takes input 0's tensor: shared, or copied when `deep`.
void share_or_copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const auto* flags = static_cast<const CopyFlags*>(ctx.attrs_ptr());
  Tensor& out = ctx.output(0);
  out = flags && flags->deep ? in.clone() : in;
}

// Output 0 = input 0 copied to the context's place (host places share memory).
void transfer_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, in.dims(), in.dtype());
  if (in.bytes()) std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
}
}  // namespace

struct InterpreterCore::Impl {
  Program program;  // the core's own copy: a cached core outlives the caller's program
  std::unordered_map<const detail::ValueImpl*, std::uint32_t> value_slot;   // clone values
  std::unordered_map<const detail::ValueImpl*, std::uint32_t> source_ids;   // caller's values → id
  std::vector<Value> clone_values;                                          // by id

  struct Meta {
    std::string name;
    std::uint32_t op_index = kNone;
    std::vector<std::uint32_t> reads, writes;
    std::uint8_t order = kOrderNone;
    Lane lane = Lane::host();
    Operation* op = nullptr;
  };
  std::vector<Meta> meta;
  // Storage the kernel contexts point into: stable for the core's lifetime.
  std::vector<std::unique_ptr<Variable*[]>> io_arrays;
  std::vector<std::shared_ptr<const void>> attrs;

  struct SlotInfo {
    Place place = Place::cpu();
    std::uint32_t alias = 0;  // dependency variable (views share their source's)
    bool persistent = false;  // parameter, feed, fetch result: never freed
    bool parameter = false;   // in the root scope by name; in-place updates are wanted
    std::uint32_t fetch_reads = 0;
  };
  std::vector<SlotInfo> slots;
  std::vector<std::unique_ptr<Variable>> owned_vars;  // fetch results
  // Temporaries, contiguous in chunks: the run path walks them in program
  // order, so locality matters more than names (a kid scope's hash map
  // scatters them; feeds stay in the kid scope by name).
  std::vector<std::unique_ptr<Variable[]>> temp_chunks;
  std::size_t temp_used = 0;
  static constexpr std::size_t kTempChunk = 1024;
  Variable* new_temp() {
    if (temp_chunks.empty() || temp_used == kTempChunk) {
      temp_chunks.push_back(std::make_unique<Variable[]>(kTempChunk));
      temp_used = 0;
    }
    return &temp_chunks.back()[temp_used++];
  }

  // Feeds: per feed name, the slot and the expected type.
  std::vector<std::uint32_t> feed_slot;
  std::vector<Type> feed_type;
  // The same, decoded once for the per-run check (no IR calls per run);
  // feed_shaped[k] false: the data op's type is not a tensor (never matches).
  std::vector<std::uint8_t> feed_shaped;
  std::vector<DataType> feed_dtype;
  std::vector<std::vector<std::int64_t>> feed_dims;
  // Fetches: the variable receiving each target.
  std::vector<Variable*> fetch_vars;

  // Streams by name, in order of first use (Lane::stream indexes them).
  std::vector<std::string> stream_names;
  std::unordered_map<std::string, std::int16_t> stream_index;

  // Profiling (one entry per instruction, last run).
  std::vector<std::int64_t> t_start, t_end;
  std::vector<std::uint32_t> t_thread;
};

InterpreterCore::InterpreterCore(const Program& program, Scope& scope,
                                 std::vector<std::string> feed_names,
                                 const std::vector<FetchTarget>& fetch, ExecutionConfig config,
                                 std::shared_ptr<WorkQueue> queue)
    : config_(std::move(config)),
      queue_(std::move(queue)),
      scope_(&scope),
      feed_names_(std::move(feed_names)),
      impl_(std::make_unique<Impl>()) {
  if (config_.sequential || config_.num_threads == 1) queue_.reset();
  if (config_.num_threads == 0) config_.num_threads = queue_ ? queue_->num_threads() + 1 : 1;
  local_scope_ = &scope_->new_scope();
  build(program, fetch);
}

InterpreterCore::~InterpreterCore() {
  // Every run ends with its streams synchronized; stopping them here first
  // still guarantees no stream task touches the core after this point.
  streams_.clear();
  // Drop the kid scope with the temporaries.
  scope_->drop_kid(*local_scope_);
}

namespace {
void number_values(const Block& b, std::vector<Value>& out) {
  for (std::uint32_t a = 0; a < b.num_arguments(); ++a) out.push_back(b.argument(a));
  for (Operation* op : b) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) number_values(*inner, out);
    for (std::uint32_t i = 0; i < op->num_results(); ++i) out.push_back(op->result(i));
  }
}

std::string shape_string(Type t) { return t ? t.to_string() : std::string("<none>"); }

// -1 in `dims` matches any extent.
bool shape_matches(DataType dtype, const std::vector<std::int64_t>& dims, const Tensor& t) {
  if (dtype != t.dtype()) return false;
  if (static_cast<int>(dims.size()) != t.rank()) return false;
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] >= 0 && dims[i] != t.dims()[static_cast<int>(i)]) return false;
  return true;
}
}  // namespace

void InterpreterCore::build(const Program& source, const std::vector<FetchTarget>& fetch) {
  Impl& m = *impl_;
  // Number the caller's values, then work on a copy numbered the same way.
  {
    std::vector<Value> src;
    number_values(source.block(), src);
    for (std::uint32_t i = 0; i < src.size(); ++i) m.source_ids.emplace(src[i].impl(), i);
  }
  m.program = source.clone();
  number_values(m.program.block(), m.clone_values);
  auto clone_of = [&](Value v) -> Value {
    auto it = m.source_ids.find(v.impl());
    return it == m.source_ids.end() ? Value() : m.clone_values[it->second];
  };

  Scope* root = &scope_->root();

  // ---- fetch targets → values of the clone ----
  std::vector<Value> fetch_values;
  for (const auto& f : fetch) {
    if (f.value) {
      Value v = clone_of(f.value);
      if (!v)
        throw_error(ErrorKind::InvalidArgument,
                    "a fetch target is a value that is not in this program");
      fetch_values.push_back(v);
      continue;
    }
    Value found;
    for (Operation* op : m.program.block()) {
      if (auto fo = op->dyn_cast<FetchOp>(); fo && fo.attrs().name == f.name) found = op->operand_source(0);
      else if (auto d = op->dyn_cast<DataOp>(); d && d.attrs().name == f.name) found = op->result(0);
      else if (auto p = op->dyn_cast<ParameterOp>(); p && p.attrs().parameter_name == f.name)
        found = op->result(0);
      if (found) break;
    }
    if (!found)
      throw_error(ErrorKind::NotFound, "fetch '", f.name,
                  "' matches no kiln.fetch op, data op or parameter of the program");
    fetch_values.push_back(found);
  }
  std::unordered_map<const detail::ValueImpl*, std::vector<std::uint32_t>> fetch_index;
  for (std::uint32_t k = 0; k < fetch_values.size(); ++k) {
    fetch_index[fetch_values[k].impl()].push_back(k);
    m.owned_vars.push_back(std::make_unique<Variable>());
    m.fetch_vars.push_back(m.owned_vars.back().get());
  }

  // ---- slots ----
  auto new_slot = [&](Variable* var, Place place, bool persistent) {
    auto s = static_cast<std::uint32_t>(vars_.size());
    vars_.push_back(var);
    m.slots.push_back({place, s, persistent, /*parameter=*/false, /*fetch_reads=*/0});
    return s;
  };
  auto temp_var = [&]() { return m.new_temp(); };
  std::unordered_map<std::string, std::uint32_t> param_slots;
  auto param_slot = [&](const std::string& name, bool create) -> std::uint32_t {
    if (auto it = param_slots.find(name); it != param_slots.end()) return it->second;
    Variable* v = root->find_var(name);
    if (!v && !create) return kNone;
    if (!v) v = &root->var(name);
    std::uint32_t s = new_slot(v, config_.place, true);
    m.slots[s].parameter = true;
    param_slots.emplace(name, s);
    return s;
  };
  // set_parameter targets, so a parameter written earlier in this program is found.
  for (Operation* op : m.program.block())
    if (auto sp = op->dyn_cast<SetParameterOp>()) param_slot(sp.attrs().parameter_name, true);

  m.feed_slot.assign(feed_names_.size(), kNone);
  m.feed_type.assign(feed_names_.size(), Type());
  m.feed_shaped.assign(feed_names_.size(), 0);
  m.feed_dtype.assign(feed_names_.size(), DataType::Undefined);
  m.feed_dims.assign(feed_names_.size(), {});

  // ---- instructions, in program order ----
  auto add_instruction = [&](std::string name, std::uint32_t op_index, Operation* op, KernelFn fn,
                             std::vector<std::uint32_t> ins, std::vector<std::uint32_t> outs,
                             std::shared_ptr<const void> attrs, std::uint8_t order, Lane lane) {
    auto in_arr = std::make_unique<Variable*[]>(ins.size() + 1);
    auto out_arr = std::make_unique<Variable*[]>(outs.size() + 1);
    for (std::size_t k = 0; k < ins.size(); ++k) in_arr[k] = vars_[ins[k]];
    for (std::size_t k = 0; k < outs.size(); ++k) out_arr[k] = vars_[outs[k]];
    Instruction in;
    in.fn = fn;
    in.ctx = KernelContext(op, in_arr.get(), static_cast<std::uint32_t>(ins.size()), out_arr.get(),
                           static_cast<std::uint32_t>(outs.size()), attrs.get(), config_.place,
                           &cpu_allocator());
    instrs_.push_back(in);
    m.io_arrays.push_back(std::move(in_arr));
    m.io_arrays.push_back(std::move(out_arr));
    m.attrs.push_back(std::move(attrs));
    Impl::Meta meta;
    meta.name = std::move(name);
    meta.op_index = op_index;
    meta.op = op;
    meta.order = order;
    meta.lane = lane;
    meta.reads = std::move(ins);
    meta.writes = std::move(outs);
    m.meta.push_back(std::move(meta));
  };
  auto deep_copy_flag = std::make_shared<const CopyFlags>(CopyFlags{true});
  auto add_fetches_of = [&](Value v, std::uint32_t slot) {
    auto it = fetch_index.find(v.impl());
    if (it == fetch_index.end()) return;
    for (std::uint32_t k : it->second) {
      std::uint32_t out = new_slot(m.fetch_vars[k], config_.place, true);
      m.slots[slot].fetch_reads++;
      // A parameter's buffer outlives the run and may be updated in place by
      // a later run: the caller gets a copy.
      bool deep = m.slots[slot].persistent && !std::count(m.feed_slot.begin(), m.feed_slot.end(), slot);
      // On the host: a value made on a stream reaches it through a sync
      // edge, so the caller sees finished data.
      add_instruction("fetch", kNone, nullptr, &share_or_copy_kernel, {slot}, {out},
                      deep ? std::shared_ptr<const void>(deep_copy_flag) : nullptr, kOrderNone,
                      Lane::host());
    }
  };
  // The lane of an op's instructions: its execution_stream attribute, else
  // the place's default stream for a host_stream place, else the host.
  auto stream_lane = [&](const std::string& name, Operation* op, std::uint32_t index) {
    auto it = m.stream_index.find(name);
    if (it == m.stream_index.end()) {
      if (m.stream_names.size() >= 1024)
        throw_error(ErrorKind::OutOfRange, "op #", index, " '", op ? op->name() : std::string_view("?"),
                    "': more than 1024 execution streams in one program");
      it = m.stream_index.emplace(name, static_cast<std::int16_t>(m.stream_names.size())).first;
      m.stream_names.push_back(name);
    }
    return Lane::on_stream(it->second);
  };
  auto op_lane = [&](Operation* op, std::uint32_t index) -> Lane {
    if (Attribute a = op->attribute(kExecutionStreamAttr)) {
      auto name = a.dyn_cast<StrAttribute>();
      if (!name || name.value().empty())
        throw_error(ErrorKind::InvalidArgument, "op #", index, " '", op->name(), "': attribute '",
                    kExecutionStreamAttr, "' must name a stream (a non-empty string), got ",
                    a.to_string());
      return stream_lane(name.value(), op, index);
    }
    if (config_.place.kind == PlaceKind::HostStream)
      return stream_lane(config_.place.to_string(), op, index);
    return Lane::host();  // cpu; cuda has no streams yet and runs CPU kernels
  };
  // Slot holding `v` at the kernel's place, inserting a transfer if needed.
  std::unordered_map<std::uint64_t, std::uint32_t> transfers;
  auto operand_slot = [&](Operation* op, std::uint32_t i, Lane lane) {
    Value v = op->operand_source(i);
    auto it = m.value_slot.find(v.impl());
    if (it == m.value_slot.end())
      throw_error(ErrorKind::Unimplemented, "op '", op->name(), "' operand #", i,
                  " is defined inside a region; control flow is not supported by the executor yet");
    std::uint32_t s = it->second;
    if (m.slots[s].place == config_.place) return s;
    std::uint64_t key = std::uint64_t(s) << 32 | static_cast<std::uint32_t>(config_.place.kind);
    if (auto t = transfers.find(key); t != transfers.end()) return t->second;
    std::uint32_t out = new_slot(temp_var(), config_.place, false);
    // On the consumer's lane (seed: memcpy_h2d runs on the stream).
    add_instruction("memcpy " + m.slots[s].place.to_string() + "->" + config_.place.to_string(),
                    kNone, op, &transfer_kernel, {s}, {out}, nullptr, kOrderNone, lane);
    transfers.emplace(key, out);
    return out;
  };

  std::uint32_t op_index = 0;
  for (Operation* op : m.program.block()) {
    const std::uint32_t index = op_index++;
    if (op->num_regions())
      throw_error(ErrorKind::Unimplemented, "op #", index, " '", op->name(),
                  "' has regions; control flow is not supported by the executor yet");
    if (auto p = op->dyn_cast<ParameterOp>()) {
      const std::string name = p.attrs().parameter_name;
      std::uint32_t s = param_slot(name, false);
      if (s == kNone)
        throw_error(ErrorKind::NotFound, "parameter '", name, "' (expected ",
                    shape_string(op->result_type(0)),
                    ") has no value in the scope: run the startup program first");
      m.value_slot[op->result(0).impl()] = s;
      add_fetches_of(op->result(0), s);
      continue;
    }
    if (auto d = op->dyn_cast<DataOp>()) {
      auto a = d.attrs();
      auto it = std::find(feed_names_.begin(), feed_names_.end(), a.name);
      if (it == feed_names_.end()) {
        // As in Paddle and TensorFlow, a data op nothing reads or fetches
        // needs no feed (e.g. the label of an evaluation program cloned from
        // the training one): no instruction, no slot.
        if (op->result(0).use_empty() && !fetch_index.count(op->result(0).impl())) continue;
        throw_error(ErrorKind::InvalidArgument, "feed '", a.name, "' is missing: the program's data op expects ",
                    shape_string(op->result_type(0)));
      }
      auto k = static_cast<std::size_t>(it - feed_names_.begin());
      if (m.feed_slot[k] != kNone)
        throw_error(ErrorKind::InvalidArgument, "two data ops are named '", a.name, "'");
      std::uint32_t s = new_slot(&local_scope_->var(a.name), a.place, true);
      m.feed_slot[k] = s;
      m.feed_type[k] = op->result_type(0);
      if (is_shaped(m.feed_type[k])) {
        m.feed_shaped[k] = 1;
        m.feed_dtype[k] = shaped_data_type(m.feed_type[k]);
        m.feed_dims[k] = shaped_dims(m.feed_type[k]);
      }
      m.value_slot[op->result(0).impl()] = s;
      add_fetches_of(op->result(0), s);
      continue;
    }
    const Lane lane = op_lane(op, index);
    if (auto sp = op->dyn_cast<SetParameterOp>()) {
      std::uint32_t in = operand_slot(op, 0, lane);
      std::uint32_t out = param_slot(sp.attrs().parameter_name, true);
      // Copy values the caller or another parameter owns; share temporaries.
      bool deep = m.slots[in].persistent;
      add_instruction(op->name(), index, op, &share_or_copy_kernel, {in}, {out},
                      deep ? std::shared_ptr<const void>(deep_copy_flag) : nullptr, kOrderSideEffect,
                      lane);
      continue;
    }
    if (auto fo = op->dyn_cast<FetchOp>()) {
      std::uint32_t in = operand_slot(op, 0, lane);
      // A kiln.fetch op is a side effect kept in order; the value reaches the
      // caller when the fetch targets name it.
      m.slots[in].fetch_reads++;
      std::uint32_t out = new_slot(&local_scope_->var("@fetch." + fo.attrs().name), config_.place, true);
      add_instruction(op->name(), index, op, &share_or_copy_kernel, {in}, {out},
                      m.slots[in].persistent ? std::shared_ptr<const void>(deep_copy_flag) : nullptr,
                      kOrderSideEffect, lane);
      continue;
    }
    // A kernel op.
    DataType key_dtype = DataType::Float32;
    if (op->num_operands() && is_shaped(op->operand_source(0).type()))
      key_dtype = shaped_data_type(op->operand_source(0).type());
    else if (op->num_results() && is_shaped(op->result_type(0)))
      key_dtype = shaped_data_type(op->result_type(0));
    const KernelInfo* kernel =
        KernelRegistry::instance().find(op->info().id(), config_.place.kind, key_dtype);
    if (!kernel && config_.place.kind != PlaceKind::Cpu)
      kernel = KernelRegistry::instance().find(op->info().id(), PlaceKind::Cpu, key_dtype);
    if (!kernel) KernelRegistry::instance().get(*op, config_.place.kind, key_dtype);  // throws
    std::vector<std::uint32_t> ins;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) ins.push_back(operand_slot(op, i, lane));
    std::vector<std::uint32_t> outs(op->num_results(), kNone);
    for (auto [o, i] : op->info().impl()->inplace_map) {
      std::uint32_t s = ins[i];
      if ((m.slots[s].persistent || m.slots[s].fetch_reads > 0) && !m.slots[s].parameter) {
        // A feed or fetched value must not change under the caller: the op
        // works on a copy (seed 004 "SetFeedVarsInplaceSkip"). A fetched
        // temporary is not `persistent` (its fetch target is), so it is
        // recognised by its fetch reads.
        std::uint32_t copy = new_slot(temp_var(), config_.place, false);
        add_instruction("copy", kNone, op, &share_or_copy_kernel, {s}, {copy},
                        std::shared_ptr<const void>(deep_copy_flag), kOrderNone, lane);
        ins[i] = copy;
        s = copy;
      }
      outs[o] = s;
    }
    for (std::uint32_t o = 0; o < op->num_results(); ++o) {
      if (outs[o] != kNone) continue;
      outs[o] = new_slot(temp_var(), config_.place, false);
    }
    for (auto [o, i] : op->info().impl()->view_map) m.slots[outs[o]].alias = m.slots[ins[i]].alias;
    std::uint8_t order = kOrderNone;
    if (op->has_trait<Random>()) order |= kOrderRandom;
    if (op->has_trait<Communication>()) order |= kOrderCommunication;
    if (op->has_trait<SideEffect>()) order |= kOrderSideEffect;
    add_instruction(op->name(), index, op, kernel->fn, ins, outs,
                    kernel->decode_attrs ? kernel->decode_attrs(op) : nullptr, order, lane);
    for (std::uint32_t o = 0; o < op->num_results(); ++o) {
      m.value_slot[op->result(o).impl()] = outs[o];
      add_fetches_of(op->result(o), outs[o]);
    }
  }
  for (std::size_t k = 0; k < feed_names_.size(); ++k)
    if (m.feed_slot[k] == kNone)
      throw_error(ErrorKind::NotFound, "feed '", feed_names_[k], "' matches no data op of the program");

  // ---- dependencies over alias classes ----
  const auto n = static_cast<std::uint32_t>(instrs_.size());
  DependencyBuilder deps(n, static_cast<std::uint32_t>(vars_.size()));
  std::vector<std::uint32_t> r, w;
  for (std::uint32_t i = 0; i < n; ++i) {
    r.clear();
    w.clear();
    for (auto s : m.meta[i].reads) r.push_back(m.slots[s].alias);
    for (auto s : m.meta[i].writes) w.push_back(m.slots[s].alias);
    deps.add_instruction(r, w, m.meta[i].order);
  }
  deps.build();
  succ_off_.assign(n + 1, 0);
  succ_.clear();
  dep_static_.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto s = deps.successors(i);
    succ_.insert(succ_.end(), s.begin(), s.end());
    succ_off_[i + 1] = static_cast<std::uint32_t>(succ_.size());
    dep_static_[i] = deps.num_predecessors(i);
    if (dep_static_[i] == 0) roots_.push_back(i);
  }
  dep_ = std::make_unique<std::atomic<std::int32_t>[]>(n);
  for (std::uint32_t i = 0; i < n; ++i) dep_[i].store(static_cast<std::int32_t>(dep_static_[i]), std::memory_order_relaxed);

  // ---- GC plan ----
  std::vector<bool> no_gc(vars_.size(), false);
  for (std::uint32_t s = 0; s < vars_.size(); ++s)
    no_gc[s] = m.slots[s].persistent || m.slots[s].fetch_reads > 0;
  for (Value v : config_.skip_gc) {
    Value c = clone_of(v);
    if (auto it = c ? m.value_slot.find(c.impl()) : m.value_slot.end(); it != m.value_slot.end())
      no_gc[it->second] = true;
  }
  std::vector<std::vector<std::uint32_t>> users(vars_.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    for (auto s : m.meta[i].reads) users[s].push_back(i);
    for (auto s : m.meta[i].writes) users[s].push_back(i);
  }
  std::vector<std::vector<std::uint32_t>> frees(n);
  ref_static_.assign(vars_.size(), 0);
  if (config_.gc) {
    for (std::uint32_t s = 0; s < vars_.size(); ++s) {
      if (no_gc[s] || users[s].empty()) continue;
      auto& u = users[s];
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      auto last = deps.last_users(u);
      ref_static_[s] = static_cast<std::int32_t>(last.size());
      for (auto i : last) frees[i].push_back(s);
    }
  }
  gc_off_.assign(n + 1, 0);
  gc_.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    gc_.insert(gc_.end(), frees[i].begin(), frees[i].end());
    gc_off_[i + 1] = static_cast<std::uint32_t>(gc_.size());
  }
  ref_ = std::make_unique<std::atomic<std::int32_t>[]>(vars_.size());
  for (std::size_t s = 0; s < vars_.size(); ++s) ref_[s].store(ref_static_[s], std::memory_order_relaxed);
  // Small freed temporaries keep their buffer for the next run, within the
  // budget; views (alias != own slot) never get one: their writer shares.
  recycle_max_.assign(vars_.size(), 0);
  if (config_.recycle_bytes > 0) {
    std::size_t budget = config_.recycle_budget;
    const auto limit = static_cast<std::uint32_t>(std::min<std::size_t>(config_.recycle_bytes, UINT32_MAX));
    for (std::uint32_t s = 0; s < vars_.size() && budget >= limit; ++s) {
      if (ref_static_[s] == 0 || m.slots[s].alias != s) continue;
      recycle_max_[s] = limit;
      budget -= limit;
    }
  }
  local_ready_.reserve(n);
  expensive_.assign(n, 0);
  cost_ns_.assign(n, std::numeric_limits<std::int64_t>::max());
  if (config_.profile) {
    m.t_start.assign(n, 0);
    m.t_end.assign(n, 0);
    m.t_thread.assign(n, 0);
  }
  if (!m.stream_names.empty()) build_streams();
  if (!m.stream_names.empty()) sync_ready_.reserve(n);

  // Thread plan: only a program with BLAS kernels has a choice to make.
  for (const auto& meta : m.meta)
    if (meta.op && meta.op->isa<MatmulOp>()) has_blas_ = true;
  plan_ = config_.thread_plan == ThreadPlan::Blas ? ThreadPlan::Blas : ThreadPlan::Graph;
  if (config_.thread_plan != ThreadPlan::Auto || !has_blas_ || !queue_)
    plan_trials_ = 2 * kPlanTrials;  // nothing to measure
}

// Streams, lanes, out-events and waits (executor.md §4). Only for programs
// with stream lanes; a host-only core keeps these arrays empty.
void InterpreterCore::build_streams() {
  Impl& m = *impl_;
  const auto n = static_cast<std::uint32_t>(instrs_.size());
  for (std::size_t k = 0; k < m.stream_names.size(); ++k)
    streams_.push_back(std::make_unique<HostStream>(static_cast<std::int16_t>(k)));
  lane_.assign(n, -1);
  for (std::uint32_t i = 0; i < n; ++i)
    if (m.meta[i].lane.is_stream) lane_[i] = m.meta[i].lane.stream;
  // Every non-direct edge of the reduced DAG (RAW, WAR and WAW alike) gets
  // an event: its source records one after its launch, its target waits on
  // it. Reduced edges suffice: an event completes only after everything its
  // stream ran before, waits included, so waits compose along paths.
  std::vector<std::vector<std::uint32_t>> waits(n);
  out_event_.resize(n);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = succ_off_[i]; k < succ_off_[i + 1]; ++k) {
      const std::uint32_t s = succ_[k];
      if (successor_kind(m.meta[i].lane, m.meta[s].lane) == SuccessorKind::Direct) continue;
      if (!out_event_[i]) out_event_[i] = streams_[static_cast<std::size_t>(lane_[i])]->create_event();
      waits[s].push_back(i);
    }
  wait_off_.assign(n + 1, 0);
  wait_.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    wait_.insert(wait_.end(), waits[i].begin(), waits[i].end());
    wait_off_[i + 1] = static_cast<std::uint32_t>(wait_.size());
  }
}

// ---- running ----

std::vector<Tensor> InterpreterCore::run(std::span<const Tensor> feeds) {
  return run_impl(const_cast<Tensor*>(feeds.data()), feeds.size(), /*take=*/false);
}

std::vector<Tensor> InterpreterCore::run(std::vector<Tensor>&& feeds) {
  return run_impl(feeds.data(), feeds.size(), /*take=*/true);
}

// `take`: move the feeds into their variables (the caller gives them up);
// otherwise copy (feeds is then never written).
std::vector<Tensor> InterpreterCore::run_impl(Tensor* feeds_data, std::size_t num_feeds, bool take) {
  const std::span<Tensor> feeds(feeds_data, num_feeds);
  std::lock_guard lock(run_mutex_);
  Impl& m = *impl_;
  if (feeds.size() != feed_names_.size())
    throw_error(ErrorKind::InvalidArgument, "expected ", feed_names_.size(), " feeds, got ",
                feeds.size());
  for (std::size_t k = 0; k < feeds.size(); ++k) {
    const Tensor& t = feeds[k];
    if (!t.is_initialized())
      throw_error(ErrorKind::InvalidArgument, "feed '", feed_names_[k], "' holds no tensor");
    if (!m.feed_shaped[k] || !shape_matches(m.feed_dtype[k], m.feed_dims[k], t))
      throw_error(ErrorKind::InvalidArgument, "feed '", feed_names_[k], "': expected ",
                  m.feed_type[k].to_string(), ", got ", t.to_string());
  }
  for (std::size_t k = 0; k < feeds.size(); ++k) {  // after every check: all or nothing
    if (take) vars_[m.feed_slot[k]]->get_mutable<Tensor>() = std::move(feeds[k]);
    else vars_[m.feed_slot[k]]->get_mutable<Tensor>() = feeds[k];
  }
  if (dirty_) reset_counters();
  abort_.store(false, std::memory_order_relaxed);
  error_ = nullptr;

  // The first runs time each kernel (TensorFlow's cost model): ops above
  // kExpensiveNs are handed to other threads, cheaper ones stay inline.
  calibrating_ = calibration_runs_left_ > 0 && !config_.sequential;
  // Thread plan: Auto measures each plan kPlanTrials times once calibration
  // is done — Graph first, so OpenBLAS's threads (which spin ~0.1 s after a
  // multi-threaded call) are not yet awake while the graph plan is timed.
  ThreadPlan plan = plan_;
  const bool trial = !calibrating_ && plan_trials_ < 2 * kPlanTrials;
  if (trial) plan = plan_trials_ < kPlanTrials ? ThreadPlan::Graph : ThreadPlan::Blas;
  // BLAS's thread count is process-wide: a Blas-plan run holds the BLAS
  // lock exclusively (its GEMMs use every thread), runs of other cores with
  // BLAS kernels hold it shared (BLAS must stay at 1 thread under them).
  // Free until some core in the process first runs the Blas plan.
  std::unique_lock<std::shared_mutex> blas_exclusive;
  std::shared_lock<std::shared_mutex> blas_shared;
  if (has_blas_) {
    if (plan == ThreadPlan::Blas && queue_) {
      // relaxed: the flag only decides whether later runs take the lock;
      // the lock itself orders the runs.
      g_blas_plan_used.store(true, std::memory_order_relaxed);
      blas_exclusive = std::unique_lock(g_blas_mutex);
    } else if (g_blas_plan_used.load(std::memory_order_relaxed)) {
      blas_shared = std::shared_lock(g_blas_mutex);
    }
  }
  apply_thread_plan(plan);
  // One thread touches the counters: no pool to hand work to, no stream
  // thread collecting garbage.
  solo_ = pool_ == nullptr && lane_.empty();
  const std::int64_t t_begin = trial ? now_ns() : 0;
  const bool streams = !lane_.empty();
  if (config_.sequential) {
    if (streams) run_sequential<true>();
    else run_sequential<false>();
  } else if (solo_) {
    // One host thread and no streams: program order is a topological order
    // of the DAG, so the counters have nothing to decide, and walking the
    // instructions in order keeps memory access sequential (a random DAG's
    // ready order jumps across instructions and variables: 46 -> ~20 ns per
    // instruction at 10^4 ops).
    run_sequential<false>();
  } else {
    run_parallel();
  }
  // Kernels still queued on streams finish (and free) before the run returns,
  // error or not; their errors were recorded by run_on_stream().
  if (streams) synchronize_streams();
  if (calibrating_) {
    calibrating_ = false;
    if (--calibration_runs_left_ == 0)
      for (std::size_t k = 0; k < instrs_.size(); ++k)
        expensive_[k] = cost_ns_[k] != std::numeric_limits<std::int64_t>::max() &&
                        cost_ns_[k] > kExpensiveNs;
  }

  if (trial && !error_) {
    auto& best = plan_best_ns_[plan == ThreadPlan::Blas];
    best = std::min(best, now_ns() - t_begin);
    if (++plan_trials_ == 2 * kPlanTrials)  // Blas must win clearly: Graph needs no BLAS pool
      plan_ = plan_best_ns_[1] * 20 < plan_best_ns_[0] * 19 ? ThreadPlan::Blas : ThreadPlan::Graph;
  }
  for (std::size_t k = 0; k < feeds.size(); ++k) vars_[m.feed_slot[k]]->clear();
  if (error_) {
    dirty_ = true;
    for (auto* v : m.fetch_vars) v->clear();
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::string where = "a stream";
    if (error_instr_ != kNone) {
      const auto& meta = m.meta[error_instr_];
      where = "op ";
      if (meta.op_index != kNone) where += "#" + std::to_string(meta.op_index) + " ";
      where += "'" + meta.name + "'";
      if (meta.lane.is_stream) where += " on stream '" + m.stream_names[meta.lane.stream] + "'";
    }
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      throw Error(err.kind(), where + " failed: " + err.message());
    } catch (const std::exception& err) {
      throw Error(ErrorKind::Internal, where + " failed: " + err.what());
    } catch (...) {
      throw Error(ErrorKind::Internal, where + " failed with an unknown exception");
    }
  }
  std::vector<Tensor> out;
  out.reserve(m.fetch_vars.size());
  for (auto* v : m.fetch_vars) {  // moved out: the variable is cleared anyway
    out.push_back(v->is<Tensor>() ? std::move(v->get<Tensor>()) : Tensor());
    v->clear();
  }
  return out;
}

// Sets BLAS's thread count (process-wide; only when it differs) and whether
// this run hands work to the pool. A core without BLAS kernels, or without a
// pool, keeps BLAS at 1 thread: the graph's threads are all it may use.
void InterpreterCore::apply_thread_plan(ThreadPlan plan) {
  const bool blas = plan == ThreadPlan::Blas && queue_ && has_blas_;
  pool_ = blas ? nullptr : queue_.get();
  if (!has_blas_) return;
  const int want = blas ? static_cast<int>(std::max(1u, config_.num_threads)) : 1;
  if (blas_num_threads() != want) {
    // Graph runs of several cores may get here at once (shared BLAS lock).
    std::lock_guard lock(g_blas_set_mutex);
    if (blas_num_threads() != want) blas_set_num_threads(want);
  }
}

void InterpreterCore::reset_counters() {
  for (std::size_t i = 0; i < instrs_.size(); ++i)
    dep_[i].store(static_cast<std::int32_t>(dep_static_[i]), std::memory_order_relaxed);
  for (std::size_t s = 0; s < vars_.size(); ++s)
    ref_[s].store(ref_static_[s], std::memory_order_relaxed);
  dirty_ = false;
}

void InterpreterCore::record_error(std::uint32_t i) noexcept {
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) {
      error_ = std::current_exception();
      error_instr_ = i;
    }
  }
  // release: a thread that sees the flag through an acquire (an event wait,
  // a queue hand-off) also sees the stored error. Readers that only load it
  // relaxed may run one more kernel before they see it.
  abort_.store(true, std::memory_order_release);
}

template <bool kStreams>
inline bool InterpreterCore::execute(std::uint32_t i) {
  if constexpr (kStreams) {
    if (lane_[i] >= 0) return launch(i);
    // Sync successor of stream work: block until its events complete, then
    // check abort_ (a failed stream kernel set it before its event completed).
    if (wait_off_[i] != wait_off_[i + 1] && !wait_on_host(i)) return false;
  }
  // Relaxed: a stale "false" only runs one more op before the abort is seen.
  if (abort_.load(std::memory_order_relaxed)) return false;
  Instruction& in = instrs_[i];
  try {
    if (__builtin_expect(config_.profile, 0)) {
      auto& m = *impl_;
      m.t_start[i] = now_ns();
      in.fn(in.ctx);
      m.t_end[i] = now_ns();
      m.t_thread[i] = static_cast<std::uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffff);
      if (calibrating_) cost_ns_[i] = std::min(cost_ns_[i], m.t_end[i] - m.t_start[i]);
    } else if (__builtin_expect(calibrating_, 0)) {
      const std::int64_t t0 = now_ns();
      in.fn(in.ctx);
      cost_ns_[i] = std::min(cost_ns_[i], now_ns() - t0);
    } else {
      in.fn(in.ctx);
    }
  } catch (...) {
    record_error(i);
    return false;
  }
  return true;
}

// The host blocks on the events of i's stream predecessors (sync edges).
bool InterpreterCore::wait_on_host(std::uint32_t i) {
  try {
    for (std::uint32_t k = wait_off_[i], e = wait_off_[i + 1]; k < e; ++k)
      out_event_[wait_[k]]->synchronize();
  } catch (...) {
    record_error(i);
    return false;
  }
  return true;
}

// Launches i onto its stream: the stream first waits on the events of i's
// predecessors on other streams, then runs the kernel; the host does not
// wait. The event recorded after the launch covers the kernel (and its GC).
bool InterpreterCore::launch(std::uint32_t i) {
  // Relaxed: as in execute().
  if (abort_.load(std::memory_order_relaxed)) return false;
  HostStream& stream = *streams_[static_cast<std::size_t>(lane_[i])];
  try {
    for (std::uint32_t k = wait_off_[i], e = wait_off_[i + 1]; k < e; ++k)
      stream.wait(*out_event_[wait_[k]]);
    stream.enqueue([this, i] { run_on_stream(i); });
    if (Event* e = out_event_[i].get()) e->record(stream);
  } catch (...) {
    record_error(i);
    return false;
  }
  return true;
}

// On i's stream thread. GC of i's variables happens here, after the kernel,
// not on the launching host thread: a host-stream kernel reads its
// Variables when it runs (a CUDA launch binds pointers at launch), so
// dropping them at launch would pull the input from under it (executor.md §5).
void InterpreterCore::run_on_stream(std::uint32_t i) {
  // Relaxed: a kernel that failed earlier on this stream is sequenced before;
  // one on another stream or the host that i depends on stored abort_ before
  // the event i's stream waited on completed (that wait acquires).
  if (abort_.load(std::memory_order_relaxed)) return;
  Instruction& in = instrs_[i];
  try {
    if (__builtin_expect(config_.profile, 0)) {
      auto& m = *impl_;
      m.t_start[i] = now_ns();
      in.fn(in.ctx);
      m.t_end[i] = now_ns();
      m.t_thread[i] = static_cast<std::uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffff);
    } else {
      in.fn(in.ctx);
    }
  } catch (...) {
    record_error(i);
    return;
  }
  collect_garbage(i);
}

void InterpreterCore::synchronize_streams() {
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (...) {
      // Kernels' own exceptions are caught in run_on_stream(); this is a
      // failure of the stream machinery itself (a failed event wait).
      record_error(kNone);
    }
  }
}

// always_inline: it is also called from run_on_stream(); without the
// attribute GCC stopped inlining it into the host hot loop (a PLT call per
// instruction, ~1 ns on the chain benchmark).
[[gnu::always_inline]] inline void InterpreterCore::collect_garbage(std::uint32_t i) {
  for (std::uint32_t k = gc_off_[i], e = gc_off_[i + 1]; k < e; ++k) {
    const std::uint32_t s = gc_[k];
    const std::int32_t st = ref_static_[s];
    // acq_rel: the last user's decrement must see every other user's writes
    // (release) before the variable is freed (acquire).
    if (st == 1 || count_down(ref_[s], solo_)) {
      if (st != 1) ref_[s].store(st, std::memory_order_relaxed);  // ready for the next run
      Variable* v = vars_[s];
      if (!v->is_initialized()) continue;
      if (const std::uint32_t r = recycle_max_[s]) v->recycle(r);
      else v->clear();
    }
  }
}

template <bool kStreams>
void InterpreterCore::run_sequential() {
  const auto n = static_cast<std::uint32_t>(instrs_.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!execute<kStreams>(i)) return;
    // A stream instruction collects its garbage on its stream.
    if (config_.gc && (!kStreams || lane_[i] < 0)) collect_garbage(i);
  }
}

void InterpreterCore::hand_out(std::uint32_t i) {
  if (!pool_) {
    local_ready_.push_back(i);
    return;
  }
  // Relaxed: the queue's lock orders the push; pending_ only counts.
  pending_.fetch_add(1, std::memory_order_relaxed);
  pool_->push(WorkTask{&InterpreterCore::task_entry, this, i});
}

void InterpreterCore::task_entry(void* core, std::uint32_t i) {
  auto* self = static_cast<InterpreterCore*>(core);
  if (self->lane_.empty()) self->run_chain<false>(i);
  else self->run_chain<true>(i);
  self->finish_task();  // the last access to the core
}

void InterpreterCore::finish_task() {
  // acq_rel: release publishes this task's work; the decrement that reaches
  // 0 acquires every other task's (the RMWs on pending_ form one release
  // sequence), so the final thread has seen all work of the run.
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The caller may see pending_ == 0 before we get here (it polls while it
  // helps), so 0 alone must not let it return: the core could be destroyed
  // under a later notify. It returns only after it has read done_ == true
  // under done_mutex_, and we set and notify while holding that mutex. The
  // caller's lock therefore happens after our unlock, which is this thread's
  // last access to the core (a mutex may be destroyed as soon as it is
  // unlocked). The mutex also carries the acquired work to the caller.
  std::lock_guard lock(done_mutex_);
  done_ = true;
  done_cv_.notify_all();
}

namespace {
// Ready cheap successors a worker keeps to run itself (TensorFlow's inline
// ready queue); one per thread, empty between tasks.
thread_local std::vector<std::uint32_t> tls_inline;
}  // namespace

template <bool kStreams>
void InterpreterCore::run_chain(std::uint32_t i) {
  std::vector<std::uint32_t>& inline_ready = pool_ ? tls_inline : local_ready_;
  const bool solo = solo_;
  const std::size_t base = inline_ready.size();
  for (;;) {
    if (!execute<kStreams>(i)) return;
    // A stream instruction collects its garbage on its stream, after its kernel.
    if (!kStreams || lane_[i] < 0) collect_garbage(i);
    std::uint32_t next = kNone;
    for (std::uint32_t k = succ_off_[i], e = succ_off_[i + 1]; k < e; ++k) {
      const std::uint32_t s = succ_[k];
      const std::uint32_t st = dep_static_[s];
      // A lone predecessor needs no atomic: it is the only one to reach s.
      // acq_rel: the last predecessor sees the others' outputs.
      if (st == 1 || count_down(dep_[s], solo)) {
        if (st != 1) dep_[s].store(static_cast<std::int32_t>(st), std::memory_order_relaxed);
        if constexpr (kStreams) {
          if (lane_[s] < 0 && lane_[i] >= 0) {
            // Sync successor: it will block on the stream, so another
            // thread takes it; with no pool it waits until the host has
            // nothing else ready (sync_ready_).
            if (pool_) hand_out(s);
            else sync_ready_.push_back(s);
            continue;
          }
          if (lane_[s] >= 0 && next != kNone && lane_[next] < 0) {
            // Launches go first: they are cheap and feed the streams.
            inline_ready.push_back(next);
            next = s;
            continue;
          }
        }
        if (next == kNone) next = s;  // keep one ready successor on this thread
        else if (expensive_[s]) hand_out(s);  // worth another thread
        else inline_ready.push_back(s);       // cheap: a hand-off costs more than the op
      }
    }
    if (next == kNone) {
      if (inline_ready.size() == base) return;
      next = inline_ready.back();
      inline_ready.pop_back();
    }
    i = next;
  }
}

void InterpreterCore::run_parallel() {
  if (roots_.empty()) return;
  const bool streams = !lane_.empty();
  if (!pool_) {
    local_ready_.clear();
    for (auto it = roots_.rbegin(); it != roots_.rend(); ++it) local_ready_.push_back(*it);
    if (!streams) {
      while (!local_ready_.empty()) {
        std::uint32_t i = local_ready_.back();
        local_ready_.pop_back();
        run_chain<false>(i);
      }
      return;
    }
    // Host work first; a successor that blocks on a stream only when none
    // is left (oldest first: its stream work was launched earliest).
    sync_ready_.clear();
    std::size_t next_sync = 0;
    for (;;) {
      std::uint32_t i;
      if (!local_ready_.empty()) {
        i = local_ready_.back();
        local_ready_.pop_back();
      } else if (next_sync < sync_ready_.size()) {
        i = sync_ready_[next_sync++];
      } else {
        break;
      }
      run_chain<true>(i);
    }
    return;
  }
  pending_.store(1, std::memory_order_relaxed);
  for (std::size_t k = 1; k < roots_.size(); ++k) hand_out(roots_[k]);
  if (streams) run_chain<true>(roots_[0]);
  else run_chain<false>(roots_[0]);
  finish_task();
  // Take part instead of sleeping while there is queued work.
  // relaxed: only decides whether to keep helping; completion is read under
  // done_mutex_ below.
  while (pending_.load(std::memory_order_relaxed) != 0 && pool_->try_run_one()) {
  }
  std::unique_lock lock(done_mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  done_ = false;
}

// ---- introspection ----

InterpreterCore::InstructionInfo InterpreterCore::instruction(std::uint32_t i) const {
  const auto& meta = impl_->meta.at(i);
  InstructionInfo info;
  info.op_name = meta.name;
  info.op_index = meta.op_index;
  for (std::uint32_t k = succ_off_[i]; k < succ_off_[i + 1]; ++k) {
    info.successors.push_back(succ_[k]);
    info.successor_kinds.push_back(successor_kind(meta.lane, impl_->meta[succ_[k]].lane));
  }
  info.num_predecessors = dep_static_[i];
  info.reads = meta.reads;
  info.writes = meta.writes;
  info.frees.assign(gc_.begin() + gc_off_[i], gc_.begin() + gc_off_[i + 1]);
  info.lane = meta.lane;
  if (!lane_.empty()) {
    info.records_event = out_event_[i] != nullptr;
    info.waits.assign(wait_.begin() + wait_off_[i], wait_.begin() + wait_off_[i + 1]);
  }
  return info;
}

const std::string& InterpreterCore::stream_name(std::size_t k) const {
  if (k >= impl_->stream_names.size())
    throw_error(ErrorKind::OutOfRange, "stream index ", k, " out of range: the core has ",
                impl_->stream_names.size(), " streams");
  return impl_->stream_names[k];
}

std::uint32_t InterpreterCore::slot_of(Value v) const {
  auto it = impl_->source_ids.find(v.impl());
  if (it == impl_->source_ids.end()) return kNone;
  auto s = impl_->value_slot.find(impl_->clone_values[it->second].impl());
  return s == impl_->value_slot.end() ? kNone : s->second;
}

std::string InterpreterCore::to_dot() const {
  std::ostringstream os;
  os << "digraph kiln {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (std::uint32_t i = 0; i < instrs_.size(); ++i) {
    os << "  i" << i << " [label=\"" << i << ": " << impl_->meta[i].name << "\"];\n";
  }
  for (std::uint32_t i = 0; i < instrs_.size(); ++i)
    for (std::uint32_t k = succ_off_[i]; k < succ_off_[i + 1]; ++k) {
      auto kind = successor_kind(impl_->meta[i].lane, impl_->meta[succ_[k]].lane);
      os << "  i" << i << " -> i" << succ_[k];
      if (kind == SuccessorKind::Event) os << " [style=dashed]";
      if (kind == SuccessorKind::Sync) os << " [style=bold]";
      os << ";\n";
    }
  os << "}\n";
  return os.str();
}

std::string InterpreterCore::chrome_trace() const {
  const auto& m = *impl_;
  std::ostringstream os;
  os << "{\"traceEvents\":[";
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (auto t : m.t_start)
    if (t) t0 = std::min(t0, t);
  bool first = true;
  for (std::size_t i = 0; i < m.t_start.size(); ++i) {
    if (!m.t_start[i]) continue;
    if (!first) os << ',';
    first = false;
    os << "{\"name\":\"" << m.meta[i].name << "\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":"
       << double(m.t_start[i] - t0) / 1000.0 << ",\"dur\":" << double(m.t_end[i] - m.t_start[i]) / 1000.0
       << ",\"pid\":1,\"tid\":" << m.t_thread[i] << ",\"args\":{\"instruction\":" << i << "}}";
  }
  os << "],\"displayTimeUnit\":\"ns\"}";
  return os.str();
}

}  // namespace kiln
