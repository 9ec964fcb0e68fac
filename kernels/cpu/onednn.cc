// onednn.h over oneDNN: its sgemm, and convolutions as primitives created
// once per geometry and thread (with the reorders between kiln's NCHW and
// the blocked layouts the primitive chose), each thread's blocked buffers
// reused by every call, and reordered weights kept while their buffer is
// not written.
#include "onednn.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu_half.h"
#include "intra_op.h"
#include "kiln/kernel/blas.h"
#include "kiln/kernel/cpu_convolution.h"

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The calling thread's OpenMP runtime gets the threads kiln's own kernels
// may use here (intra_op_threads: BLAS's count within this thread's limit).
int use_intra_op_threads() {
  const int n = intra_op_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
  return n;
}

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// A thread's growable 64-byte-aligned buffer.
class Scratch {
 public:
  void* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      size_ = data_ ? bytes : 0;
      if (!data_) throw std::bad_alloc();
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

// What a conv primitive depends on: the geometry, the epilogue (bias, the
// out's residual, the activation), the data layout, the element type and
// the thread count (oneDNN splits the work when it creates the primitive).
struct ConvKey {
  Conv2dGeometry g;
  bool bias;
  ConvActivation act;
  bool channels_last;
  int threads;
  bool add_to_out = false;
  bool allow_winograd = true;
  bool bf16 = false;  // x, w, bias and out (the data gradients too) bf16; else f32
  bool operator==(const ConvKey& o) const {
    return std::memcmp(&g, &o.g, sizeof g) == 0 && bias == o.bias && act == o.act &&
           channels_last == o.channels_last && threads == o.threads && add_to_out == o.add_to_out &&
           allow_winograd == o.allow_winograd && bf16 == o.bf16;
  }
  memory::data_type type() const { return bf16 ? memory::data_type::bf16 : memory::data_type::f32; }
};
struct ConvKeyHash {
  std::size_t operator()(const ConvKey& k) const {
    std::size_t h = std::size_t(k.threads) * 256 + k.bf16 * 128 + k.allow_winograd * 32 + k.add_to_out * 16 +
                    k.channels_last * 8 + k.bias * 4 + std::size_t(k.act);
    const auto* v = reinterpret_cast<const std::int64_t*>(&k.g);
    for (std::size_t i = 0; i < sizeof k.g / sizeof *v; ++i) h = h * 1000003u ^ std::size_t(v[i]);
    return h;
  }
};

// A convolution primitive and the reorders around it (absent where the
// primitive took kiln's plain layout; to_out only when it adds out's
// residual).
struct ConvPlan {
  dnnl::convolution_forward conv;
  memory::desc x_plain, w_plain, out_plain, bias_md, x_md, w_md, out_md;
  std::optional<dnnl::reorder> to_x, to_w, from_out, to_out;
};

memory::dims weight_dims(const Conv2dGeometry& g) {
  if (g.groups == 1) return {g.o, g.c, g.kh, g.kw};
  return {g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw};
}

// Whether k's convolution runs as oneDNN's Winograd F(4x4, 3x3): 3x3,
// stride 1, undilated, ungrouped, channels in whole blocks of 16, on NHWC
// data, where the caller allows it (not for a training program's kiln.conv2d,
// whose weights change every step: transforming them into Winograd's
// layout, one thread, cost 508 ms per ResNet-18 training step at batch 16
// against 200 ms it saved), nor in bf16 (oneDNN's is f32 only). A third to
// a half of the direct kernel's time on ResNet's convolutions (blocked layouts
// inside, so x and out are reordered around it; it still wins), with
// errors of the same order as the direct one's reassociation.
bool winograd(const ConvKey& k) {
  const Conv2dGeometry& g = k.g;
  return k.channels_last && k.allow_winograd && !k.bf16 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 &&
         g.dh == 1 && g.dw == 1 && g.groups == 1 && g.c % 16 == 0 && g.o % 16 == 0;
}

// Whether oneDNN answered with its reference kernel: orders of magnitude
// slower than its jitted ones, and than reordering into their layout.
bool reference_kernel(const dnnl::primitive_desc_base& pd) {
  return std::string_view(pd.impl_info_str()).starts_with("ref");
}

// A primitive for k as `algorithm`, its layouts left to oneDNN ("any"; x
// and out NHWC with channels_last unless Winograd, or unless oneDNN has only
// its reference kernel for NHWC); throws dnnl::error when oneDNN has none.
std::unique_ptr<ConvPlan> make_conv_plan(const ConvKey& k, dnnl::algorithm algorithm, bool nhwc_inside = true) {
  const Conv2dGeometry& g = k.g;
  const auto type = k.type();
  const Tag data = k.channels_last ? Tag::nhwc : Tag::nchw;
  const bool wino = algorithm == dnnl::algorithm::convolution_winograd;
  const Tag chosen = k.channels_last && !wino && nhwc_inside ? Tag::nhwc : Tag::any;
  auto p = std::make_unique<ConvPlan>();
  p->x_plain = memory::desc({g.n, g.c, g.h, g.w}, type, data);
  p->w_plain = memory::desc(weight_dims(g), type, g.groups == 1 ? Tag::oihw : Tag::goihw);
  p->out_plain = memory::desc({g.n, g.o, g.ho, g.wo}, type, data);
  p->bias_md = k.bias ? memory::desc({g.o}, type, Tag::x) : memory::desc();
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, algorithm, memory::desc({g.n, g.c, g.h, g.w}, type, chosen), memory::desc(weight_dims(g), type, Tag::any),
      p->bias_md, memory::desc({g.n, g.o, g.ho, g.wo}, type, chosen), {g.sh, g.sw},
      {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {g.pb, g.pr});
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  if (k.add_to_out) ops.append_sum(1.0f);  // dst = conv + bias + dst, then the activation
  if (k.act == ConvActivation::Relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  if (k.act == ConvActivation::Relu6) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 6.0f);
  if (k.act == ConvActivation::Silu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
  attr.set_post_ops(ops);
  const dnnl::convolution_forward::primitive_desc pd(desc, attr, cpu_engine());
  if (chosen == Tag::nhwc && reference_kernel(pd)) return make_conv_plan(k, algorithm, false);
  p->conv = dnnl::convolution_forward(pd);
  p->x_md = pd.src_desc(), p->w_md = pd.weights_desc(), p->out_md = pd.dst_desc();
  const auto& e = cpu_engine();
  if (p->x_md != p->x_plain) p->to_x = dnnl::reorder(dnnl::reorder::primitive_desc(e, p->x_plain, e, p->x_md));
  if (p->w_md != p->w_plain) p->to_w = dnnl::reorder(dnnl::reorder::primitive_desc(e, p->w_plain, e, p->w_md));
  if (p->out_md != p->out_plain) p->from_out = dnnl::reorder(dnnl::reorder::primitive_desc(e, p->out_md, e, p->out_plain));
  if (k.add_to_out && p->from_out)
    p->to_out = dnnl::reorder(dnnl::reorder::primitive_desc(e, p->out_plain, e, p->out_md));
  return p;
}

// This thread's plan for k; null when oneDNN has no primitive for it.
ConvPlan* conv_plan(const ConvKey& k) {
  thread_local std::unordered_map<ConvKey, std::unique_ptr<ConvPlan>, ConvKeyHash> plans;
  auto it = plans.find(k);
  if (it != plans.end()) return it->second.get();
  std::unique_ptr<ConvPlan> p;
  for (const auto algorithm : {dnnl::algorithm::convolution_winograd, dnnl::algorithm::convolution_direct}) {
    if (p || (algorithm == dnnl::algorithm::convolution_winograd && !winograd(k))) continue;
    try {
      p = make_conv_plan(k, algorithm);
    } catch (const dnnl::error&) {  // none (Winograd's needs AVX-512): the next, or kiln's own
    }
  }
  return plans.emplace(k, std::move(p)).first->second.get();
}

// Reordered weights by (buffer, offset, plan), refilled when the buffer's
// writes changed; the least recently used dropped beyond kWeightCacheBytes
// per thread (entries of buffers that are gone wait for that). A model
// whose weights outgrow it reorders every weight on every run (each run
// evicts what the next needs first), and Winograd's weights take 4x their
// 3x3 size: 1 GiB holds ResNet-152's (~0.5 GiB so transformed).
class WeightCache {
 public:
  static constexpr std::size_t kWeightCacheBytes = std::size_t(1) << 30;
  // An entry's `writes` before its first fill completes.
  static constexpr std::uint64_t kUnfilled = ~std::uint64_t(0);

  struct Key {
    std::uint64_t buffer, offset;
    const ConvPlan* plan;
    bool operator==(const Key& o) const {
      return buffer == o.buffer && offset == o.offset && plan == o.plan;
    }
  };
  struct Entry {
    Key key;
    std::uint64_t writes;  // the buffer's writes its contents reflect
    Scratch data;
    std::size_t bytes;
  };

  // The entry for w under plan, with `bytes` of memory; its contents are
  // current when entry.writes == w.writes (the caller sets it after a fill).
  Entry& get(const ContentsIdentity& w, const ConvPlan* plan, std::size_t bytes) {
    const Key key{w.buffer, w.offset, plan};
    auto it = index_.find(key);
    if (it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      return *it->second;
    }
    while (!entries_.empty() && bytes_ + bytes > kWeightCacheBytes) {
      bytes_ -= entries_.back().bytes;
      index_.erase(entries_.back().key);
      entries_.pop_back();
    }
    Entry e{key, kUnfilled, {}, bytes};
    e.data.get(bytes);  // allocated before the entry is listed: a failure leaves no entry
    entries_.push_front(std::move(e));
    index_.emplace(key, entries_.begin());
    bytes_ += bytes;
    return entries_.front();
  }

 private:
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<std::uint64_t>()(k.buffer * 31 + k.offset) ^ std::hash<const void*>()(k.plan);
    }
  };
  std::list<Entry> entries_;
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  std::size_t bytes_ = 0;
};

