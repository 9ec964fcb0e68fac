// DataLoader and TensorDataset: batch shapes and contents, drop_last,
// shuffling (a permutation, reproducible by seed, new each epoch), the
// bounded read-ahead queue, errors from the reader thread, destruction
// mid-epoch, feeding an Executor, and bad options.
#include "kiln/frontend/data_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "test_util.h"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

// features[i] = {10i, 10i + 1}, labels[i] = i
TensorDataset numbered(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(10 * i));
    x.push_back(static_cast<float>(10 * i + 1));
    y.push_back(i);
  }
  return TensorDataset({Tensor::from_vector({n, 2}, x), Tensor::from_vector({n}, y)}, {"x", "label"});
}

// Sample i is the scalar i; counts get() calls; throws at `fail_at`; sleeps
// `delay` per sample.
struct CountingDataset : Dataset {
  std::int64_t n = 0;
  std::int64_t fail_at = -1;
  bool throw_std = false;
  std::chrono::milliseconds delay{0};
  mutable std::atomic<std::int64_t> reads{0};

  std::int64_t size() const override { return n; }
  std::vector<DatasetColumn> columns() const override { return {{Dims{}, DataType::Int64, "i"}}; }
  void get(std::int64_t index, std::span<Tensor> row) const override {
    if (delay.count()) std::this_thread::sleep_for(delay);
    if (index == fail_at) {
      if (throw_std) throw std::runtime_error("disk on fire");
      throw_error(ErrorKind::DataLoss, "record ", index, " is corrupt");
    }
    *row[0].data<std::int64_t>() = index;
    reads.fetch_add(1);
  }
};

std::shared_ptr<CountingDataset> counting(std::int64_t n) {
  auto d = std::make_shared<CountingDataset>();
  d->n = n;
  return d;
}

// Waits up to 5 s for `pred`.
template <typename Pred>
bool eventually(Pred pred) {
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

std::vector<std::int64_t> epoch_indices(DataLoader& loader) {
  std::vector<std::int64_t> out;
  for (const Batch& b : loader.epoch()) out.insert(out.end(), b.indices().begin(), b.indices().end());
  return out;
}

}  // namespace

TEST_CASE("a data loader batches rows in order and keeps the last partial batch", "[frontend][data]") {
  DataLoader loader(numbered(10), {.batch_size = 4});
  CHECK(loader.num_batches() == 3);
  std::vector<Batch> batches;
  for (Batch& b : loader.epoch()) batches.push_back(b);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].size() == 4);
  CHECK(batches[2].size() == 2);
  CHECK(batches[0][0].dims() == Dims{4, 2});
  CHECK(batches[0][1].dims() == Dims{4});
  CHECK(batches[2][0].dims() == Dims{2, 2});
  CHECK(batches[2][1].dtype() == DataType::Int64);
  CHECK(batches[1][0].to_vector<float>() == std::vector<float>{40, 41, 50, 51, 60, 61, 70, 71});
  CHECK(batches[1][1].to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 5, 6, 7});
  CHECK(batches[2][1].to_vector<std::int64_t>() == std::vector<std::int64_t>{8, 9});
  CHECK(batches[2].indices() == std::vector<std::int64_t>{8, 9});
  CHECK(batches[2].number() == 2);
  CHECK(batches[2].epoch() == 0);
}

