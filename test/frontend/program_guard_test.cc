// ProgramGuard, unique names, data(), stop_gradient and parameters (seed
// 001 §1.1): what a user building a program sees.
#include "frontend/frontend_test_util.h"
#include "kiln/io/json.h"

using namespace kiln;
using namespace kiln_frontend_test;

TEST_CASE("a ProgramGuard selects the programs and leaving it restores the previous ones",
          "[frontend]") {
  Program m1, s1, m2, s2, m3;
  CHECK_FALSE(has_program_guard());
  {
    ProgramGuard g1(m1, s1);
    CHECK(&current_main_program() == &m1);
    CHECK(&current_startup_program() == &s1);
    {
      ProgramGuard g2(m2, s2);
      CHECK(&current_main_program() == &m2);
      CHECK(&current_startup_program() == &s2);
      {
        ProgramGuard g3(m3);  // main only: the startup program stays s2
        CHECK(&current_main_program() == &m3);
        CHECK(&current_startup_program() == &s2);
      }
      CHECK(&current_main_program() == &m2);
    }
    CHECK(&current_main_program() == &m1);
    CHECK(&current_startup_program() == &s1);
    // The builder inserts at the end of the current main program.
    Builder b = main_builder();
    b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0);
    b.create<FullOp>(std::vector<std::int64_t>{1}, 2.0);
    CHECK(m1.block().size() == 2);
    CHECK(m2.block().empty());
  }
  CHECK_FALSE(has_program_guard());
}

TEST_CASE("building with no ProgramGuard active is an error saying so", "[frontend]") {
  KILN_CHECK_ERROR(current_main_program(), PreconditionNotMet, {"no ProgramGuard"});
  KILN_CHECK_ERROR(data("x", {1}), PreconditionNotMet, {"no ProgramGuard"});
  KILN_CHECK_ERROR(nn::Linear(2, 2), PreconditionNotMet, {"no ProgramGuard"});
  Program m;
  ProgramGuard g(m);  // no startup program: parameters cannot be made
  KILN_CHECK_ERROR(create_parameter("w", {2}, DataType::Float32, init::Constant(0)),
                       PreconditionNotMet, {"startup"});
  CHECK(m.block().empty());
}

TEST_CASE("unique names count per prefix and a name guard starts them afresh", "[frontend]") {
  UniqueNameGuard outer;
  CHECK(unique_name("linear") == "linear_0");
  CHECK(unique_name("linear") == "linear_1");
  CHECK(unique_name("fc") == "fc_0");
  {
    UniqueNameGuard inner;
    CHECK(unique_name("linear") == "linear_0");
  }
  CHECK(unique_name("linear") == "linear_2");
}

TEST_CASE("layers name their parameters Paddle-style: linear_0.w_0, linear_0.b_0", "[frontend]") {
  UniqueNameGuard names;
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  nn::Linear a(4, 3), b(3, 2, /*bias=*/false);
  CHECK(a.full_name() == "linear_0");
  CHECK(parameter_name(a.weight()) == "linear_0.w_0");
  CHECK(parameter_name(a.bias()) == "linear_0.b_0");
  CHECK(parameter_name(b.weight()) == "linear_1.w_0");
  CHECK_FALSE(b.bias());
  CHECK(a.parameters() == std::vector<Value>{a.weight(), a.bias()});
  CHECK(b.parameters() == std::vector<Value>{b.weight()});
  nn::Embedding e(10, 4);
  nn::LayerNorm ln({3});
  CHECK(parameter_name(e.weight()) == "embedding_0.w_0");
  CHECK(parameter_name(ln.weight()) == "layer_norm_0.w_0");
  CHECK(parameter_name(ln.bias()) == "layer_norm_0.b_0");
}

TEST_CASE("data keeps -1 for the batch dim and is fed by name", "[frontend]") {
  Program main_prog, startup;
  Value x, y;
  {
    ProgramGuard guard(main_prog, startup);
    x = data("x", {-1, 3});
    y = nn::functional::relu(x);
  }
  CHECK(x.type() == TensorType::get(DataType::Float32, {-1, 3}));
  CHECK(y.type() == TensorType::get(DataType::Float32, {-1, 3}));
  auto d = x.defining_op()->dyn_cast<DataOp>();
  REQUIRE(d);
  CHECK(d.attrs().name == "x");
  CHECK(stop_gradient(x));
  CHECK_FALSE(stop_gradient(y));
  Executor exe;
  for (std::int64_t n : {1, 4}) {
    std::vector<float> v(static_cast<std::size_t>(n * 3));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 5.f;
    auto out = exe.run(main_prog, {{"x", f32({n, 3}, v)}}, {y});
    REQUIRE(out[0].numel() == n * 3);
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(out[0].to_vector<float>()[i] == std::max(v[i], 0.f));
  }
}

TEST_CASE("data takes its batch on the host unless given another place", "[frontend]") {
  Program main_prog, startup;
  Value x, y;
  {
    ProgramGuard guard(main_prog, startup);
    x = data("x", {-1, 3});
    y = data("y", {2}, DataType::Int64, Place::cuda(0));
  }
  CHECK(x.defining_op()->dyn_cast<DataOp>().attrs().place == Place::cpu());
  CHECK(y.defining_op()->dyn_cast<DataOp>().attrs().place == Place::cuda(0));
}