// w in the plan's weight layout: w itself, a reorder into this thread's
// buffer, or the cached reorder of w's contents.
memory conv_weights(const ConvPlan& p, const void* w, const ContentsIdentity& weights,
                    dnnl::stream& s) {
  const auto& e = cpu_engine();
  memory user(p.w_plain, e, const_cast<void*>(w));
  if (!p.to_w) return user;
  thread_local Scratch buffer;
  thread_local WeightCache cache;
  if (weights.buffer == 0) {
    memory blocked(p.w_md, e, buffer.get(p.w_md.get_size()));
    p.to_w->execute(s, user, blocked);
    return blocked;
  }
  WeightCache::Entry& entry = cache.get(weights, &p, p.w_md.get_size());
  memory blocked(p.w_md, e, entry.data.get(entry.bytes));
  if (entry.writes != weights.writes) {
    entry.writes = WeightCache::kUnfilled;  // until this fill is done
    p.to_w->execute(s, user, blocked);
    entry.writes = weights.writes;
  }
  return blocked;
}

}  // namespace

bool available() { return true; }

namespace {

// A bf16 product's shape and strides: what its primitive depends on.
struct GemmKey {
  bool ta, tb;
  std::int64_t m, n, k, lda, ldb, ldc;
  bool operator==(const GemmKey&) const = default;
};
struct GemmKeyHash {
  std::size_t operator()(const GemmKey& g) const {
    std::size_t h = std::size_t(g.ta) * 2 + g.tb;
    for (const std::int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) h = h * 1000003u ^ std::size_t(v);
    return h;
  }
};

// A one-thread matmul primitive and its operands' layouts.
struct GemmPlan {
  dnnl::matmul matmul;
  memory::desc a, b, c;
};

// g's plan (made with the calling thread's OpenMP count at 1); none where
// oneDNN has no primitive for it or only its reference kernel.
std::optional<GemmPlan> make_gemm_plan(const GemmKey& g) {
  const auto bf16 = memory::data_type::bf16;
  GemmPlan p;
  try {
    p.a = memory::desc({g.m, g.k}, bf16, g.ta ? memory::dims{1, g.lda} : memory::dims{g.lda, 1});
    p.b = memory::desc({g.k, g.n}, bf16, g.tb ? memory::dims{1, g.ldb} : memory::dims{g.ldb, 1});
    p.c = memory::desc({g.m, g.n}, bf16, memory::dims{g.ldc, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), cpu_engine());
    if (reference_kernel(pd)) return std::nullopt;
    p.matmul = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  return p;
}

}  // namespace

bool bf16_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, std::uint16_t* c, std::int64_t ldc) {
  if (!native_bf16()) return false;
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  // Kept for good, as the convolutions' plans are: a static graph's products
  // have a few shapes (a batch folded into m included), each jitted once per
  // thread.
  thread_local std::unordered_map<GemmKey, std::optional<GemmPlan>, GemmKeyHash> plans;
  const GemmKey key{ta, tb, m, n, k, lda, ldb, ldc};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_gemm_plan(key)).first;
  if (!it->second) return false;
  const GemmPlan& p = *it->second;
  const auto& e = cpu_engine();
  try {
    dnnl::stream& s = thread_stream();
    p.matmul.execute(s, {{DNNL_ARG_SRC, memory(p.a, e, const_cast<std::uint16_t*>(a))},
                         {DNNL_ARG_WEIGHTS, memory(p.b, e, const_cast<std::uint16_t*>(b))},
                         {DNNL_ARG_DST, memory(p.c, e, c)}});
    s.wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

bool sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
         dnnl_success;
}

