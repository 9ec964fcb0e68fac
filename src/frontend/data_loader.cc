// DataLoader: the reader thread, the bounded batch queue, shuffling.
#include "kiln/frontend/data_loader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "kiln/support/error.h"

namespace kiln {

namespace {

bool on_host(const Tensor& t) {
  return t.place().kind == PlaceKind::Cpu || t.place().kind == PlaceKind::HostStream;
}

// [rows, dims...]
Dims batch_dims(std::int64_t rows, const Dims& dims) {
  std::vector<std::int64_t> out{rows};
  out.insert(out.end(), dims.begin(), dims.end());
  return Dims(out);
}

}  // namespace

// --- TensorDataset -------------------------------------------------------------

TensorDataset::TensorDataset(std::initializer_list<Tensor> tensors)
    : TensorDataset(std::vector<Tensor>(tensors)) {}

DataLoader::EpochRange::iterator::iterator(DataLoader* loader) : loader_(loader) { ++*this; }

DataLoader::EpochRange::iterator& DataLoader::EpochRange::iterator::operator++() {
  batch_ = loader_->next();
  return *this;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors, std::vector<std::string> names)
    : tensors_(std::move(tensors)), names_(std::move(names)) {
  if (tensors_.empty()) throw_error(ErrorKind::InvalidArgument, "TensorDataset: no tensors given");
  if (!names_.empty() && names_.size() != tensors_.size())
    throw_error(ErrorKind::InvalidArgument, "TensorDataset: ", names_.size(), " names for ",
                tensors_.size(), " tensors (expected one name per tensor, or none)");
  auto describe = [&](std::size_t i) {
    std::string s = "tensor #" + std::to_string(i);
    if (!names_.empty()) s += " '" + names_[i] + "'";
    return s + " (" + tensors_[i].type_string() + ")";
  };
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (!t.is_initialized())
      throw_error(ErrorKind::InvalidArgument, "TensorDataset: ", describe(i), " is uninitialized");
    if (t.rank() == 0)
      throw_error(ErrorKind::InvalidArgument, "TensorDataset: ", describe(i),
                  " has rank 0 (expected a leading dim of samples)");
    if (!on_host(t))
      throw_error(ErrorKind::Unimplemented, "TensorDataset: ", describe(i),
                  " is not in host memory (expected cpu or a host stream)");
    if (t.dims()[0] != tensors_[0].dims()[0])
      throw_error(ErrorKind::InvalidArgument, "TensorDataset: ", describe(i), " has ", t.dims()[0],
                  " samples but ", describe(0), " has ", tensors_[0].dims()[0],
                  " (expected the same leading dim)");
  }
  size_ = tensors_[0].dims()[0];
}

std::vector<DatasetColumn> TensorDataset::columns() const {
  std::vector<DatasetColumn> out;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Dims& d = tensors_[i].dims();
    out.push_back({Dims(std::span<const std::int64_t>(d.begin() + 1, d.end())), tensors_[i].dtype(),
                   names_.empty() ? std::string() : names_[i]});
  }
  return out;
}

void TensorDataset::get(std::int64_t index, std::span<Tensor> row) const {
  if (index < 0 || index >= size_)
    throw_error(ErrorKind::OutOfRange, "TensorDataset: sample ", index, " is out of range for ", size_,
                " samples");
  if (row.size() != tensors_.size())
    throw_error(ErrorKind::InvalidArgument, "TensorDataset: ", row.size(), " row tensors for ",
                tensors_.size(), " columns");
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const std::size_t bytes = static_cast<std::size_t>(t.dims().row_numel()) * size_of(t.dtype());
    if (row[i].bytes() != bytes || row[i].dtype() != t.dtype())
      throw_error(ErrorKind::InvalidArgument, "TensorDataset: row tensor #", i, " is ",
                  row[i].type_string(), ", expected a sample of ", t.type_string());
    if (bytes)
      std::memcpy(row[i].raw_data(),
                  static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(index) * bytes, bytes);
  }
}

// --- Batch ------------------------------------------------------------------------

const FeedMap& Batch::feed() const {
  if (!has_feed_)
    throw_error(ErrorKind::PreconditionNotMet,
                "Batch::feed: the DataLoader has no feed names (set DataLoaderOptions::feed_names, "
                "or name the data set's columns)");
  return feed_;
}

// --- DataLoader -----------------------------------------------------------------