TEST_CASE("a data loader with drop_last drops the partial batch", "[frontend][data]") {
  DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  CHECK(loader.num_batches() == 2);
  std::vector<std::int64_t> sizes;
  for (const Batch& b : loader.epoch()) sizes.push_back(b.size());
  CHECK(sizes == std::vector<std::int64_t>{4, 4});
  // A batch size that divides the data set loses nothing.
  DataLoader exact(numbered(8), {.batch_size = 4, .drop_last = true});
  CHECK(epoch_indices(exact) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("next() walks an epoch, returns nullopt at its end, and starts one if none was",
          "[frontend][data]") {
  DataLoader loader(numbered(5), {.batch_size = 2});
  CHECK(loader.epochs_started() == 0);
  std::int64_t rows = 0, batches = 0;
  while (auto b = loader.next()) {
    rows += b->size();
    ++batches;
  }
  CHECK(rows == 5);
  CHECK(batches == 3);
  CHECK_FALSE(loader.next());  // still the end until the next epoch
  CHECK(loader.epochs_started() == 1);
  loader.start_epoch();
  auto first = loader.next();
  REQUIRE(first);
  CHECK(first->epoch() == 1);
  CHECK(first->indices() == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("a shuffled epoch is a permutation, reproducible by seed and new each epoch",
          "[frontend][data]") {
  const DataLoaderOptions options{.batch_size = 7, .shuffle = true, .seed = 42};
  DataLoader a(numbered(50), options), b(numbered(50), options);
  const auto a0 = epoch_indices(a), a1 = epoch_indices(a);
  const auto b0 = epoch_indices(b), b1 = epoch_indices(b);
  std::vector<std::int64_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  for (const auto* order : {&a0, &a1}) {
    auto sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == all);
  }
  CHECK(a0 != all);
  CHECK(a0 != a1);
  CHECK(a0 == b0);
  CHECK(a1 == b1);
  DataLoader other_seed(numbered(50), {.batch_size = 7, .shuffle = true, .seed = 43});
  CHECK(epoch_indices(other_seed) != a0);
}

TEST_CASE("a shuffled batch holds the rows its indices name", "[frontend][data]") {
  DataLoader loader(numbered(20), {.batch_size = 6, .shuffle = true, .seed = 3});
  for (const Batch& b : loader.epoch()) {
    const auto x = b[0].to_vector<float>();
    const auto y = b[1].to_vector<std::int64_t>();
    for (std::size_t r = 0; r < b.indices().size(); ++r) {
      const std::int64_t i = b.indices()[r];
      CHECK(y[r] == i);
      CHECK(x[2 * r] == static_cast<float>(10 * i));
      CHECK(x[2 * r + 1] == static_cast<float>(10 * i + 1));
    }
  }
}

TEST_CASE("the reader runs at most queue_capacity batches ahead of the consumer", "[frontend][data]") {
  auto data = counting(100);
  DataLoader loader(data, {.batch_size = 4, .queue_capacity = 2});
  loader.start_epoch();
  CHECK(eventually([&] { return data->reads.load() == 8; }));
  std::this_thread::sleep_for(50ms);
  CHECK(data->reads.load() == 8);  // waits for room instead of reading batch 3
  auto b = loader.next();
  REQUIRE(b);
  CHECK(b->number() == 0);
  CHECK(eventually([&] { return data->reads.load() == 12; }));
  std::this_thread::sleep_for(50ms);
  CHECK(data->reads.load() == 12);
}

TEST_CASE("a data set's kiln::Error reaches the consumer after the batches before it",
          "[frontend][data]") {
  auto data = counting(10);
  data->fail_at = 6;
  DataLoader loader(data, {.batch_size = 3});
  auto b0 = loader.next(), b1 = loader.next();
  REQUIRE(b0);
  REQUIRE(b1);
  CHECK(b1->indices() == std::vector<std::int64_t>{3, 4, 5});
  KILN_CHECK_ERROR(loader.next(), DataLoss,
                   {"DataLoader: reading sample 6 for batch 2 of epoch 0 failed", "record 6 is corrupt"});
  KILN_CHECK_ERROR(loader.next(), DataLoss, {"record 6 is corrupt"});  // again until a new epoch
  loader.start_epoch();
  auto again = loader.next();
  REQUIRE(again);
  CHECK(again->epoch() == 1);
}

TEST_CASE("a data set's other exception reaches the consumer as an Internal kiln::Error",
          "[frontend][data]") {
  auto data = counting(4);
  data->fail_at = 0;
  data->throw_std = true;
  DataLoader loader(data, {.batch_size = 2});
  KILN_CHECK_ERROR(loader.next(), Internal, {"reading sample 0 for batch 0", "disk on fire"});
}

TEST_CASE("destroying a data loader mid-epoch stops its reader without hanging", "[frontend][data]") {
  auto data = counting(1000);
  data->delay = 1ms;
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(data, {.batch_size = 10, .queue_capacity = 4});
    REQUIRE(loader.next());
  }  // the reader is mid-batch or waiting for room
  {
    const std::int64_t before = data->reads.load();
    DataLoader waiting(data, {.batch_size = 1, .queue_capacity = 1});
    waiting.start_epoch();
    CHECK(eventually([&] { return data->reads.load() == before + 1; }));  // then it waits for room
  }
  {
    DataLoader never_started(data, {.batch_size = 5});
  }
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  const std::int64_t reads = data->reads.load();
  std::this_thread::sleep_for(20ms);
  CHECK(data->reads.load() == reads);  // no reader left running
}

TEST_CASE("starting a new epoch mid-epoch drops the old epoch's batches", "[frontend][data]") {
  DataLoader loader(numbered(12), {.batch_size = 2, .queue_capacity = 3});
  REQUIRE(loader.next());
  loader.start_epoch();
  const auto order = epoch_indices(loader);  // epoch() starts epoch 2
  CHECK(order.size() == 12);
  CHECK(loader.epochs_started() == 3);
}

TEST_CASE("a batch's feed is what Executor::run takes", "[frontend][data]") {
  Program main_prog, startup;
  Value y, label;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {-1, 2});
    label = data("label", {-1}, DataType::Int64);
    y = nn::functional::relu(x);
  }
  Executor exe;
  DataLoader loader(numbered(5), {.batch_size = 2, .feed_names = {"x", "label"}});
  CHECK(loader.feed_names() == std::vector<std::string>{"x", "label"});
  std::vector<float> ys;
  std::vector<std::int64_t> labels;
  for (const Batch& b : loader.epoch()) {
    auto fetched = exe.run(main_prog, b.feed(), {y, label});
    const auto v = fetched[0].to_vector<float>();
    const auto l = fetched[1].to_vector<std::int64_t>();
    ys.insert(ys.end(), v.begin(), v.end());
    labels.insert(labels.end(), l.begin(), l.end());
  }
  CHECK(ys == std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41});
  CHECK(labels == std::vector<std::int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("feed names default to the data set's column names", "[frontend][data]") {
  DataLoader named(numbered(3), {.batch_size = 3});
  CHECK(named.feed_names() == std::vector<std::string>{"x", "label"});
  auto b = named.next();
  REQUIRE(b);
  CHECK(b->feed().at("label").to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2});
  Tensor x = Tensor::from_vector<float>({2, 1}, {1, 2});
  DataLoader unnamed(TensorDataset{x, x}, {.batch_size = 2});
  CHECK(unnamed.feed_names().empty());
  auto u = unnamed.next();
  REQUIRE(u);
  KILN_CHECK_ERROR(u->feed(), PreconditionNotMet, {"no feed names", "feed_names"});
}