namespace {

// The blocked copies of the last two results this thread's primitives
// computed in a blocked layout and reordered into kiln's (name_result).
// A convolution writes its blocked result into the slot its x was not
// read from; the result is named only once its kernel is done with out.
class BlockedResults {
 public:
  // The slot holding `contents` in layout md, or -1.
  int find(const ContentsIdentity& contents, const memory::desc& md) const {
    for (int i = 0; i < 2; ++i)
      if (slots_[i].contents.known_as(contents) && slots_[i].md == md) return i;
    return -1;
  }
  void* data(int slot) { return slots_[slot].data.get(slots_[slot].md.get_size()); }
  // The slot for a new blocked result in layout md (not `reading`): its
  // copy forgotten until name() names it.
  int begin(const memory::desc& md, int reading) {
    const int slot = reading >= 0 ? 1 - reading : 1 - newest_;
    slots_[slot].contents = {};
    slots_[slot].md = md;
    return slot;
  }
  void finish(int slot) { pending_ = slot; }  // -1: the last result has no copy
  void name(const ContentsIdentity& contents) {
    if (pending_ < 0) return;
    slots_[pending_].contents = contents;
    newest_ = pending_;
    pending_ = -1;
  }

 private:
  struct Slot {
    ContentsIdentity contents;
    memory::desc md;
    Scratch data;
  };
  Slot slots_[2];
  int newest_ = 1, pending_ = -1;
};

BlockedResults& blocked_results() {
  thread_local BlockedResults results;
  return results;
}

// The residual the sum post-op adds, into out_mem (out itself, or the
// blocked result's slot, which may hold the residual's copy already).
void place_residual(const ConvPlan* p, const ConvLayout& layout, bool in_slot, memory& out_mem, void* out,
                    dnnl::stream& s) {
  if (!p->to_out) {
    if (layout.residual != out) std::memcpy(out, layout.residual, p->out_plain.get_size());
  } else if (!in_slot) {
    memory residual(p->out_plain, cpu_engine(), const_cast<void*>(layout.residual));
    p->to_out->execute(s, residual, out_mem);
  }
}

void run_conv(const ConvPlan* p, const void* x, const void* w, const void* bias, void* out,
              const ContentsIdentity& weights, const ConvLayout& layout) {
  const auto& e = cpu_engine();
  dnnl::stream& s = thread_stream();
  BlockedResults& kept = blocked_results();
  kept.finish(-1);
  thread_local Scratch x_buffer;
  memory x_user(p->x_plain, e, const_cast<void*>(x)), out_user(p->out_plain, e, out);
  const int x_slot = p->to_x ? kept.find(layout.x_contents, p->x_md) : -1;
  memory x_mem = !p->to_x        ? x_user
                 : x_slot >= 0 ? memory(p->x_md, e, kept.data(x_slot))
                               : memory(p->x_md, e, x_buffer.get(p->x_md.get_size()));
  const int residual_slot = layout.residual && p->to_out ? kept.find(layout.residual_contents, p->out_md) : -1;
  const int out_slot = p->from_out ? kept.begin(p->out_md, x_slot) : -1;  // its bytes stay
  memory out_mem = p->from_out ? memory(p->out_md, e, kept.data(out_slot)) : out_user;
  if (p->to_x && x_slot < 0) p->to_x->execute(s, x_user, x_mem);
  if (layout.residual) place_residual(p, layout, residual_slot >= 0 && residual_slot == out_slot, out_mem, out, s);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x_mem},
                                       {DNNL_ARG_WEIGHTS, conv_weights(*p, w, weights, s)},
                                       {DNNL_ARG_DST, out_mem}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(p->bias_md, e, const_cast<void*>(bias)));
  p->conv.execute(s, args);
  if (p->from_out) p->from_out->execute(s, out_mem, out_user);
  s.wait();
  kept.finish(out_slot);
}

}  // namespace

