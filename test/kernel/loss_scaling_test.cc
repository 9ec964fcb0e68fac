// Loss scaling's kernels on the CPU (kiln/dialect/loss_scaling_ops.h) and
// the update ops' skip flag (kiln/dialect/optimizer_ops.h): unscaling in
// every float dtype with the overflow check, the scale's grow / shrink
// rule step by step, an update that skips leaving everything as it was (in
// place, out of place, merged), and the errors that name the op and operand.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/half_test_util.h"
#include "kernel/kernel_test_util.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/kernel/loss_scaling_math.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::run_kernel;

namespace {

Tensor f32_one(float v) { return Tensor::from_vector<float>(Dims{1}, {v}); }
Tensor i32_one(std::int32_t v) { return Tensor::from_vector<std::int32_t>(Dims{1}, {v}); }
Tensor flag(bool v) { return Tensor::from_vector<bool>(Dims{1}, {v}); }

kiln_test::KernelRun unscale(const std::vector<Tensor>& in) {
  return run_kernel(in, [](Builder& b, const std::vector<Value>& v) {
    return b.create<CheckFiniteAndUnscaleOp>(v[0], std::vector<Value>(v.begin() + 1, v.end())).operation();
  });
}

bool found_inf(const kiln_test::KernelRun& r) { return r.results.back().to_vector<bool>().at(0); }

const UpdateLossScaling_Op::Attributes kRule{/*incr_every_n_steps=*/3, /*decr_every_n_nan_or_inf=*/2,
                                             /*incr_ratio=*/2.0, /*decr_ratio=*/0.5};

}  // namespace

TEST_CASE("check_finite_and_unscale divides every tensor by the scale and finds no overflow in finite "
          "values (f32, f64, bf16, f16)",
          "[kernel][amp]") {
  const Tensor a = filled<float>(Dims{3, 5}, -100, 100, 1);
  const Tensor b = filled<double>(Dims{7}, -100, 100, 2);
  const Tensor c = kiln_test::random_half(Dims{4, 4}, DataType::BFloat16, 3);
  const Tensor d = kiln_test::random_half(Dims{9}, DataType::Float16, 4);
  auto r = unscale({f32_one(1024.f), a, b, c, d});
  REQUIRE(r.results.size() == 5);
  CHECK_FALSE(found_inf(r));
  const auto av = a.to_vector<float>(), ao = r.out(0).to_vector<float>();
  for (std::size_t i = 0; i < av.size(); ++i) CHECK(ao[i] == av[i] * (1.f / 1024.f));
  const auto bv = b.to_vector<double>(), bo = r.out(1).to_vector<double>();
  for (std::size_t i = 0; i < bv.size(); ++i) CHECK(bo[i] == bv[i] * (1.0 / 1024.0));
  // 16-bit values: widened, times 2^-10 (exact for these magnitudes), rounded.
  for (auto [in, out] : {std::pair{c, r.out(2)}, std::pair{d, r.out(3)}}) {
    const auto* x = static_cast<const std::uint16_t*>(in.raw_data());
    const auto* y = static_cast<const std::uint16_t*>(out.raw_data());
    for (std::int64_t i = 0; i < in.numel(); ++i)
      CHECK(kiln_test::from_half(y[i], in.dtype()) == kiln_test::from_half(x[i], in.dtype()) / 1024.f);
  }
}

TEST_CASE("check_finite_and_unscale sets found_inf for an inf or a nan in any tensor of any dtype",
          "[kernel][amp]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    INFO("bad value " << bad);
    Tensor a = filled<float>(Dims{6}, -1, 1, 1), b = filled<float>(Dims{6}, -1, 1, 2);
    CHECK_FALSE(found_inf(unscale({f32_one(8.f), a, b})));
    b.data<float>()[5] = bad;
    CHECK(found_inf(unscale({f32_one(8.f), a, b})));
    for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
      Tensor h = kiln_test::random_half(Dims{5}, dt, 7);
      static_cast<std::uint16_t*>(h.raw_data())[2] = kiln_test::to_half(bad, dt);
      CHECK(found_inf(unscale({f32_one(8.f), a, h})));
    }
  }
  // A finite f16 gradient that the scale divides is never an overflow.
  Tensor h = Tensor::empty(Dims{1}, DataType::Float16);
  static_cast<std::uint16_t*>(h.raw_data())[0] = kiln_test::to_half(65504.f, DataType::Float16);
  CHECK_FALSE(found_inf(unscale({f32_one(65536.f), h})));
}

