// Learning-rate schedules in the program (kiln/frontend/lr_scheduler.h): a
// small model trained by the executor step after step, the rate each run
// used (fetched, and read back from the scope) compared with the PyTorch /
// Paddle formulas computed by hand here; the step counter across a save and
// load of the parameters; clone_for_test without the counter; errors.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numbers>
#include <string>
#include <unistd.h>
#include <vector>

#include "frontend_test_util.h"
#include "kiln/io/weights.h"

using namespace kiln;

namespace {

constexpr double kPi = std::numbers::pi;

// x [4, 2] → Linear(2, 1) (fixed initial weights) → MSE, minimized by the
// optimizer `make` returns.
struct ScheduledModel {
  Program main, startup;
  Value loss;
  std::unique_ptr<optim::Optimizer> opt;
  DataType dtype;

  ScheduledModel(const std::function<std::unique_ptr<optim::Optimizer>()>& make,
        DataType dt = DataType::Float64)
      : dtype(dt) {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    auto x = data("x", {4, 2}, dt);
    auto label = data("label", {4, 1}, dt);
    nn::Linear fc(2, 1, true, std::make_shared<init::Constant>(0.5),
                  std::make_shared<init::Constant>(0.1), dt);
    loss = nn::MSELoss()(fc(x), label);
    opt = make();
    opt->minimize(loss);
  }

  FeedMap feed() const {
    const std::vector<double> x{1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 0.5, 0.5};
    const std::vector<double> y{0.3, -0.2, 0.9, 0.1};
    if (dtype == DataType::Float64)
      return {{"x", Tensor::from_vector<double>(Dims{4, 2}, x)},
              {"label", Tensor::from_vector<double>(Dims{4, 1}, y)}};
    return {{"x", Tensor::from_vector<float>(Dims{4, 2}, std::vector<float>(x.begin(), x.end()))},
            {"label", Tensor::from_vector<float>(Dims{4, 1}, std::vector<float>(y.begin(), y.end()))}};
  }
};

void check_close(double got, double want, double rel, const std::string& what) {
  INFO(what << ": got " << got << ", want " << want);
  CHECK(std::abs(got - want) <= rel * std::max(std::abs(want), 1e-300) + 1e-300);
}

// Runs the main program `steps` times; checks that run s used want(s): the
// fetched rate, the learning-rate parameter in the scope after the run, and
// the schedule's host rate(s).
void check_steps(ScheduledModel& m, Executor& exe, int first, int steps,
                 const std::function<double(int)>& want) {
  const lr::Schedule& schedule = *m.opt->lr_schedule();
  for (int s = first; s < first + steps; ++s) {
    INFO("step " << s);
    auto out = exe.run(m.main, m.feed(), {m.loss, m.opt->scheduled_rate()});
    REQUIRE(out.size() == 2);
    const double w = want(s);
    check_close(out[1].to_vector<double>().at(0), w, 1e-12, "fetched rate");
    check_close(m.opt->current_learning_rate(exe.scope()), w,
                m.dtype == DataType::Float64 ? 1e-12 : 1e-7, "rate in the scope");
    check_close(schedule.rate(s), w, 1e-12, "host rate");
  }
}

}  // namespace

TEST_CASE("StepDecay gives base_lr times gamma to the number of whole step_size periods",
          "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::SGD>(lr::StepDecay(0.5, 3, 0.1)); });
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  CHECK(m.opt->current_learning_rate(exe.scope()) == 0.5);  // startup writes the step-0 rate
  // PyTorch's StepLR: lr = base_lr · gamma^(epoch // step_size).
  check_steps(m, exe, 0, 10, [](int s) { return 0.5 * std::pow(0.1, s / 3); });
}

TEST_CASE("CosineWithWarmup rises linearly from 0, follows the cosine to min_lr, then stays there",
          "[frontend][lr]") {
  const double base = 1e-3, min_lr = 1e-5;
  const int warmup = 4, total = 14;
  ScheduledModel m([&] {
    return std::make_unique<optim::Adam>(lr::CosineWithWarmup(base, warmup, total, min_lr));
  });
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  CHECK(m.opt->learning_rate() == 0.0);
  check_steps(m, exe, 0, 18, [&](int s) {
    if (s < warmup) return base * s / warmup;
    // PyTorch's CosineAnnealingLR closed form, T_cur = s − warmup, T_max = total − warmup.
    const double t_cur = std::min(s - warmup, total - warmup);
    return min_lr + (base - min_lr) * (1 + std::cos(kPi * t_cur / (total - warmup))) / 2;
  });
}