namespace {

// A primitive's operand in the layout the primitive chose, and the reorder
// between it and kiln's plain layout where the two differ.
struct Operand {
  memory::desc plain, chosen;
  std::optional<dnnl::reorder> reorder;  // plain -> chosen for inputs, back for outputs
};

Operand operand(const memory::desc& plain, const memory::desc& chosen, bool input) {
  Operand o{plain, chosen, std::nullopt};
  const auto& e = cpu_engine();
  if (chosen != plain)
    o.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(e, plain, e, chosen))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(e, chosen, e, plain));
  return o;
}

// The primitives of a convolution's two gradients, with their operands.
struct ConvGradPlan {
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  Operand data_dout, data_w, data_dx, weights_x, weights_dout, weights_dw;
};

// The primitive descriptors of g's two gradients (made with a forward
// one as their hint) with x and dout laid out as `data`, of `type`; the
// weight gradient is f32 in either type (its slices are summed in f32).
struct ConvGradDescs {
  dnnl::convolution_backward_data::primitive_desc data;
  dnnl::convolution_backward_weights::primitive_desc weights;
};

ConvGradDescs conv_grad_descs(const Conv2dGeometry& g, Tag data, memory::data_type type) {
  const auto& e = cpu_engine();
  const memory::dims strides{g.sh, g.sw}, dilates{g.dh - 1, g.dw - 1}, pl{g.pt, g.pl}, pr{g.pb, g.pr};
  const memory::desc x({g.n, g.c, g.h, g.w}, type, data), out({g.n, g.o, g.ho, g.wo}, type, data),
      w(weight_dims(g), type, Tag::any), dw(weight_dims(g), memory::data_type::f32, Tag::any);
  const auto direct = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc hint(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x, w, memory::desc(), out,
                                      strides, dilates, pl, pr),
      e);
  return {{dnnl::convolution_backward_data::desc(direct, x, w, out, strides, dilates, pl, pr), e, hint},
          {dnnl::convolution_backward_weights::desc(direct, x, dw, out, strides, dilates, pl, pr), e, hint}};
}