TEST_CASE("update_loss_scaling_ shrinks the scale after N overflowing steps in a row and grows it after "
          "M good steps in a row, in place",
          "[kernel][amp]") {
  // incr every 3 good steps (×2), decr every 2 overflows in a row (×0.5).
  struct Step {
    bool found;
    float scale;
    std::int32_t good, bad;
  };
  const Step want[] = {{false, 16, 1, 0}, {false, 16, 2, 0}, {false, 32, 0, 0}, {true, 32, 0, 1},
                       {false, 32, 1, 0}, {true, 32, 0, 1},  {true, 16, 0, 0},  {true, 16, 0, 1},
                       {true, 8, 0, 0},   {false, 8, 1, 0}};
  Tensor scale = f32_one(16.f), good = i32_one(0), bad = i32_one(0);
  for (const Step& s : want) {
    INFO("found_inf " << s.found);
    auto r = run_kernel({flag(s.found), scale, good, bad}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<UpdateLossScaling_Op>(v[0], v[1], v[2], v[3], kRule).operation();
    });
    CHECK(r.out(0).shares_buffer_with(scale));  // the state's own buffers
    CHECK(scale.to_vector<float>().at(0) == s.scale);
    CHECK(good.to_vector<std::int32_t>().at(0) == s.good);
    CHECK(bad.to_vector<std::int32_t>().at(0) == s.bad);
  }
  // Growth that would overflow f32 keeps the scale.
  const LossScaleRule grow{1, 1, 2.0, 0.5};
  CHECK(next_loss_scale({3e38f, 0, 0}, false, grow).scale == 3e38f);
  CHECK(next_loss_scale({3e38f, 0, 0}, true, grow).scale == 1.5e38f);
}

TEST_CASE("the loss-scaling ops refuse operands of the wrong dtype or size and bad attributes, naming them",
          "[kernel][amp]") {
  using TS = kiln_test::TypeSpec;
  const auto f32 = DataType::Float32, i32 = DataType::Int32, b1 = DataType::Bool;
  Program p;
  auto update = [&](std::vector<TS> in, UpdateLossScaling_Op::Attributes a = kRule) {
    Builder b(p);
    std::vector<Value> v;
    for (std::size_t i = 0; i < in.size(); ++i)
      v.push_back(b.create<DataOp>("u" + std::to_string(i), in[i].dims, in[i].dtype).result());
    b.create<UpdateLossScaling_Op>(v[0], v[1], v[2], v[3], a);
  };
  const std::vector<TS> ok{TS{b1, {1}}, TS{f32, {1}}, TS{i32, {1}}, TS{i32, {1}}};
  CHECK_NOTHROW(update(ok));
  auto bad = ok;
  bad[0] = TS{f32, {1}};
  KILN_CHECK_ERROR(update(bad), InvalidArgument, {"kiln.update_loss_scaling_", "'found_inf'", "bool"});
  bad = ok;
  bad[1] = TS{f32, {2}};
  KILN_CHECK_ERROR(update(bad), InvalidArgument, {"'scale'", "one element"});
  bad = ok;
  bad[3] = TS{DataType::Int64, {1}};
  KILN_CHECK_ERROR(update(bad), InvalidArgument, {"'bad_steps'", "i32"});
  KILN_CHECK_ERROR(update(ok, {0, 2, 2.0, 0.5}), InvalidArgument, {"incr_every_n_steps >= 1"});
  KILN_CHECK_ERROR(update(ok, {3, 2, 0.5, 0.5}), InvalidArgument, {"incr_ratio >= 1"});
  KILN_CHECK_ERROR(update(ok, {3, 2, 2.0, 1.5}), InvalidArgument, {"decr_ratio in (0, 1]"});
  auto check = [&](TS scale, std::vector<TS> xs) {
    Builder b(p);
    Value sv = b.create<DataOp>("s", scale.dims, scale.dtype).result();
    std::vector<Value> v;
    for (std::size_t i = 0; i < xs.size(); ++i)
      v.push_back(b.create<DataOp>("x" + std::to_string(i), xs[i].dims, xs[i].dtype).result());
    b.create<CheckFiniteAndUnscaleOp>(sv, v);
  };
  KILN_CHECK_ERROR(check(TS{f32, {1}}, {TS{i32, {4}}}), InvalidArgument,
                   {"kiln.check_finite_and_unscale", "operand #1", "f32, f64, bf16 or f16"});
  KILN_CHECK_ERROR(check(TS{DataType::Float64, {1}}, {TS{f32, {4}}}), InvalidArgument,
                   {"kiln.check_finite_and_unscale", "'scale'", "f32"});
  KILN_CHECK_ERROR(check(TS{f32, {1}}, {}), InvalidArgument,
                   {"kiln.check_finite_and_unscale", "at least one tensor"});
}