TEST_CASE("CosineWithWarmup without warm-up starts at base_lr; with total = warmup it ends at "
          "min_lr",
          "[frontend][lr]") {
  {
    ScheduledModel m([] { return std::make_unique<optim::SGD>(lr::CosineWithWarmup(0.2, 0, 5)); });
    Executor exe(Place::cpu(), {.num_threads = 1});
    exe.run(m.startup);
    check_steps(m, exe, 0, 7, [](int s) {
      return s >= 5 ? 0.0 : 0.2 * (1 + std::cos(kPi * s / 5)) / 2;
    });
  }
  {
    ScheduledModel m([] { return std::make_unique<optim::SGD>(lr::CosineWithWarmup(0.2, 3, 3, 0.01)); });
    Executor exe(Place::cpu(), {.num_threads = 1});
    exe.run(m.startup);
    check_steps(m, exe, 0, 5, [](int s) { return s < 3 ? 0.2 * s / 3 : 0.01; });
  }
}

TEST_CASE("LinearWarmup ramps from start_lr to the constant rate and holds it", "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::Momentum>(lr::LinearWarmup(0.1, 5, 0.02)); });
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  // Paddle's LinearWarmup: start_lr + (end_lr − start_lr) · epoch / warmup_steps.
  check_steps(m, exe, 0, 8, [](int s) { return s < 5 ? 0.02 + (0.1 - 0.02) * s / 5 : 0.1; });
}

TEST_CASE("LinearWarmup hands over to an inner schedule that starts at its own step 0",
          "[frontend][lr]") {
  // After the warm-up Paddle steps the inner scheduler with epoch − warmup_steps.
  ScheduledModel m([] {
    return std::make_unique<optim::SGD>(lr::LinearWarmup(lr::StepDecay(0.4, 2, 0.5), 3, 0.0));
  });
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  check_steps(m, exe, 0, 9, [](int s) {
    if (s < 3) return 0.4 * s / 3;  // end_lr = the inner schedule's first rate
    return 0.4 * std::pow(0.5, (s - 3) / 2);
  });
  lr::LinearWarmup explicit_end(lr::StepDecay(0.4, 2, 0.5), 3, 0.0, 0.3);
  check_close(explicit_end.rate(2), 0.2, 1e-12, "explicit end_lr, step 2");
  check_close(explicit_end.rate(3), 0.4, 1e-12, "explicit end_lr, step 3");
}

TEST_CASE("an f32 model's learning-rate parameter follows the schedule in f32", "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::Adam>(lr::CosineWithWarmup(0.01, 2, 6)); },
          DataType::Float32);
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  check_steps(m, exe, 0, 8, [](int s) {
    if (s < 2) return 0.01 * s / 2;
    return 0.01 * (1 + std::cos(kPi * std::min(s - 2, 4) / 4)) / 2;
  });
}

TEST_CASE("SGD with a schedule trains exactly as SGD given the same rates from the host",
          "[frontend][lr]") {
  const lr::StepDecay schedule(0.3, 2, 0.5);
  ScheduledModel scheduled([&] { return std::make_unique<optim::SGD>(schedule); });
  ScheduledModel hosted([] { return std::make_unique<optim::SGD>(0.3); });
  Executor a(Place::cpu(), {.num_threads = 1}), b(Place::cpu(), {.num_threads = 1});
  a.run(scheduled.startup);
  b.run(hosted.startup);
  for (int s = 0; s < 6; ++s) {
    INFO("step " << s);
    hosted.opt->set_learning_rate(b.scope(), schedule.rate(s));
    const double la = a.run(scheduled.main, scheduled.feed(), {scheduled.loss})[0].to_vector<double>()[0];
    const double lb = b.run(hosted.main, hosted.feed(), {hosted.loss})[0].to_vector<double>()[0];
    CHECK(la == lb);
  }
  for (const char* name : {"linear_0.w_0", "linear_0.b_0"})
    CHECK(a.scope().find_var(name)->get<Tensor>().to_vector<double>() ==
          b.scope().find_var(name)->get<Tensor>().to_vector<double>());
}