// Primitives for g's gradients; NCHW data with the layouts inside left to
// oneDNN, or NHWC data taken as it is (channels_last) unless oneDNN has no
// kernel or only its reference one for that (then reordered like NCHW
// data). Throws dnnl::error when oneDNN has none.
std::unique_ptr<ConvGradPlan> make_conv_grad_plan(const Conv2dGeometry& g, bool channels_last,
                                                  memory::data_type type) {
  std::optional<ConvGradDescs> d;
  try {
    if (channels_last) d = conv_grad_descs(g, Tag::nhwc, type);
  } catch (const dnnl::error&) {  // none for NHWC as it is: reordered, below
  }
  if (!d || reference_kernel(d->data) || reference_kernel(d->weights)) d = conv_grad_descs(g, Tag::any, type);
  const Tag plain = channels_last ? Tag::nhwc : Tag::nchw, w_tag = g.groups == 1 ? Tag::oihw : Tag::goihw;
  const memory::desc x_plain({g.n, g.c, g.h, g.w}, type, plain), out_plain({g.n, g.o, g.ho, g.wo}, type, plain),
      w_plain(weight_dims(g), type, w_tag), dw_plain(weight_dims(g), memory::data_type::f32, w_tag);
  auto p = std::make_unique<ConvGradPlan>();
  p->data = dnnl::convolution_backward_data(d->data);
  p->weights = dnnl::convolution_backward_weights(d->weights);
  p->data_dout = operand(out_plain, d->data.diff_dst_desc(), true);
  p->data_w = operand(w_plain, d->data.weights_desc(), true);
  p->data_dx = operand(x_plain, d->data.diff_src_desc(), false);
  p->weights_x = operand(x_plain, d->weights.src_desc(), true);
  p->weights_dout = operand(out_plain, d->weights.diff_dst_desc(), true);
  p->weights_dw = operand(dw_plain, d->weights.diff_weights_desc(), false);
  return p;
}