TEST_CASE("an update whose skip flag holds true leaves the parameter and its state as they were; false "
          "updates as without the flag",
          "[kernel][optim][amp]") {
  const Dims d{6};
  auto adam_inputs = [&] {
    return std::vector<Tensor>{filled<float>(d, -1, 1, 1), filled<float>(d, -1, 1, 2), f32_one(0.1f),
                               filled<float>(d, 0, 1, 3),  filled<float>(d, 0, 1, 4),  f32_one(0.9f),
                               f32_one(0.999f)};
  };
  auto adam = [](std::vector<Tensor> in, const Tensor* skip) {
    if (skip) in.push_back(*skip);
    return run_kernel(in, [&](Builder& b, const std::vector<Value>& v) {
      return b.create<Adam_Op>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], 0.9, 0.999, 1e-8,
                               skip ? v[7] : Value{})
          .operation();
    });
  };
  SECTION("adam_, in place") {
    const auto before = adam_inputs();
    std::vector<std::vector<float>> kept;
    for (const Tensor& t : before) kept.push_back(t.to_vector<float>());
    auto in = before;
    const Tensor yes = flag(true);
    auto r = adam(in, &yes);
    for (std::size_t i : {0u, 3u, 4u, 5u, 6u}) CHECK(in[i].to_vector<float>() == kept[i]);
    CHECK(r.out(0).shares_buffer_with(in[0]));
    auto plain = adam_inputs(), flagged = adam_inputs();
    const Tensor no = flag(false);
    adam(plain, nullptr);
    adam(flagged, &no);
    for (std::size_t i : {0u, 3u, 4u, 5u, 6u}) CHECK(plain[i].to_vector<float>() == flagged[i].to_vector<float>());
    CHECK(plain[0].to_vector<float>() != kept[0]);
  }
  SECTION("sgd_ and momentum_") {
    Tensor p = filled<double>(d, -1, 1, 5), g = filled<double>(d, -1, 1, 6), v = filled<double>(d, -1, 1, 7);
    const auto p0 = p.to_vector<double>(), v0 = v.to_vector<double>();
    const Tensor lr = Tensor::from_vector<double>(Dims{1}, {0.5});
    run_kernel({p, g, lr, flag(true)}, [](Builder& b, const std::vector<Value>& x) {
      return b.create<Sgd_Op>(x[0], x[1], x[2], x[3]).operation();
    });
    CHECK(p.to_vector<double>() == p0);
    run_kernel({p, g, v, lr, flag(true)}, [](Builder& b, const std::vector<Value>& x) {
      return b.create<Momentum_Op>(x[0], x[1], x[2], x[3], 0.9, true, x[4]).operation();
    });
    CHECK(p.to_vector<double>() == p0);
    CHECK(v.to_vector<double>() == v0);
  }
  SECTION("merged_adamw_ over two parameters") {
    auto one = adam_inputs(), two = adam_inputs();
    const auto kept0 = one[0].to_vector<float>(), kept1 = two[3].to_vector<float>();
    std::vector<Tensor> in{one[2]};
    for (auto* group : {&one, &two})
      for (std::size_t i = 0; i < group->size(); ++i)
        if (i != 2) in.push_back((*group)[i]);
    in.push_back(flag(true));
    run_kernel(in, [](Builder& b, const std::vector<Value>& x) {
      const std::vector<Value> members(x.begin() + 1, x.end() - 1);
      return b.create<MergedAdamW_Op>(x[0], members, AdamW_Op::Attributes{0.9, 0.999, 1e-8, 0.01}, x.back())
          .operation();
    });
    CHECK(one[0].to_vector<float>() == kept0);
    CHECK(two[3].to_vector<float>() == kept1);
    CHECK(MergedAdamW_Op::has_skip(in.size()));
    CHECK_FALSE(MergedAdamW_Op::has_skip(in.size() - 1));
    CHECK(MergedAdamW_Op::parameter_count(in.size()) == 2);
  }
  SECTION("out of place, the outputs are copies of the inputs") {
    Program prog;
    Builder b(prog);
    std::vector<Value> v;
    for (const char* n : {"p", "g"}) v.push_back(b.create<DataOp>(n, std::vector<std::int64_t>{3}).result());
    v.push_back(b.create<DataOp>("lr", std::vector<std::int64_t>{1}).result());
    Value s = b.create<DataOp>("s", std::vector<std::int64_t>{1}, DataType::Bool).result();
    auto op = b.create<Sgd_Op>(v[0], v[1], v[2], s);
    Variable vp("p"), vg("g"), vl("lr"), vs("s"), out("out");
    vp.set(Tensor::from_vector<float>(Dims{3}, {1.f, 2.f, 3.f}));
    vg.set(Tensor::from_vector<float>(Dims{3}, {1.f, 1.f, 1.f}));
    vl.set(f32_one(0.5f));
    vs.set(flag(true));
    Variable* ins[] = {&vp, &vg, &vl, &vs};
    Variable* outs[] = {&out};
    const KernelInfo& k = KernelRegistry::instance().get(*op.operation(), PlaceKind::Cpu, DataType::Float32);
    KernelContext ctx(op.operation(), ins, 4, outs, 1, nullptr, Place::cpu(), &cpu_allocator());
    k.fn(ctx);
    CHECK(out.get<Tensor>().to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
    CHECK_FALSE(out.get<Tensor>().shares_buffer_with(vp.get<Tensor>()));
  }
}

TEST_CASE("an update's skip operand must be a bool of one element, named in the error", "[kernel][optim][amp]") {
  Program p;
  Builder b(p);
  auto x = [&](const char* n, std::vector<std::int64_t> dims, DataType dt = DataType::Float32) {
    return b.create<DataOp>(n, dims, dt).result();
  };
  Value w = x("w", {3}), g = x("g", {3}), lr = x("lr", {1});
  KILN_CHECK_ERROR(b.create<Sgd_Op>(w, g, lr, x("s1", {1})), InvalidArgument,
                   {"kiln.sgd_", "'skip' (#3)", "bool tensor of one element", "f32"});
  KILN_CHECK_ERROR(b.create<Sgd_Op>(w, g, lr, x("s2", {2}, DataType::Bool)), InvalidArgument,
                   {"kiln.sgd_", "'skip'", "one element"});
  CHECK_NOTHROW(b.create<Sgd_Op>(w, g, lr, x("s3", {1}, DataType::Bool)));
  KILN_CHECK_ERROR(b.create<MergedSgd_Op>(lr, std::vector<Value>{w, g}, x("s4", {1}, DataType::Int32)),
                   InvalidArgument, {"kiln.merged_sgd_", "'skip'", "bool"});
}
