#include "kiln/runtime/scope.h"

#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"

using kiln::Scope;
using kiln::Variable;

TEST_CASE("var creates a variable once and returns the same one after", "[runtime][scope]") {
  Scope root;
  Variable& a = root.var("a");
  CHECK(a.name() == "a");
  CHECK(&root.var("a") == &a);
  CHECK(root.local_var_count() == 1);
  CHECK(root.parent() == nullptr);
}

TEST_CASE("an empty variable name is an InvalidArgument error", "[runtime][scope]") {
  Scope root;
  try {
    root.var("");
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == kiln::ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Catch::Contains("empty variable name"));
  }
  CHECK(root.local_var_count() == 0);
}

TEST_CASE("find_var looks through the parents and find_local_var does not", "[runtime][scope]") {
  Scope root;
  Variable& w = root.var("w");
  Scope& local = root.new_scope();
  Scope& inner = local.new_scope();
  CHECK(local.parent() == &root);
  CHECK(inner.parent() == &local);
  CHECK(inner.find_var("w") == &w);
  CHECK(inner.find_scope("w") == &root);
  CHECK(inner.find_local_var("w") == nullptr);
  CHECK(local.find_var("missing") == nullptr);
  CHECK(local.find_scope("missing") == nullptr);
  CHECK(root.find_var("w") == &w);
  // Temporaries made in a kid are not visible from the root.
  Variable& tmp = local.var("tmp");
  CHECK(root.find_var("tmp") == nullptr);
  CHECK(inner.find_var("tmp") == &tmp);
}

TEST_CASE("a kid's variable shadows its parent's of the same name", "[runtime][scope]") {
  Scope root;
  Variable& outer = root.var("x");
  Scope& kid = root.new_scope();
  Variable& inner = kid.var("x");
  CHECK(&inner != &outer);
  CHECK(kid.find_var("x") == &inner);
  CHECK(root.find_var("x") == &outer);
}

TEST_CASE("erase_vars removes named variables and ignores absent ones", "[runtime][scope]") {
  Scope root;
  root.var("a");
  root.var("b");
  root.var("c");
  CHECK(root.erase_vars({"a", "zzz", "c"}) == 2);
  CHECK(root.local_var_names() == std::vector<std::string>{"b"});
  std::vector<std::string> names{"b"};
  CHECK(root.erase_vars(names) == 1);
  CHECK(root.local_var_count() == 0);
  CHECK(root.find_var("b") == nullptr);
}

TEST_CASE("local_var_names lists this scope's names sorted", "[runtime][scope]") {
  Scope root;
  root.var("w");
  Scope& kid = root.new_scope();
  kid.var("tmp_2");
  kid.var("tmp_1");
  CHECK(kid.local_var_names() == std::vector<std::string>{"tmp_1", "tmp_2"});
  CHECK(root.local_var_names() == std::vector<std::string>{"w"});
}

TEST_CASE("drop_kids destroys the kids and their variables", "[runtime][scope]") {
  Scope root;
  kiln::Tensor t = kiln::Tensor::empty({4}, kiln::DataType::Float32);
  Scope& a = root.new_scope();
  a.var("x").set(t);
  root.new_scope();
  CHECK(root.kid_count() == 2);
  CHECK(t.use_count() == 2);
  root.drop_kids();
  CHECK(root.kid_count() == 0);
  CHECK(t.use_count() == 1);
}

TEST_CASE("two threads creating the same variable get one variable", "[runtime][scope]") {
  Scope root;
  std::vector<Variable*> seen_a(1000), seen_b(1000);
  std::thread t([&] {
    for (int i = 0; i < 1000; ++i) seen_a[i] = &root.var("v" + std::to_string(i));
  });
  for (int i = 999; i >= 0; --i) seen_b[i] = &root.var("v" + std::to_string(i));
  t.join();
  CHECK(seen_a == seen_b);
  CHECK(root.local_var_count() == 1000);
}
