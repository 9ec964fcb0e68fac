// RunState's CUDA graph mode (ExecutionOptions::cuda_graph): which plans
// can be captured, the capture run (every stream forked from and joined back
// to the device's compute stream, GC held off so the graph's buffers stay
// its own), and replays (feeds copied into the captured buffers — page-locked
// host memory, or device memory for a batch kept on the device — one graph
// launch, fetches copied out).
#include <cstring>

#include "kiln/exec/dependency_builder.h"
#include "kiln/exec/run_state.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/warning.h"

namespace kiln {

namespace {

bool same_shapes(const std::vector<Tensor>& staged, std::span<Tensor* const> feeds) {
  if (staged.size() != feeds.size()) return false;
  for (std::size_t k = 0; k < feeds.size(); ++k)
    if (staged[k].dims() != feeds[k]->dims() || staged[k].dtype() != feeds[k]->dtype()) return false;
  return true;
}

// Whether a feed on the device is another buffer than the one captured.
bool moved_device_feed(const std::vector<Tensor>& staged, std::span<Tensor* const> feeds) {
  for (std::size_t k = 0; k < feeds.size(); ++k)
    if (feeds[k]->place().kind == PlaceKind::Cuda && feeds[k]->raw_data() != staged[k].raw_data())
      return true;
  return false;
}

// A host copy of `t` in ordinary (pageable) memory.
Tensor host_copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.dims(), t.dtype(), Place::cpu());
  if (t.bytes()) std::memcpy(out.raw_data(), t.raw_data(), t.bytes());
  return out;
}

}  // namespace

// Why the plan cannot be captured, or "" when it can: every instruction
// must be device work on a CUDA stream, and none may draw random numbers
// (a replay would repeat the captured draw).
std::string RunState::graph_blocker() const {
  const ExecutionPlan& p = *plan_;
  if (p.options.place.kind != PlaceKind::Cuda)
    return "the program runs on " + p.options.place.to_string() + ", not on a CUDA device";
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    const PlanInstruction& in = p.instructions[i];
    if (!in.lane.is_stream) return p.describe(i) + " runs on the host";
    if (in.order & kOrderRandom) return p.describe(i) + " draws new random numbers every run";
  }
  return {};
}

void RunState::graph_off(const std::string& why) {
  graph_.reset();
  keep_temporaries_ = false;
  warn("CUDA graph mode is off for a program on " + plan_->options.place.to_string() + ": " + why +
       "; its kernels are launched one by one");
}

void RunState::run_graph(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                         std::span<Tensor> results) {
  GraphMode& g = *graph_;
  using Stage = GraphMode::Stage;
  if (g.stage == Stage::Warmup) {
    g.stage = Stage::Capture;
    run_launches(feeds, take, config, results);
    return;
  }
  if (g.stage == Stage::Replay && !same_shapes(g.staged, feeds)) {
    g.graph.reset();
    g.stage = Stage::Capture;
  } else if (g.stage == Stage::Replay && !g.own_device_feeds && moved_device_feed(g.staged, feeds)) {
    g.own_device_feeds = true;
    g.graph.reset();
    g.stage = Stage::Capture;
  }
  if (g.stage == Stage::Capture) {
    if (++g.captures > GraphMode::kMaxCaptures) {
      graph_off("its feeds changed shape " + std::to_string(GraphMode::kMaxCaptures) + " times");
      release_temporaries();
      run_launches(feeds, take, config, results);
      return;
    }
    if (!capture(feeds, config)) {
      // Nothing ran: the run launches its kernels (and reports a kernel's error).
      dirty_ = true;
      release_temporaries();
      run_launches(feeds, take, config, results);
      return;
    }
    g.stage = Stage::Replay;
  } else {
    // This run's feeds into the buffers the graph reads: host feeds by a
    // memcpy into the page-locked copies, device feeds by a copy on the
    // compute stream, ordered before the replay.
    Stream& main = cuda_context(plan_->options.place.device).compute_stream();
    for (std::size_t k = 0; k < feeds.size(); ++k)
      if (feeds[k]->bytes() && feeds[k]->raw_data() != g.staged[k].raw_data())
        copy_between_places(g.staged[k].raw_data(), g.staged[k].place(), feeds[k]->raw_data(),
                            feeds[k]->place(), feeds[k]->bytes(), &main);
    ++runs_;
  }
  // As a Stream: the calls dispatch virtually, so a build without CUDA links.
  Stream& main = cuda_context(plan_->options.place.device).compute_stream();
  g.graph.replay(main);
  main.synchronize();
  for (std::size_t k = 0; k < plan_->fetches.size(); ++k) {
    const Variable* v = vars_[plan_->fetches[k].slot];
    results[k] = v->is<Tensor>() && v->get<Tensor>().is_initialized() ? host_copy(v->get<Tensor>())
                                                                       : Tensor();
  }
}

// Records one run's launches into the graph; false (graph mode then off,
// said once) when the capture failed or a kernel threw while launching.
bool RunState::capture(std::span<Tensor* const> feeds, const RunConfig& config) {
  GraphMode& g = *graph_;
  const ExecutionPlan& p = *plan_;
  // The captured h2d copies read these buffers on every replay.
  g.staged.clear();
  // A feed on the device (a data op placed there) is read where it is, or
  // staged in a device buffer of the graph's own (own_device_feeds); a host
  // feed is staged in page-locked memory.
  for (std::size_t k = 0; k < feeds.size(); ++k) {
    const Place at = feeds[k]->place();
    const bool device = at.kind == PlaceKind::Cuda;
    if (device && !g.own_device_feeds) {
      vars_[p.feeds[k].slot]->get_mutable<Tensor>() = *feeds[k];
      g.staged.push_back(*feeds[k]);
      continue;
    }
    Tensor t = Tensor::empty(feeds[k]->dims(), feeds[k]->dtype(), device ? at : Place::cpu(),
                             device ? &allocator_for(at) : &pinned_allocator());
    if (t.bytes()) copy_between_places(t.raw_data(), t.place(), feeds[k]->raw_data(), at, t.bytes());
    vars_[p.feeds[k].slot]->get_mutable<Tensor>() = t;
    g.staged.push_back(std::move(t));
  }
  // Freed buffers would go back to the cache while the graph still uses them.
  release_temporaries();
  keep_temporaries_ = true;
  Stream& main = cuda_context(p.options.place.device).compute_stream();
  std::vector<std::unique_ptr<Event>> joins;
  std::string why;
  begin_run(config);
  try {
    g.graph.begin_capture(main);
    // Every other stream joins the capture by waiting on the capturing one.
    auto fork = main.create_event();
    fork->record(main);
    for (Stream* s : streams_)
      if (s != &main) s->wait(*fork);
    schedule();
    for (Stream* s : streams_)
      if (s != &main) {
        joins.push_back(s->create_event());
        joins.back()->record(*s);
        main.wait(*joins.back());
      }
  } catch (const std::exception& e) {
    why = std::string("capturing failed: ") + e.what();
  }
  const std::string ended = g.graph.end_capture(main);
  if (error_) {
    // The kernel that broke the capture (one that waits for the host, say)
    // says more than the stream calls that failed after it.
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      why = (error_instr_ == kNoIndex ? std::string("a stream") : plan_->describe(error_instr_)) +
            " failed while it was captured: " + e.what();
    }
  }
  if (why.empty()) why = ended;
  if (why.empty()) return true;
  // A stream whose queued work failed with the capture holds that error until
  // it is synchronized, and would skip the fallback run's kernels.
  synchronize_streams();
  error_ = nullptr;
  graph_off(why);
  return false;
}

}  // namespace kiln