// This thread's gradient plan for g at `threads` threads; null when oneDNN
// has none.
ConvGradPlan* conv_grad_plan(const Conv2dGeometry& g, bool channels_last, int threads, bool bf16) {
  thread_local std::unordered_map<ConvKey, std::unique_ptr<ConvGradPlan>, ConvKeyHash> plans;
  ConvKey k{g, false, ConvActivation::None, channels_last, threads};
  k.bf16 = bf16;
  auto it = plans.find(k);
  if (it != plans.end()) return it->second.get();
  std::unique_ptr<ConvGradPlan> p;
  try {
    p = make_conv_grad_plan(g, channels_last, k.type());
  } catch (const dnnl::error&) {
  }
  return plans.emplace(k, std::move(p)).first->second.get();
}

// Input operand o over p: p itself, or p reordered into `buffer`.
memory input(const Operand& o, const void* p, Scratch& buffer, dnnl::stream& s) {
  memory user(o.plain, cpu_engine(), const_cast<void*>(p));
  if (!o.reorder) return user;
  memory m(o.chosen, cpu_engine(), buffer.get(o.chosen.get_size()));
  o.reorder->execute(s, user, m);
  return m;
}

// Output operand o over p: p itself, or `buffer` (finish_output moves it
// into p).
memory output(const Operand& o, void* p, Scratch& buffer) {
  if (!o.reorder) return memory(o.plain, cpu_engine(), p);
  return memory(o.chosen, cpu_engine(), buffer.get(o.chosen.get_size()));
}

void finish_output(const Operand& o, memory m, void* p, dnnl::stream& s) {
  if (!o.reorder) return;
  memory user(o.plain, cpu_engine(), p);
  o.reorder->execute(s, m, user);
}

}  // namespace

namespace {

constexpr std::int64_t kWeightGradSlices = 4;

// dout as the data gradient reordered it, for the weight gradient's slices
// to read in place: a layout whose images lie one after another, each
// image_bytes long (data null: none).
struct SharedDout {
  const std::byte* data = nullptr;
  Tag tag = Tag::undef;
  memory::data_type type = memory::data_type::f32;
  std::size_t image_bytes = 0;

