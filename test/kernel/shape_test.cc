// Reference tests of the shape ops' CPU kernels — reshape (a view of its
// input's buffer), transpose, concat, split, slice — against index loops
// written here, in several dtypes; plus bad-input errors.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/io/json.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::run_kernel;
using kiln_test::run_op;
using kiln_test::iota;

namespace {

using I64s = std::vector<std::int64_t>;

// Multi-index of linear offset `o` in row-major `dims`.
I64s unravel(std::int64_t o, const I64s& dims) {
  I64s idx(dims.size());
  for (std::size_t k = dims.size(); k-- > 0;) {
    idx[k] = o % dims[k];
    o /= dims[k];
  }
  return idx;
}
std::int64_t ravel(const I64s& idx, const I64s& dims) {
  std::int64_t o = 0;
  for (std::size_t k = 0; k < dims.size(); ++k) o = o * dims[k] + idx[k];
  return o;
}
std::int64_t numel(const I64s& d) {
  return std::accumulate(d.begin(), d.end(), std::int64_t{1}, std::multiplies<>());
}

template <typename T>
std::vector<T> ref_transpose(const Tensor& x, const I64s& perm, I64s* od) {
  I64s xd = x.dims().to_vector();
  od->resize(xd.size());
  for (std::size_t i = 0; i < perm.size(); ++i) (*od)[i] = xd[perm[i]];
  auto xv = x.to_vector<T>();
  std::vector<T> out(xv.size());
  for (std::int64_t o = 0; o < static_cast<std::int64_t>(out.size()); ++o) {
    I64s oi = unravel(o, *od), xi(xd.size());
    for (std::size_t i = 0; i < perm.size(); ++i) xi[perm[i]] = oi[i];
    out[o] = xv[ravel(xi, xd)];
  }
  return out;
}

template <typename T>
void check_transpose(const I64s& dims, const I64s& perm) {
  INFO("dims " << Dims(dims) << " perm " << Dims(perm));
  Tensor x = iota<T>(dims);
  auto run = run_op<TransposeOp>({x}, perm);
  I64s norm = perm, od;
  for (auto& p : norm)
    if (p < 0) p += static_cast<std::int64_t>(dims.size());
  auto want = ref_transpose<T>(x, norm, &od);
  CHECK(run.out().dims().to_vector() == od);
  CHECK(run.out().to_vector<T>() == want);
}

// Slice by the definition: out[i] = x[i + begin] over the clamped ranges.
template <typename T>
std::vector<T> ref_slice(const Tensor& x, const I64s& axes, const I64s& starts, const I64s& ends,
                         I64s* od) {
  I64s xd = x.dims().to_vector(), begin(xd.size(), 0);
  *od = xd;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    std::int64_t ax = axes[k] < 0 ? axes[k] + static_cast<std::int64_t>(xd.size()) : axes[k];
    std::int64_t d = xd[ax], s = starts[k], e = ends[k];
    if (s < 0) s += d;
    if (e < 0) e += d;
    s = std::clamp<std::int64_t>(s, 0, d);
    e = std::clamp<std::int64_t>(e, 0, d);
    begin[ax] = s;
    (*od)[ax] = std::max<std::int64_t>(e - s, 0);
  }
  auto xv = x.to_vector<T>();
  std::vector<T> out(static_cast<std::size_t>(numel(*od)));
  for (std::int64_t o = 0; o < static_cast<std::int64_t>(out.size()); ++o) {
    I64s i = unravel(o, *od);
    for (std::size_t k = 0; k < i.size(); ++k) i[k] += begin[k];
    out[o] = xv[ravel(i, xd)];
  }
  return out;
}

template <typename T>
void check_slice(const I64s& dims, const I64s& axes, const I64s& starts, const I64s& ends) {
  INFO("dims " << Dims(dims) << " axes " << Dims(axes) << " starts " << Dims(starts) << " ends "
               << Dims(ends));
  Tensor x = iota<T>(dims);
  auto run = run_op<SliceOp>({x}, axes, starts, ends);
  I64s od;
  auto want = ref_slice<T>(x, axes, starts, ends, &od);
  CHECK(run.out().dims().to_vector() == od);
  CHECK(run.out().to_vector<T>() == want);
}