TEST_CASE("append_schedule gives a fetchable rate without an optimizer, equal to the host rate "
          "over 1000 steps",
          "[frontend][lr]") {
  for (unsigned threads : {1u, 2u}) {
    INFO(threads << " thread(s)");
    Program main, startup;
    lr::ScheduledRate r;
    const lr::LinearWarmup schedule(lr::CosineWithWarmup(0.05, 100, 900, 1e-4), 50, 1e-3);
    {
      UniqueNameGuard names;
      ProgramGuard guard(main, startup);
      r = lr::append_schedule(schedule);
    }
    CHECK(r.step_name == "lr_step_0");
    Executor exe(Place::cpu(), {.num_threads = threads});
    exe.run(startup);
    for (int s = 0; s < 1000; ++s) {
      auto out = exe.run(main, {}, {r.rate, r.step});
      if (out[1].to_vector<double>().at(0) != s) {
        FAIL_CHECK("step " << s << ": the run read counter " << out[1].to_vector<double>()[0]);
        break;
      }
      const double got = out[0].to_vector<double>().at(0), want = schedule.rate(s);
      if (std::abs(got - want) > 1e-12 * want) {
        FAIL_CHECK("step " << s << ": rate " << got << ", host " << want);
        break;
      }
    }
  }
}

TEST_CASE("the step counter is a parameter: saved and loaded, training resumes at its step",
          "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::SGD>(lr::StepDecay(1.0, 2, 0.5)); });
  REQUIRE(m.opt->lr_step_name() == "lr_step_0");
  REQUIRE(m.main.has_parameter("lr_step_0"));
  const std::string path = "/tmp/kiln_lr_test_" + std::to_string(::getpid()) + ".kw";
  Executor a(Place::cpu(), {.num_threads = 1});
  a.run(m.startup);
  for (int s = 0; s < 3; ++s) a.run(m.main, m.feed(), {m.loss});
  CHECK(a.scope().find_var("lr_step_0")->get<Tensor>().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{3});
  save_weights(path, a.scope(), m.main);

  Executor b(Place::cpu(), {.num_threads = 1});
  load_weights(path, b.scope(), m.main);
  std::remove(path.c_str());
  check_steps(m, b, 3, 4, [](int s) { return std::pow(0.5, s / 2); });
  CHECK(b.scope().find_var("lr_step_0")->get<Tensor>().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{7});
}