  // Shared dout's images [first, first + md.dims()[0]) as md, when md is its layout.
  std::optional<memory> images(const memory::desc& md, std::int64_t first) const {
    const memory::dims d = md.dims();
    if (data == nullptr || md != memory::desc(d, type, tag)) return std::nullopt;
    return memory(md, cpu_engine(), const_cast<std::byte*>(data) + first * image_bytes);
  }
};

SharedDout share(const memory& dout, const memory::desc& md) {
  const memory::dims d = md.dims();
  for (Tag t : {Tag::nChw16c, Tag::nChw8c, Tag::nhwc})
    if (md == memory::desc(d, md.data_type(), t))
      return {static_cast<const std::byte*>(dout.get_data_handle()), t, md.data_type(), md.get_size() / d[0]};
  return {};
}

// src (as src_md) into dst (as dst_md) on this thread's stream.
void reorder_into(const memory::desc& src_md, void* src, const memory::desc& dst_md, void* dst) {
  const auto& e = cpu_engine();
  memory from(src_md, e, src), to(dst_md, e, dst);
  dnnl::reorder(dnnl::reorder::primitive_desc(e, src_md, e, dst_md)).execute(thread_stream(), from, to);
  thread_stream().wait();
}

// The weight gradient's inputs: x and dout, f32 or bf16.
struct WeightGradInputs {
  const std::byte* x;
  const std::byte* dout;
  bool bf16;
  std::int64_t elem_bytes() const { return bf16 ? 2 : 4; }
};

// Slice c of `slices` of g's batch: its weight gradient (f32) into `slot`
// in the primitive's own layout, or in plain oihw when that one needs more
// than slot_bytes; `layout` says which. On this thread alone.
bool weight_grad_slice(const WeightGradInputs& in, const SharedDout& shared,
                       const Conv2dGeometry& g, bool channels_last, std::int64_t c, std::int64_t slices,
                       std::byte* slot, std::size_t slot_bytes, memory::desc& layout) {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);  // the primitive's team: this thread
  const std::int64_t first = g.n * c / slices;
  Conv2dGeometry part = g;
  part.n = g.n * (c + 1) / slices - first;
  const ConvGradPlan* q = conv_grad_plan(part, channels_last, 1, in.bf16);
  if (q == nullptr) return false;
  try {
    dnnl::stream& s = thread_stream();
    thread_local Scratch x_buffer, dout_buffer;
    const std::optional<memory> in_place = shared.images(q->weights_dout.chosen, first);
    const memory dout_mem =
        in_place ? *in_place
                 : input(q->weights_dout, in.dout + first * g.o * g.ho * g.wo * in.elem_bytes(), dout_buffer, s);
    layout = q->weights_dw.chosen.get_size() <= slot_bytes ? q->weights_dw.chosen : q->weights_dw.plain;
    thread_local Scratch dw_buffer;
    const memory dw_mem = layout == q->weights_dw.chosen
                              ? memory(layout, cpu_engine(), slot)
                              : output(q->weights_dw, slot, dw_buffer);
    const std::byte* x = in.x + first * g.c * g.h * g.w * in.elem_bytes();
    q->weights.execute(s, {{DNNL_ARG_SRC, input(q->weights_x, x, x_buffer, s)},
                           {DNNL_ARG_DIFF_DST, dout_mem},
                           {DNNL_ARG_DIFF_WEIGHTS, dw_mem}});
    if (layout != q->weights_dw.chosen) finish_output(q->weights_dw, dw_mem, slot, s);
    s.wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// dw = the slots' sum in slice order, added in their common layout and
// reordered once (slots in other layouts are made plain first): addition
// is elementwise, so the bits are those of adding the plain gradients.
void sum_slices(std::byte* slots, std::size_t slot_bytes, std::span<memory::desc> layout,
                const Operand& dw_operand, float* dw) {
  const memory::desc& plain = dw_operand.plain;
  const bool same = std::all_of(layout.begin(), layout.end(),
                                [&](const memory::desc& md) { return md == layout[0]; });
  thread_local Scratch staging;
  for (std::size_t c = 0; c < layout.size() && !same; ++c) {
    if (layout[c] == plain) continue;
    void* flat = staging.get(plain.get_size());
    reorder_into(layout[c], slots + c * slot_bytes, plain, flat);
    std::memcpy(slots + c * slot_bytes, flat, plain.get_size());
    layout[c] = plain;
  }
  auto* sum = reinterpret_cast<float*>(slots);
  const std::int64_t n = static_cast<std::int64_t>(layout[0].get_size() / sizeof(float));
  const std::int64_t slices = static_cast<std::int64_t>(layout.size());
  parallel_for(n, items_per_range(slices * std::int64_t(sizeof(float))), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = 1; c < slices; ++c) {
      const auto* part = reinterpret_cast<const float*>(slots + c * slot_bytes);
      for (std::int64_t i = b; i < e; ++i) sum[i] += part[i];
    }
  });
  if (layout[0] == plain)
    std::memcpy(dw, sum, plain.get_size());
  else if (layout[0] != dw_operand.chosen)
    reorder_into(layout[0], sum, plain, dw);
  else {  // the plan's own reorder, made once
    finish_output(dw_operand, memory(layout[0], cpu_engine(), sum), dw, thread_stream());
    thread_stream().wait();
  }
}