// Concat by the definition: out[..., j, ...] = the input whose range holds j.
template <typename T>
std::vector<T> ref_concat(const std::vector<Tensor>& xs, std::int64_t axis, I64s* od) {
  *od = xs[0].dims().to_vector();
  if (axis < 0) axis += static_cast<std::int64_t>(od->size());
  (*od)[axis] = 0;
  for (const auto& t : xs) (*od)[axis] += t.dims()[static_cast<int>(axis)];
  std::vector<T> out(static_cast<std::size_t>(numel(*od)));
  for (std::int64_t o = 0; o < static_cast<std::int64_t>(out.size()); ++o) {
    I64s i = unravel(o, *od);
    std::size_t which = 0;
    while (i[axis] >= xs[which].dims()[static_cast<int>(axis)]) i[axis] -= xs[which++].dims()[static_cast<int>(axis)];
    out[o] = xs[which].to_vector<T>()[ravel(i, xs[which].dims().to_vector())];
  }
  return out;
}

}  // namespace

// ---- reshape ----

TEST_CASE("reshape's output views its input's buffer with the new dims", "[kernel]") {
  Tensor x = iota<float>({2, 3, 4});
  auto run = run_op<ReshapeOp>({x}, I64s{4, -1});
  CHECK(run.out().dims() == Dims{4, 6});
  CHECK(run.out().shares_buffer_with(x));
  CHECK(run.out().raw_data() == x.raw_data());
  CHECK(run.out().to_vector<float>() == x.to_vector<float>());

  auto copy_dims = run_op<ReshapeOp>({x}, I64s{0, 12});  // 0 copies the input's dim
  CHECK(copy_dims.out().dims() == Dims{2, 12});
  auto flat = run_op<ReshapeOp>({x}, I64s{-1});
  CHECK(flat.out().dims() == Dims{24});
  auto scalar = run_op<ReshapeOp>({Tensor::from_vector<std::int64_t>({1, 1}, {7})}, I64s{});
  CHECK(scalar.out().rank() == 0);
  CHECK(scalar.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{7});
}

TEST_CASE("reshape resolves 0 and -1 against the run-time dims when they were unknown", "[kernel]") {
  auto on_unknown = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", I64s{-1, 4}, DataType::Float64);
    return b.create<ReshapeOp>(x.result(), I64s{0, 2, -1}).operation();
  };
  Tensor x = iota<double>({5, 4});
  auto run = run_kernel({x}, on_unknown);
  CHECK(run.out().dims() == Dims{5, 2, 2});
  CHECK(run.out().shares_buffer_with(x));
  auto bad = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", I64s{-1, 4}, DataType::Float64);
    return b.create<ReshapeOp>(x.result(), I64s{3, -1}).operation();
  };
  KILN_CHECK_ERROR(run_kernel({x}, bad), InvalidArgument, {"kiln.reshape", "20"});
}

TEST_CASE("reshape rejects element counts that do not match", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<ReshapeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{4, 2}),
                     InvalidArgument, {"kiln.reshape"});
  KILN_CHECK_ERROR(build_op<ReshapeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{-1, -1}),
                     InvalidArgument, {"kiln.reshape", "-1"});
  KILN_CHECK_ERROR(build_op<ReshapeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{4, -1}),
                     InvalidArgument, {"kiln.reshape"});
}

// ---- transpose ----