TEST_CASE("two minimize calls of one optimizer in one program share one counter and one rate",
          "[frontend][lr]") {
  Program main, startup;
  Value l1, l2;
  optim::SGD sgd(lr::StepDecay(0.2, 1, 0.5));
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    auto x = data("x", {4, 2}, DataType::Float64);
    auto label = data("label", {4, 1}, DataType::Float64);
    nn::Linear a(2, 1, true, nullptr, nullptr, DataType::Float64);
    nn::Linear b(2, 1, true, nullptr, nullptr, DataType::Float64);
    l1 = nn::MSELoss()(a(x), label);
    l2 = nn::MSELoss()(b(x), label);
    sgd.minimize(l1, {a.weight(), a.bias()});
    sgd.minimize(l2, {b.weight(), b.bias()});
  }
  CHECK(main.has_parameter("lr_step_0"));
  CHECK(!main.has_parameter("lr_step_1"));
  CHECK(kiln_frontend_test::count_top_ops(main, "builtin.set_parameter") == 2);
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(startup);
  const FeedMap feed{{"x", Tensor::from_vector<double>(Dims{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                     {"label", Tensor::from_vector<double>(Dims{4, 1}, {1, 0, 1, 0})}};
  for (int s = 0; s < 3; ++s) {
    auto out = exe.run(main, feed, {l1, l2, sgd.scheduled_rate()});
    CHECK(out[2].to_vector<double>().at(0) == 0.2 * std::pow(0.5, s));
  }
  CHECK(exe.scope().find_var("lr_step_0")->get<Tensor>().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{3});
}

TEST_CASE("clone_for_test drops the step counter, its increment and the rate", "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::Adam>(lr::CosineWithWarmup(0.1, 2, 10)); });
  std::size_t optimize_ops = 0, writes = 0;
  for (Operation* op : m.main.block()) {
    optimize_ops += op_role(op) == OpRole::Optimize;
    if (auto sp = op->dyn_cast<SetParameterOp>()) {
      ++writes;
      CHECK(op_role(op) == OpRole::Optimize);
      (void)sp;
    }
  }
  CHECK(writes == 2);  // lr_step_0 + 1, and this step's rate into learning_rate_0
  CHECK(optimize_ops > 20);
  Program test = clone_for_test(m.main);
  CHECK(!test.has_parameter("lr_step_0"));
  CHECK(!test.has_parameter("learning_rate_0"));
  for (Operation* op : test.block()) {
    CHECK(!op->isa<SetParameterOp>());
    CHECK(op_role(op) == OpRole::Forward);
  }
  // The evaluation program runs and leaves the counter alone.
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  exe.run(m.main, m.feed(), {m.loss});
  exe.run(test, m.feed(), {});
  exe.run(test, m.feed(), {});
  CHECK(exe.scope().find_var("lr_step_0")->get<Tensor>().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{1});
}

TEST_CASE("set_learning_rate on an optimizer with a schedule is an error naming the schedule",
          "[frontend][lr]") {
  ScheduledModel m([] { return std::make_unique<optim::SGD>(lr::StepDecay(0.1, 5)); });
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(m.startup);
  KILN_CHECK_ERROR(m.opt->set_learning_rate(exe.scope(), 0.5), PreconditionNotMet,
                   {"SGD", "StepDecay(base_lr=0.1, step_size=5, gamma=0.1)"});
  Scope empty;
  KILN_CHECK_ERROR(m.opt->current_learning_rate(empty), NotFound, {"learning_rate_0"});
  optim::SGD unused(lr::StepDecay(0.1, 5));
  KILN_CHECK_ERROR(unused.current_learning_rate(exe.scope()), NotFound, {"minimize"});
}

TEST_CASE("schedules reject bad arguments with kiln::Error naming the scheduler and the value",
          "[frontend][lr]") {
  KILN_CHECK_ERROR(lr::StepDecay(0.1, 0), InvalidArgument, {"StepDecay", "step_size", "0"});
  KILN_CHECK_ERROR(lr::StepDecay(0.1, -3), InvalidArgument, {"StepDecay", "step_size", "-3"});
  KILN_CHECK_ERROR(lr::StepDecay(-0.1, 3), InvalidArgument, {"StepDecay", "base_lr", "-0.1"});
  KILN_CHECK_ERROR(lr::StepDecay(0.1, 3, -0.5), InvalidArgument, {"StepDecay", "gamma", "-0.5"});
  KILN_CHECK_ERROR(lr::StepDecay(INFINITY, 3), InvalidArgument, {"StepDecay", "base_lr", "inf"});
  KILN_CHECK_ERROR(lr::CosineWithWarmup(0.1, -1, 10), InvalidArgument,
                   {"CosineWithWarmup", "warmup_steps", "-1"});
  KILN_CHECK_ERROR(lr::CosineWithWarmup(0.1, 20, 10), InvalidArgument,
                   {"CosineWithWarmup", "total_steps (10)", "warmup_steps (20)"});
  KILN_CHECK_ERROR(lr::CosineWithWarmup(-1.0, 2, 10), InvalidArgument,
                   {"CosineWithWarmup", "base_lr", "-1"});
  KILN_CHECK_ERROR(lr::CosineWithWarmup(0.1, 2, 10, -0.01), InvalidArgument,
                   {"CosineWithWarmup", "min_lr", "-0.01"});
  KILN_CHECK_ERROR(lr::LinearWarmup(0.1, -2, 0.0), InvalidArgument,
                   {"LinearWarmup", "warmup_steps", "-2"});
  KILN_CHECK_ERROR(lr::LinearWarmup(-0.1, 2, 0.0), InvalidArgument,
                   {"LinearWarmup", "learning_rate", "-0.1"});
  KILN_CHECK_ERROR(lr::LinearWarmup(0.1, 2, -0.5), InvalidArgument,
                   {"LinearWarmup", "start_lr", "-0.5"});
  KILN_CHECK_ERROR(lr::LinearWarmup(lr::SchedulePtr{}, 2, 0.0), InvalidArgument,
                   {"LinearWarmup", "null"});
  KILN_CHECK_ERROR(lr::StepDecay(0.1, 3).rate(-1), InvalidArgument, {"StepDecay", "step", "-1"});
  KILN_CHECK_ERROR(optim::SGD(lr::SchedulePtr{}), InvalidArgument, {"schedule", "null"});
  // No ProgramGuard: nothing to append the counter to.
  KILN_CHECK_ERROR(lr::append_schedule(lr::StepDecay(0.1, 3)), PreconditionNotMet, {});
}