TEST_CASE("data: other dtypes, and bad names and shapes are errors naming the data", "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value ids = data("ids", {-1}, DataType::Int64);
  CHECK(ids.type() == TensorType::get(DataType::Int64, {-1}));
  KILN_CHECK_ERROR(data("", {1}), InvalidArgument, {"name is empty"});
  KILN_CHECK_ERROR(data("z", {2, -3}), InvalidArgument, {"'z'", "-3"});
  KILN_CHECK_ERROR(data("ids", {2}), AlreadyExists, {"'ids'"});
  CHECK(main_prog.block().size() == 1);
}

TEST_CASE("stop_gradient is a per-result flag on the defining op, default false", "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value x = data("x", {4, 2});
  auto split = main_builder().create<SplitOp>(x, std::int64_t(2), std::int64_t(0));
  Value a = split.result(0), b = split.result(1);
  CHECK_FALSE(stop_gradient(a));
  set_stop_gradient(b);
  CHECK(stop_gradient(b));
  CHECK_FALSE(stop_gradient(a));
  set_stop_gradient(x, false);
  CHECK_FALSE(stop_gradient(x));
  set_stop_gradient(b, false);
  CHECK_FALSE(stop_gradient(b));
  // The flag is an attribute: it survives a clone of the program.
  set_stop_gradient(a, true);
  Program copy = main_prog.clone();
  Operation* cs = *std::next(copy.block().begin());
  CHECK(stop_gradient(cs->result(0)));
  CHECK_FALSE(stop_gradient(cs->result(1)));
  // ... and a save/load through the JSON program format.
  Program loaded = load_program_json(save_program_json(main_prog));
  Operation* ls = *std::next(loaded.block().begin());
  CHECK(stop_gradient(ls->result(0)));
  CHECK_FALSE(stop_gradient(ls->result(1)));
  CHECK(stop_gradient((*loaded.block().begin())->result(0)) == stop_gradient(x));
  main_prog.verify();
  KILN_CHECK_ERROR(set_stop_gradient(Value{}), InvalidArgument, {"null"});
}

TEST_CASE("create_parameter: initializer + set_parameter in startup, parameter op in main",
          "[frontend]") {
  Program main_prog, startup;
  Value w, state;
  {
    ProgramGuard guard(main_prog, startup);
    w = create_parameter("w", {2, 3}, DataType::Float32, init::Constant(0.25));
    state = create_parameter("w_moment", {2, 3}, DataType::Float32, init::Constant(0),
                             /*trainable=*/false);
    KILN_CHECK_ERROR(create_parameter("w", {2}, DataType::Float32, init::Constant(0)),
                         AlreadyExists, {"'w'"});
    KILN_CHECK_ERROR(create_parameter("v", {2, -1}, DataType::Float32, init::Constant(0)),
                         InvalidArgument, {"'v'", "-1"});
    KILN_CHECK_ERROR(create_parameter("", {2}, DataType::Float32, init::Constant(0)),
                         InvalidArgument, {"name is empty"});
  }
  CHECK(op_names(startup) == std::vector<std::string>{"kiln.full", "builtin.set_parameter",
                                                       "kiln.full", "builtin.set_parameter"});
  CHECK(op_names(main_prog) == std::vector<std::string>{"builtin.parameter", "builtin.parameter"});
  CHECK(w.type() == TensorType::get(DataType::Float32, {2, 3}));
  CHECK(main_prog.parameter("w").type == w.type());
  CHECK(startup.parameter("w_moment").type == w.type());
  CHECK_FALSE(stop_gradient(w));
  CHECK(stop_gradient(state));
  CHECK(all_parameters(main_prog) == std::vector<Value>{w, state});
  CHECK(trainable_parameters(main_prog) == std::vector<Value>{w});
  CHECK(parameter_name(w) == "w");
  startup.verify();
  main_prog.verify();

  // Running startup fills the root scope; running main reads it.
  Executor exe;
  exe.run(startup);
  auto out = exe.run(main_prog, {}, {w, state});
  CHECK(out[0].to_vector<float>() == std::vector<float>(6, 0.25f));
  CHECK(out[1].to_vector<float>() == std::vector<float>(6, 0.f));
}

TEST_CASE("a failing initializer leaves the startup program as it was", "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  create_parameter("a", {2}, DataType::Float32, init::Constant(1));
  // gaussian_random has no integer dtype: its InferMeta throws.
  CHECK_THROWS_AS(create_parameter("b", {2}, DataType::Int64, init::Normal(0, 1)), Error);
  CHECK(startup.block().size() == 2);
  CHECK_FALSE(main_prog.has_parameter("b"));
  CHECK_FALSE(startup.has_parameter("b"));
}

TEST_CASE("a layer made under one guard refers to its parameters by name under another",
          "[frontend]") {
  UniqueNameGuard names;
  Program train_prog, test_prog, startup;
  std::unique_ptr<nn::Linear> fc;
  {
    ProgramGuard g(train_prog, startup);
    fc = std::make_unique<nn::Linear>(2, 1, true, std::make_shared<init::Constant>(0.5),
                                      std::make_shared<init::Constant>(1.0));
    (*fc)(data("x", {-1, 2}));
  }
  Value y;
  {
    ProgramGuard g(test_prog, startup);
    y = (*fc)(data("x", {-1, 2}));
  }
  CHECK(count_top_ops(test_prog, "builtin.parameter") == 2);
  CHECK(test_prog.has_parameter("linear_0.w_0"));
  CHECK(count_top_ops(startup, "builtin.set_parameter") == 2);  // not duplicated
  Executor exe;
  exe.run(startup);
  auto out = exe.run(test_prog, {{"x", f32({1, 2}, {2, 4})}}, {y});
  CHECK(out[0].to_vector<float>() == std::vector<float>{0.5f * 2 + 0.5f * 4 + 1.f});
}
