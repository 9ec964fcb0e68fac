// CPU kernels of kiln.send and kiln.recv (kiln/dialect/send_recv_ops.h).
// Each instruction builds its RendezvousKey once, at pre-analysis (text and
// hash), beside its attributes. send shares its operand's buffer with the
// receiver; recv is an asynchronous kernel over recv_async, woken by the
// run's cancellation manager when the run is cancelled, passes its deadline
// or fails. A recv in a block that runs as a dataflow program
// (has_dataflow_ops) that receives a dead value leaves its output without a
// tensor, which the frame propagator reads as dead; any other recv fails on
// one.
#include <memory>
#include <optional>
#include <string>

#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/rendezvous.h"

namespace kiln::cpu {
namespace {

struct SendInstruction {
  SendOp::Attributes attrs;
  RendezvousKey key;
};

struct RecvInstruction {
  RecvOp::Attributes attrs;
  RendezvousKey key;
  bool dataflow = false;  // its block holds dataflow ops: it passes a dead value on
};

std::shared_ptr<const void> decode_send(Operation* op) {
  auto a = from_attributes<SendOp::Attributes>(op->attributes(), SendOp::name);
  RendezvousKey key(a.src_place, a.dst_place, a.tensor_name);
  return std::make_shared<SendInstruction>(SendInstruction{std::move(a), std::move(key)});
}

std::shared_ptr<const void> decode_recv(Operation* op) {
  auto a = from_attributes<RecvOp::Attributes>(op->attributes(), RecvOp::name);
  RendezvousKey key(a.src_place, a.dst_place, a.tensor_name);
  const Block* block = op->parent_block();
  const bool dataflow = block && has_dataflow_ops(*block);
  return std::make_shared<RecvInstruction>(RecvInstruction{std::move(a), std::move(key), dataflow});
}

LocalRendezvous& rendezvous_of(const KernelContext& ctx, std::string_view op, const RendezvousKey& key) {
  const StepContext* step = ctx.step();
  if (!step || !step->rendezvous)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' of '", key.to_string(),
                "' has no rendezvous: run the program with RunOptions::rendezvous set");
  return *step->rendezvous;
}

void send_kernel(KernelContext& ctx) {
  const auto& s = *static_cast<const SendInstruction*>(ctx.attrs_ptr());
  // After an abort, throws the abort's error: the send fails with it.
  rendezvous_of(ctx, SendOp::name, s.key).send(s.key, ctx.input(0));
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

// The error when the value received does not fit the op's dtype and shape.
std::optional<Error> mismatch(const RecvInstruction& r, const RendezvousValue& v) {
  const std::string where = "op 'kiln.recv' of '" + r.key.to_string() + "'";
  if (v.is_dead)
    return make_error(ErrorKind::InvalidArgument, where,
                      " received a dead value (a sender's untaken kiln.switch output); only a program "
                      "with dataflow ops passes a dead value on");
  const Tensor& t = v.tensor;
  if (!t.is_initialized())
    return make_error(ErrorKind::InvalidArgument, where, " received an uninitialized tensor");
  if (t.dtype() != r.attrs.dtype)
    return make_error(ErrorKind::InvalidArgument, where, ": expected dtype ", to_string(r.attrs.dtype),
                      ", received ", to_string(t.dtype()), " (", t.type_string(), ")");
  const auto& shape = r.attrs.shape;
  bool fits = t.dims().size() == shape.size();
  for (std::size_t k = 0; fits && k < shape.size(); ++k)
    fits = shape[k] < 0 || shape[k] == t.dims()[static_cast<int>(k)];
  if (!fits)
    return make_error(ErrorKind::InvalidArgument, where, ": expected shape ", shape_text(shape),
                      ", received ", t.type_string());
  return std::nullopt;
}

void recv_kernel(KernelContext& ctx, AsyncKernelDone done) {
  const auto& r = *static_cast<const RecvInstruction*>(ctx.attrs_ptr());
  LocalRendezvous& rendezvous = rendezvous_of(ctx, RecvOp::name, r.key);  // throws before `done` goes
  // Three words and two pointers: inline in the callback, no allocation.
  rendezvous.recv_async(
      r.key,
      [&ctx, &r, done](const Error* error, RendezvousValue&& value) {
        if (error) {
          done(error);
          return;
        }
        try {
          if (value.is_dead && r.dataflow) {
            ctx.output(0) = Tensor();
            done(nullptr);
            return;
          }
          if (std::optional<Error> e = mismatch(r, value)) {
            done(&*e);
            return;
          }
        } catch (const Error& e) {
          done(&e);
          return;
        } catch (...) {
          const Error e(ErrorKind::Internal, "op 'kiln.recv': out of memory while checking a value");
          done(&e);
          return;
        }
        ctx.output(0) = std::move(value.tensor);
        done(nullptr);
      },
      ctx.step()->cancellation);
}

const bool registered = [] {
  KernelRegistry& registry = KernelRegistry::instance();
  registry.add(TypeId::get<SendOp>(), SendOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{&send_kernel, "send_kernel", &decode_send});
  registry.add(TypeId::get<RecvOp>(), RecvOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "recv_kernel", &decode_recv, &recv_kernel});
  return true;
}();

}  // namespace
}  // namespace kiln::cpu