TEST_CASE("transpose matches the index loop for every permutation up to rank 4", "[kernel]") {
  check_transpose<float>({3, 5}, {1, 0});
  check_transpose<float>({3, 5}, {0, 1});
  check_transpose<double>({7}, {0});
  for (I64s perm = {0, 1, 2}; ;) {
    check_transpose<float>({2, 3, 4}, perm);
    check_transpose<std::int64_t>({4, 1, 3}, perm);
    if (!std::next_permutation(perm.begin(), perm.end())) break;
  }
  for (I64s perm = {0, 1, 2, 3}; ;) {
    check_transpose<float>({2, 3, 4, 5}, perm);
    if (!std::next_permutation(perm.begin(), perm.end())) break;
  }
  // Batches of 2-D swaps (NCHW <-> NHWC) larger than one 32x32 tile, ragged edges included.
  check_transpose<float>({2, 40, 7, 9}, {0, 2, 3, 1});
  check_transpose<float>({2, 7, 9, 40}, {0, 3, 1, 2});
  check_transpose<float>({70, 33}, {1, 0});
  check_transpose<float>({3, 1, 1, 37}, {0, 3, 1, 2});
  check_transpose<std::int32_t>({2, 3, 4}, {-1, 0, -2});  // negative entries count from the end
  check_transpose<bool>({3, 2}, {1, 0});
  check_transpose<std::int8_t>({3, 2, 2}, {2, 1, 0});
}

TEST_CASE("transpose of an empty tensor is empty with permuted dims", "[kernel]") {
  auto run = run_op<TransposeOp>({iota<float>({2, 0, 3})}, I64s{2, 0, 1});
  CHECK(run.out().dims() == Dims{3, 2, 0});
}

TEST_CASE("transpose rejects a perm that is not a permutation of the dims", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<TransposeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{0}),
                     InvalidArgument, {"kiln.transpose", "perm"});
  KILN_CHECK_ERROR(build_op<TransposeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{1, 1}),
                     InvalidArgument, {"kiln.transpose", "twice"});
  KILN_CHECK_ERROR(build_op<TransposeOp>(p, {{DataType::Float32, {2, 3}}}, I64s{0, 2}),
                     InvalidArgument, {"kiln.transpose", "out of range"});
}

// ---- concat ----

TEST_CASE("concat joins its inputs along the axis like the index loop", "[kernel]") {
  struct Case {
    std::vector<I64s> dims;
    std::int64_t axis;
  };
  for (const Case& c : {Case{{{2, 3}, {4, 3}}, 0}, Case{{{2, 3}, {2, 1}, {2, 5}}, 1},
                        Case{{{2, 3, 4}, {2, 2, 4}}, -2}, Case{{{2, 3, 4}, {2, 3, 1}}, -1},
                        Case{{{3}, {0}, {2}}, 0}, Case{{{1, 2}}, 0}}) {
    std::vector<Tensor> xs;
    for (std::size_t i = 0; i < c.dims.size(); ++i)
      xs.push_back(kiln_test::filled<float>(Dims(c.dims[i]), -1, 1, static_cast<std::uint32_t>(i + 1)));
    auto run = run_op<ConcatOp>(xs, c.axis);
    I64s od;
    auto want = ref_concat<float>(xs, c.axis, &od);
    CHECK(run.out().dims().to_vector() == od);
    CHECK(run.out().to_vector<float>() == want);
  }
  // Other dtypes move the same bytes.
  auto ints = run_op<ConcatOp>({iota<std::int64_t>({2, 2}), iota<std::int64_t>({2, 1})}, std::int64_t{1});
  CHECK(ints.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 0, 2, 3, 1});
  auto dbl = run_op<ConcatOp>({iota<double>({1, 2}), iota<double>({1, 2})}, std::int64_t{0});
  CHECK(dbl.out().to_vector<double>() == std::vector<double>{0, 1, 0, 1});
}

TEST_CASE("concat rejects inputs that differ off the axis, in rank or in dtype", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {3, 3}}},
                                        std::int64_t{1}),
                     InvalidArgument, {"kiln.concat", "dim 0"});
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2}}},
                                        std::int64_t{0}),
                     InvalidArgument, {"kiln.concat", "rank"});
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float64, {2, 3}}},
                                        std::int64_t{0}),
                     InvalidArgument, {"kiln.concat", "f64"});
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {{DataType::Float32, {2, 3}}}, std::int64_t{2}),
                     InvalidArgument, {"kiln.concat", "axis"});
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {}, std::int64_t{0}), InvalidArgument,
                     {"kiln.concat", "at least one"});
  const std::int64_t huge = std::int64_t{1} << 62;
  KILN_CHECK_ERROR(build_op<ConcatOp>(p, {{DataType::Float32, {huge}}, {DataType::Float32, {huge}}},
                                        std::int64_t{0}),
                     OutOfRange, {"kiln.concat", "overflow"});
  // Unknown at build time, wrong at run time.
  auto on_unknown = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", I64s{-1, 2});
    auto y = b.create<DataOp>("uy", I64s{-1, 2});
    return b.create<ConcatOp>(std::vector<Value>{x.result(), y.result()}, std::int64_t{1}).operation();
  };
  KILN_CHECK_ERROR(run_kernel({iota<float>({2, 2}), iota<float>({3, 2})}, on_unknown),
                     InvalidArgument, {"kiln.concat", "input #1"});
}

