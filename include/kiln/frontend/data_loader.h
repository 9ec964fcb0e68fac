// DataLoader: batches of a data set for a training loop, as PyTorch's
// torch.utils.data.DataLoader or Paddle's paddle.io.DataLoader give them. A
// reader thread gathers samples into batches (in order, or shuffled per
// epoch from a seed) and keeps a bounded queue of them ready, so reading the
// next batches overlaps the executor running this one. A batch's feed() is
// what Executor::run takes (seed 001 §1.2: feed by data-op name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/exec/feed_map.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

// One field of every sample: its shape without the batch dim, its dtype, and
// a name (may be empty) that becomes its feed name when the loader is given
// none.
struct DatasetColumn {
  Dims dims;
  DataType dtype = DataType::Float32;
  std::string name;
};

// A data set of size() samples, each one tensor per column. Subclass it to
// read samples from files or generate them.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of samples.
  virtual std::int64_t size() const = 0;
  // The columns; the same on every call.
  virtual std::vector<DatasetColumn> columns() const = 0;
  // Writes sample `index` (0 <= index < size()) into `row`: one CPU tensor
  // per column, of that column's dims and dtype, each a view of its row of
  // the batch being assembled. Called on the loader's reader thread, one call
  // at a time per loader (a data set shared by several loaders must allow
  // concurrent calls). An exception it throws ends the epoch: the consumer
  // gets it as a kiln::Error from DataLoader::next().
  virtual void get(std::int64_t index, std::span<Tensor> row) const = 0;
};

// In-memory tensors sharing their leading dim N: sample i is row i of each.
class TensorDataset final : public Dataset {
 public:
  // Tensors on the CPU (or a host stream) of rank >= 1. `names` (empty, or
  // one per tensor) become the columns' names. kiln::Error (InvalidArgument)
  // for no tensors, an uninitialized or rank-0 tensor, one whose leading dim
  // differs from the first's (naming both tensors and their types), or a
  // names list of another length; (Unimplemented) for a tensor off the host.
  explicit TensorDataset(std::vector<Tensor> tensors, std::vector<std::string> names = {});
  TensorDataset(std::initializer_list<Tensor> tensors);

  std::int64_t size() const override { return size_; }
  std::vector<DatasetColumn> columns() const override;
  void get(std::int64_t index, std::span<Tensor> row) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  std::vector<std::string> names_;
  std::int64_t size_ = 0;
};

struct DataLoaderOptions {
  // Samples per batch (>= 1).
  std::int64_t batch_size = 1;
  // A new order of the samples each epoch, drawn from `seed` and the epoch's
  // number (the same seed gives the same orders).
  bool shuffle = false;
  // Drop the last batch when it has fewer than batch_size samples.
  bool drop_last = false;
  std::uint64_t seed = 0;
  // Batches the reader assembles ahead of the consumer (>= 1): it waits
  // while this many are ready and not yet taken.
  std::size_t queue_capacity = 2;
  // One feed name per column; empty: the columns' names (when all have one).
  std::vector<std::string> feed_names = {};
};

// Consecutive samples of one epoch: a tensor per column with the batch as
// dim 0 ([rows, column dims...]), fresh memory the caller may keep.
class Batch {
 public:
  // Samples in the batch (dim 0 of each tensor).
  std::int64_t size() const { return static_cast<std::int64_t>(indices_.size()); }
  std::size_t num_tensors() const { return tensors_.size(); }
  const Tensor& operator[](std::size_t column) const { return tensors_.at(column); }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The feed for Executor::run: the tensors by feed name. kiln::Error
  // (PreconditionNotMet) when the loader has no feed names.
  const FeedMap& feed() const;
  // The data set's index of each row.
  const std::vector<std::int64_t>& indices() const { return indices_; }
  // The batch's number within its epoch, and the epoch's number.
  std::int64_t number() const { return number_; }
  std::int64_t epoch() const { return epoch_; }

 private:
  friend class DataLoader;
  std::vector<Tensor> tensors_;
  FeedMap feed_;
  bool has_feed_ = false;
  std::vector<std::int64_t> indices_;
  std::int64_t number_ = 0, epoch_ = 0;
};

class DataLoader {
 public:
  // kiln::Error (InvalidArgument): a null data set, batch_size < 1,
  // queue_capacity 0, drop_last with batch_size above the data set's size (no
  // batch at all), feed_names whose count differs from the columns' or with
  // a name twice, a column of undefined dtype or negative dims.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  // Takes a data set by value: DataLoader(TensorDataset{x, y}, options).
  template <typename D>
    requires std::is_base_of_v<Dataset, std::remove_cvref_t<D>>
  DataLoader(D&& dataset, DataLoaderOptions options)
      : DataLoader(std::make_shared<const std::remove_cvref_t<D>>(std::forward<D>(dataset)),
                   std::move(options)) {}
  // Stops the reader (after the sample it is reading) and joins it.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class EpochRange;
  // Starts the next epoch (ending an unfinished one) and returns its
  // batches as a range: `for (const Batch& b : loader.epoch())`.
  EpochRange epoch();
  // Starts the next epoch, ending an unfinished one; the reader begins
  // filling the queue at once.
  void start_epoch();
  // The next batch of the current epoch (an epoch is started if none was),
  // waiting for the reader; nullopt once the epoch's batches are all taken.
  // kiln::Error when reading failed: the data set's kiln::Error with its kind
  // (Internal for another exception), its message led by the sample, batch
  // and epoch; every later call until the next epoch throws it again.
  std::optional<Batch> next();

  // Batches per epoch.
  std::int64_t num_batches() const;
  // Epochs started so far; the current one is epochs_started() - 1.
  std::int64_t epochs_started() const { return epoch_; }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  // The feed names batches carry (empty when there are none).
  const std::vector<std::string>& feed_names() const { return feed_names_; }

 private:
  struct Shared;  // the reader thread, and the queue and flags it shares with the consumer
  void stop_reader();
  void read_epoch(Shared& shared, std::int64_t epoch) const;
  Batch assemble(const std::vector<std::int64_t>& order, std::int64_t number, std::int64_t epoch,
                 const Shared& shared, std::int64_t& failed_index) const;
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::vector<DatasetColumn> columns_;
  std::vector<std::string> feed_names_;
  std::int64_t epoch_ = 0;
  std::unique_ptr<Shared> shared_;  // the current epoch's queue and reader thread
};

// An epoch's batches as an input range; iterating pops them from the loader.
class DataLoader::EpochRange {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;
    iterator() = default;
    explicit iterator(DataLoader* loader);
    Batch& operator*() { return *batch_; }
    Batch* operator->() { return &*batch_; }
    iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !batch_; }

   private:
    DataLoader* loader_ = nullptr;
    std::optional<Batch> batch_;
  };

  explicit EpochRange(DataLoader& loader) : loader_(&loader) {}
  iterator begin() { return iterator(loader_); }
  std::default_sentinel_t end() { return {}; }

 private:
  DataLoader* loader_;
};

inline DataLoader::EpochRange DataLoader::epoch() {
  start_epoch();
  return EpochRange(*this);
}

}  // namespace kiln