struct DataLoader::Shared {
  std::mutex mutex;
  std::condition_variable ready;  // the consumer waits for a batch or the end
  std::condition_variable space;  // the reader waits for room in the queue or a stop
  std::deque<Batch> queue;        // at most options_.queue_capacity batches
  bool done = false;              // the reader has pushed its last batch (or failed)
  std::optional<Error> error;     // why it failed, thrown to the consumer
  // Set under the mutex (so a waiting reader sees it on wake-up); the reader
  // also polls it without the lock between samples, hence atomic. Relaxed:
  // it guards no other data.
  std::atomic<bool> stop{false};
  std::thread reader;  // reads the epoch's batches into queue
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (!dataset_) throw_error(ErrorKind::InvalidArgument, "DataLoader: the data set is null");
  if (options_.batch_size < 1)
    throw_error(ErrorKind::InvalidArgument, "DataLoader: batch_size must be >= 1, given ",
                options_.batch_size);
  if (options_.queue_capacity == 0)
    throw_error(ErrorKind::InvalidArgument,
                "DataLoader: queue_capacity (batches read ahead) must be >= 1, given 0");
  const std::int64_t n = dataset_->size();
  if (n < 0) throw_error(ErrorKind::InvalidArgument, "DataLoader: the data set's size is negative (", n, ")");
  if (options_.drop_last && options_.batch_size > n)
    throw_error(ErrorKind::InvalidArgument, "DataLoader: batch_size ", options_.batch_size,
                " is larger than the data set's ", n,
                " samples and drop_last is set, so an epoch would have no batch");
  columns_ = dataset_->columns();
  if (columns_.empty()) throw_error(ErrorKind::InvalidArgument, "DataLoader: the data set has no columns");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const DatasetColumn& col = columns_[c];
    if (col.dtype == DataType::Undefined)
      throw_error(ErrorKind::InvalidArgument, "DataLoader: column #", c, " has an undefined dtype");
    if (col.dims.rank() >= Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "DataLoader: column #", c, " has rank ", col.dims.rank(),
                  " (expected at most ", Dims::kMaxRank - 1, ", leaving one dim for the batch)");
    for (std::int64_t d : col.dims)
      if (d < 0)
        throw_error(ErrorKind::InvalidArgument, "DataLoader: column #", c, " has dims [",
                    col.dims.to_string(), "] (expected every extent >= 0)");
  }

  if (!options_.feed_names.empty()) {
    if (options_.feed_names.size() != columns_.size())
      throw_error(ErrorKind::InvalidArgument, "DataLoader: ", options_.feed_names.size(),
                  " feed names for a data set of ", columns_.size(), " columns (expected one per column)");
    feed_names_ = options_.feed_names;
  } else if (std::all_of(columns_.begin(), columns_.end(), [](const auto& c) { return !c.name.empty(); })) {
    for (const auto& c : columns_) feed_names_.push_back(c.name);
  }
  std::set<std::string, std::less<>> seen;
  for (const auto& name : feed_names_) {
    if (name.empty()) throw_error(ErrorKind::InvalidArgument, "DataLoader: a feed name is empty");
    if (!seen.insert(name).second)
      throw_error(ErrorKind::InvalidArgument, "DataLoader: feed name '", name, "' is given twice");
  }
}

DataLoader::~DataLoader() { stop_reader(); }

std::int64_t DataLoader::num_batches() const {
  const std::int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::stop_reader() {
  if (!shared_) return;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stop.store(true, std::memory_order_relaxed);
  }
  shared_->space.notify_all();
  if (shared_->reader.joinable()) shared_->reader.join();
  shared_.reset();
}

void DataLoader::start_epoch() {
  stop_reader();
  shared_ = std::make_unique<Shared>();
  const std::int64_t epoch = epoch_++;
  try {
    shared_->reader = std::thread([this, shared = shared_.get(), epoch] { read_epoch(*shared, epoch); });
  } catch (const std::system_error& e) {
    shared_.reset();
    throw_error(ErrorKind::Unavailable, "DataLoader: cannot start the reader thread: ", e.what());
  }
}

std::optional<Batch> DataLoader::next() {
  if (!shared_) start_epoch();
  Shared& s = *shared_;
  std::unique_lock lock(s.mutex);
  s.ready.wait(lock, [&] { return !s.queue.empty() || s.done; });
  if (!s.queue.empty()) {
    Batch batch = std::move(s.queue.front());
    s.queue.pop_front();
    lock.unlock();
    s.space.notify_one();
    return batch;
  }
  if (s.error) throw *s.error;
  return std::nullopt;
}