// ---- split ----

TEST_CASE("split into equal parts gives consecutive pieces along the axis", "[kernel]") {
  Tensor x = iota<float>({2, 6});
  auto run = run_op<SplitOp>({x}, std::int64_t{3}, std::int64_t{1});
  REQUIRE(run.results.size() == 3);
  CHECK(run.out(0).to_vector<float>() == std::vector<float>{0, 1, 6, 7});
  CHECK(run.out(1).to_vector<float>() == std::vector<float>{2, 3, 8, 9});
  CHECK(run.out(2).to_vector<float>() == std::vector<float>{4, 5, 10, 11});
  for (int i = 0; i < 3; ++i) CHECK(run.out(i).dims() == Dims{2, 2});

  auto rows = run_op<SplitOp>({iota<std::int64_t>({4, 2})}, std::int64_t{2}, std::int64_t{0});
  CHECK(rows.out(0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(rows.out(1).to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 5, 6, 7});
}

TEST_CASE("split by sections infers one -1 and allows empty parts; concat undoes it", "[kernel]") {
  Tensor x = kiln_test::filled<double>({3, 7, 2});
  auto run = run_op<SplitOp>({x}, I64s{2, -1, 0, 1}, std::int64_t{-2});
  REQUIRE(run.results.size() == 4);
  CHECK(run.out(0).dims() == Dims{3, 2, 2});
  CHECK(run.out(1).dims() == Dims{3, 4, 2});
  CHECK(run.out(2).dims() == Dims{3, 0, 2});
  CHECK(run.out(3).dims() == Dims{3, 1, 2});
  auto back = run_op<ConcatOp>(run.results, std::int64_t{1});
  CHECK(back.out().to_vector<double>() == x.to_vector<double>());
  // Each part equals the slice it stands for.
  I64s od;
  CHECK(run.out(1).to_vector<double>() == ref_slice<double>(x, {1}, {2}, {6}, &od));
}

TEST_CASE("split rejects parts that do not fit the dim", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {2, 5}}}, std::int64_t{2}, std::int64_t{1}),
                     InvalidArgument, {"kiln.split", "equal parts"});
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {2, 5}}}, I64s{2, 2}, std::int64_t{1}),
                     InvalidArgument, {"kiln.split", "add up"});
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {2, 5}}}, I64s{-1, -1}, std::int64_t{1}),
                     InvalidArgument, {"kiln.split", "-1"});
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {2, 5}}}, std::int64_t{0}, std::int64_t{1}),
                     InvalidArgument, {"kiln.split", "num"});
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {0}}}, std::int64_t{1} << 60),
                     InvalidArgument, {"kiln.split", "num"});  // would be 2^60 results
  const std::int64_t huge = std::int64_t{1} << 62;
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {-1}}}, I64s{huge, huge, huge}),
                     OutOfRange, {"kiln.split", "int64"});
  KILN_CHECK_ERROR(build_op<SplitOp>(p, {{DataType::Float32, {2, 5}}}, std::int64_t{1}, std::int64_t{2}),
                     InvalidArgument, {"kiln.split", "axis"});
  auto on_unknown = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", I64s{-1});
    return b.create<SplitOp>(x.result(), std::int64_t{2}).operation();
  };
  KILN_CHECK_ERROR(run_kernel({iota<float>({5})}, on_unknown), InvalidArgument,
                     {"kiln.split", "equal parts"});
}

// ---- slice ----