bool weight_grad_by_slices(const WeightGradInputs& in, const SharedDout& shared, float* dw,
                           const Conv2dGeometry& g, bool channels_last, const ConvGradPlan& p) {
  const std::int64_t slices = std::min(g.n, kWeightGradSlices);
  const std::size_t slot_bytes =
      (std::max(p.weights_dw.chosen.get_size(), p.weights_dw.plain.get_size()) + 63) / 64 * 64;
  thread_local Scratch slots_buffer;
  auto* slots = static_cast<std::byte*>(slots_buffer.get(slices * slot_bytes));
  std::array<memory::desc, kWeightGradSlices> layout;
  std::atomic<bool> ok{true};
  parallel_for(slices, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1 && ok; ++c)
      if (!weight_grad_slice(in, shared, g, channels_last, c, slices, slots + c * slot_bytes, slot_bytes,
                             layout[c]))
        ok = false;
  });
  if (!ok) return false;
  try {
    sum_slices(slots, slot_bytes, std::span(layout.data(), slices), p.weights_dw, dw);
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// dx through p's data primitive; dout's reordered copy, when there is one,
// left in `shared` for the weight gradient.
bool data_grad(const ConvGradPlan& p, const void* dout, const void* w, void* dx, SharedDout& shared) {
  try {
    dnnl::stream& s = thread_stream();
    thread_local Scratch dout_buffer, w_buffer, dx_buffer;
    const memory dout_mem = input(p.data_dout, dout, dout_buffer, s);
    const memory dx_mem = output(p.data_dx, dx, dx_buffer);
    p.data.execute(s, {{DNNL_ARG_DIFF_DST, dout_mem},
                       {DNNL_ARG_WEIGHTS, input(p.data_w, w, w_buffer, s)},
                       {DNNL_ARG_DIFF_SRC, dx_mem}});
    finish_output(p.data_dx, dx_mem, dx, s);
    s.wait();
    if (p.data_dout.reorder) shared = share(dout_mem, p.data_dout.chosen);
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// conv2d_backward of f32 or bf16 operands (dw f32 either way).
ConvGrads backward(const void* x, const void* w, const void* dout, void* dx, float* dw, const Conv2dGeometry& g,
                   bool channels_last, bool bf16) {
  ConvGrads done;
  const ConvGradPlan* p = conv_grad_plan(g, channels_last, use_intra_op_threads(), bf16);
  if (p == nullptr) return done;
  SharedDout shared;
  if (dx != nullptr) done.dx = data_grad(*p, dout, w, dx, shared);
  const WeightGradInputs in{static_cast<const std::byte*>(x), static_cast<const std::byte*>(dout), bf16};
  if (dw != nullptr && g.n > 0 && g.ho * g.wo > 0) done.dw = weight_grad_by_slices(in, shared, dw, g, channels_last, *p);
  return done;
}

// conv2d_forward of f32 or bf16 operands.
bool forward(const void* x, const void* w, const void* bias, void* out, const Conv2dGeometry& g,
             ConvActivation act, const ContentsIdentity& weights, const ConvLayout& layout, bool bf16) {
  if (act == ConvActivation::Silu && !layout.channels_last && !bf16) return false;  // see onednn.h
  ConvKey k{g, bias != nullptr, act, layout.channels_last, use_intra_op_threads(), layout.residual != nullptr,
            layout.allow_winograd};
  k.bf16 = bf16;
  const ConvPlan* p = conv_plan(k);
  if (p == nullptr) return false;
  try {
    run_conv(p, x, w, bias, out, weights, layout);
  } catch (const dnnl::error&) {
    return false;  // the caller's own convolution writes all of out
  }
  return true;
}

}  // namespace

void name_result(const ContentsIdentity& out_contents) { blocked_results().name(out_contents); }

bool native_bf16() {
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

ConvGrads conv2d_backward(const float* x, const float* w, const float* dout, float* dx, float* dw,
                          const Conv2dGeometry& g, bool channels_last) {
  return backward(x, w, dout, dx, dw, g, channels_last, false);
}

ConvGrads conv2d_backward(const std::uint16_t* x, const std::uint16_t* w, const std::uint16_t* dout,
                          std::uint16_t* dx, std::uint16_t* dw, const Conv2dGeometry& g, bool channels_last) {
  if (!native_bf16()) return {};
  thread_local std::vector<float> dw32;
  if (dw != nullptr) dw32.resize(static_cast<std::size_t>(g.o * (g.c / g.groups) * g.kh * g.kw));
  ConvGrads done = backward(x, w, dout, dx, dw != nullptr ? dw32.data() : nullptr, g, channels_last, true);
  if (done.dw) f32_to_bf16(dw32.data(), dw, static_cast<std::int64_t>(dw32.size()));
  return done;
}

bool conv2d_forward(const float* x, const float* w, const float* bias, float* out, const Conv2dGeometry& g,
                    ConvActivation act, const ContentsIdentity& weights, const ConvLayout& layout) {
  return forward(x, w, bias, out, g, act, weights, layout, false);
}

bool conv2d_forward(const std::uint16_t* x, const std::uint16_t* w, const std::uint16_t* bias, std::uint16_t* out,
                    const Conv2dGeometry& g, ConvActivation act, const ContentsIdentity& weights,
                    const ConvLayout& layout) {
  return native_bf16() && forward(x, w, bias, out, g, act, weights, layout, true);
}

}  // namespace kiln::cpu::onednn

namespace kiln {
bool cpu_convolutions_prefer_channels_last() { return true; }
bool cpu_convolutions_compute_bf16() { return cpu::onednn::native_bf16(); }
}  // namespace kiln