TEST_CASE("a data set's get() may assign its row tensors instead of writing into them",
          "[frontend][data]") {
  struct Assigning : Dataset {
    std::int64_t size() const override { return 3; }
    std::vector<DatasetColumn> columns() const override { return {{Dims{2}, DataType::Float32, ""}}; }
    void get(std::int64_t i, std::span<Tensor> row) const override {
      row[0] = Tensor::from_vector<float>({2}, {float(i), -float(i)});
    }
  };
  DataLoader loader(Assigning{}, {.batch_size = 3});
  auto b = loader.next();
  REQUIRE(b);
  CHECK(b->tensors()[0].to_vector<float>() == std::vector<float>{0, 0, 1, -1, 2, -2});

  struct WrongShape : Assigning {
    void get(std::int64_t, std::span<Tensor> row) const override {
      row[0] = Tensor::from_vector<float>({3}, {1, 2, 3});
    }
  };
  DataLoader wrong(WrongShape{}, {.batch_size = 3});
  KILN_CHECK_ERROR(wrong.next(), InvalidArgument,
                   {"reading sample 0", "replaced row tensor #0 with tensor<3xf32>@cpu", "dims [2]"});
}

TEST_CASE("a tensor data set rejects tensors of different leading dims, naming them",
          "[frontend][data]") {
  Tensor x = Tensor::zeros({10, 4}, DataType::Float32);
  Tensor y = Tensor::zeros({9, 1}, DataType::Float32);
  KILN_CHECK_ERROR(TensorDataset({x, y}, {"features", "labels"}), InvalidArgument,
                   {"tensor #1 'labels' (tensor<9x1xf32>@cpu) has 9 samples",
                    "tensor #0 'features' (tensor<10x4xf32>@cpu) has 10"});
  KILN_CHECK_ERROR(TensorDataset({x, y}), InvalidArgument, {"tensor #1 (tensor<9x1xf32>@cpu)"});
  KILN_CHECK_ERROR(TensorDataset(std::vector<Tensor>{}), InvalidArgument, {"no tensors"});
  KILN_CHECK_ERROR(TensorDataset({x, Tensor()}), InvalidArgument, {"tensor #1", "uninitialized"});
  KILN_CHECK_ERROR(TensorDataset({x, Tensor::zeros({}, DataType::Float32)}), InvalidArgument,
                   {"tensor #1", "rank 0"});
  KILN_CHECK_ERROR(TensorDataset({x}, {"a", "b"}), InvalidArgument, {"2 names for 1 tensors"});
  float gpu_memory[4] = {};
  Tensor on_gpu = Tensor::from_external(gpu_memory, sizeof gpu_memory, {4}, DataType::Float32, Place::cuda(0));
  KILN_CHECK_ERROR(TensorDataset({on_gpu}), Unimplemented, {"tensor #0", "not in host memory"});
}

TEST_CASE("a data loader rejects bad options with a clear error", "[frontend][data]") {
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.batch_size = 0}), InvalidArgument,
                   {"batch_size must be >= 1, given 0"});
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.batch_size = 11, .drop_last = true}), InvalidArgument,
                   {"batch_size 11 is larger than the data set's 10 samples", "drop_last"});
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.queue_capacity = 0}), InvalidArgument,
                   {"queue_capacity", "must be >= 1"});
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.feed_names = {"x"}}), InvalidArgument,
                   {"1 feed names for a data set of 2 columns"});
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.feed_names = {"x", "x"}}), InvalidArgument,
                   {"feed name 'x' is given twice"});
  KILN_CHECK_ERROR(DataLoader(numbered(10), {.feed_names = {"x", ""}}), InvalidArgument,
                   {"a feed name is empty"});
  KILN_CHECK_ERROR(DataLoader(std::shared_ptr<const Dataset>(), {}), InvalidArgument, {"null"});
  // Larger than the data set without drop_last: one partial batch.
  DataLoader big(numbered(3), {.batch_size = 11});
  CHECK(big.num_batches() == 1);
  CHECK(epoch_indices(big) == std::vector<std::int64_t>{0, 1, 2});
}