TEST_CASE("slice matches the index loop, counting negatives from the end and clamping", "[kernel]") {
  check_slice<float>({10}, {0}, {2}, {7});
  check_slice<float>({10}, {0}, {-3}, {100});         // from the end, end clamped
  check_slice<float>({10}, {0}, {-100}, {-8});        // start clamped to 0
  check_slice<float>({10}, {0}, {6}, {3});            // end before start: empty
  check_slice<float>({4, 5, 6}, {1}, {1}, {4});
  check_slice<float>({4, 5, 6}, {0, 2}, {1, -4}, {3, -1});
  check_slice<float>({4, 5, 6}, {-1, 0}, {0, 2}, {2, 4});
  check_slice<double>({4, 5, 6}, {2}, {0}, {6});      // whole dim: a plain copy
  check_slice<std::int64_t>({3, 4, 5, 2}, {1, 3}, {1, 1}, {3, 2});
  check_slice<std::int32_t>({3, 4}, {0, 1}, {0, 0}, {0, 4});  // empty result
  check_slice<bool>({3, 4}, {1}, {1}, {2});
  // Channel slices of NHWC data: runs of whole words, of bytes, and long runs.
  check_slice<float>({2, 3, 5, 24}, {3}, {12}, {24});
  check_slice<bool>({2, 3, 5, 7}, {-1}, {1}, {6});
  check_slice<std::int64_t>({2, 3, 300}, {2}, {10}, {290});
}

TEST_CASE("slice rejects mismatched attribute lists, repeated and out-of-range axes", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<SliceOp>(p, {{DataType::Float32, {4, 5}}}, I64s{0}, I64s{0, 1}, I64s{1}),
                     InvalidArgument, {"kiln.slice", "per axis"});
  KILN_CHECK_ERROR(build_op<SliceOp>(p, {{DataType::Float32, {4, 5}}}, I64s{0, -2}, I64s{0, 1},
                                       I64s{1, 2}),
                     InvalidArgument, {"kiln.slice", "twice"});
  KILN_CHECK_ERROR(build_op<SliceOp>(p, {{DataType::Float32, {4, 5}}}, I64s{2}, I64s{0}, I64s{1}),
                     InvalidArgument, {"kiln.slice", "axis 2"});
}

TEST_CASE("slice's InferMeta gives the sliced dims and keeps unknown dims unknown", "[kernel]") {
  Program p;
  Operation* op = build_op<SliceOp>(p, {{DataType::Float32, {-1, 10}}}, I64s{0, 1}, I64s{1, -4},
                                    I64s{3, 1000});
  CHECK(shaped_dims(op->result_type(0)) == I64s{-1, 4});
}

TEST_CASE("programs with the shape, indexing and random ops verify and survive a JSON round trip",
          "[kernel]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", I64s{-1, 6});
  auto ids = b.create<DataOp>("ids", I64s{-1}, DataType::Int64);
  auto w = b.create<GaussianRandomOp>(I64s{10, 6}, 0.0, 0.02, 3);
  auto e = b.create<EmbeddingOp>(w.result(), ids.result(), std::int64_t{0});
  auto parts = b.create<SplitOp>(x.result(), I64s{2, -1}, std::int64_t{1});
  auto t = b.create<TransposeOp>(parts.result(1), I64s{1, 0});
  auto s = b.create<SliceOp>(t.result(), I64s{0}, I64s{1}, I64s{-1});
  auto g = b.create<GatherOp>(e.result(), ids.result(), std::int64_t{0});
  auto c = b.create<ConcatOp>(std::vector<Value>{parts.result(0), g.result()}, std::int64_t{1});
  auto d = b.create<DropoutOp>(c.result(), 0.1, false, std::int64_t{0});
  b.create<FetchOp>(d.result(0), "out");
  b.create<FetchOp>(s.result(), "s");
  REQUIRE_NOTHROW(p.verify());
  CHECK(parts->num_results() == 2);
  CHECK(shaped_dims(parts.result(1).type()) == I64s{-1, 4});
  std::string text = save_program_json(p);
  Program q = load_program_json(text);
  CHECK(q.to_string() == p.to_string());
  CHECK(save_program_json(q) == text);
}