std::vector<std::int64_t> DataLoader::epoch_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset_->size()));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!options_.shuffle) return order;
  // seed_seq and mt19937_64 are fully specified by the standard, and the
  // Fisher-Yates below is ours (std::shuffle's use of the engine is not
  // specified), so a seed gives the same orders with every library.
  const auto seed = options_.seed;
  const auto e = static_cast<std::uint64_t>(epoch);
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(e >> 32)};
  std::mt19937_64 rng(seq);
  for (std::size_t i = order.size(); i > 1; --i) {
    // The modulo's bias is below i / 2^64: nothing for data set sizes.
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

Batch DataLoader::assemble(const std::vector<std::int64_t>& order, std::int64_t number,
                           std::int64_t epoch, const Shared& shared, std::int64_t& failed_index) const {
  const auto begin = static_cast<std::size_t>(number * options_.batch_size);
  const std::size_t end = std::min(order.size(), begin + static_cast<std::size_t>(options_.batch_size));
  const auto rows = static_cast<std::int64_t>(end - begin);
  Batch batch;
  batch.number_ = number;
  batch.epoch_ = epoch;
  batch.indices_.assign(order.begin() + static_cast<std::ptrdiff_t>(begin),
                        order.begin() + static_cast<std::ptrdiff_t>(end));
  for (const auto& col : columns_)
    batch.tensors_.push_back(Tensor::empty(batch_dims(rows, col.dims), col.dtype));

  std::vector<Tensor> row(columns_.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    if (shared.stop.load(std::memory_order_relaxed)) return batch;  // dropped by the caller
    for (std::size_t c = 0; c < columns_.size(); ++c)
      row[c] = batch.tensors_[c].slice(r, r + 1).view(columns_[c].dims);
    failed_index = batch.indices_[static_cast<std::size_t>(r)];
    dataset_->get(failed_index, row);
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      // A get() that assigned a tensor instead of writing into the view:
      // copy it in when it fits.
      Tensor view = batch.tensors_[c].slice(r, r + 1);
      if (row[c].shares_buffer_with(view) && row[c].offset() == view.offset()) continue;
      if (!row[c].is_initialized() || row[c].dtype() != columns_[c].dtype ||
          !(row[c].dims() == columns_[c].dims) || !on_host(row[c]))
        throw_error(ErrorKind::InvalidArgument, "Dataset::get replaced row tensor #", c, " with ",
                    row[c].type_string(), " (expected a sample of dims [", columns_[c].dims.to_string(),
                    "] x ", to_string(columns_[c].dtype), " in host memory, or writes into the given one)");
      if (view.bytes()) std::memcpy(view.raw_data(), row[c].raw_data(), view.bytes());
    }
  }
  failed_index = -1;
  if (!feed_names_.empty()) {
    for (std::size_t c = 0; c < columns_.size(); ++c) batch.feed_.emplace(feed_names_[c], batch.tensors_[c]);
    batch.has_feed_ = true;
  }
  return batch;
}

void DataLoader::read_epoch(Shared& s, std::int64_t epoch) const {
  std::int64_t number = 0, failed_index = -1;
  auto fail = [&](ErrorKind kind, std::string_view message) {
    std::string where = failed_index >= 0 ? "reading sample " + std::to_string(failed_index) + " for"
                                          : "assembling";
    Error error = make_error(kind, "DataLoader: ", where, " batch ", number, " of epoch ", epoch,
                             " failed: ", message);
    {
      std::lock_guard lock(s.mutex);
      s.error = std::move(error);
      s.done = true;
    }
    s.ready.notify_all();
  };
  try {
    const std::vector<std::int64_t> order = epoch_order(epoch);
    const std::int64_t batches = num_batches();
    for (; number < batches; ++number) {
      {
        // Wait for room before assembling, so at most queue_capacity batches
        // are ever read ahead of the consumer.
        std::unique_lock lock(s.mutex);
        s.space.wait(lock, [&] {
          return s.stop.load(std::memory_order_relaxed) || s.queue.size() < options_.queue_capacity;
        });
        if (s.stop.load(std::memory_order_relaxed)) return;
      }
      Batch batch = assemble(order, number, epoch, s, failed_index);
      {
        std::lock_guard lock(s.mutex);
        if (s.stop.load(std::memory_order_relaxed)) return;
        s.queue.push_back(std::move(batch));
      }
      s.ready.notify_one();
    }
    {
      std::lock_guard lock(s.mutex);
      s.done = true;
    }
    s.ready.notify_all();
  } catch (const Error& e) {
    fail(e.kind(), e.message());
  } catch (const std::exception& e) {
    fail(ErrorKind::Internal, e.what());
  } catch (...) {
    fail(ErrorKind::Internal, "an exception that is not a std::exception");
  }
}

}  // namespace kiln
