// SmallQueue<T, N>: a FIFO ring buffer holding up to N elements inline and
// growing onto the heap (doubling) past that; the heap storage is kept once
// grown, so a queue in steady use never allocates. The per-key queues of
// values and waiters in LocalRendezvous (seed 003 Rendezvous) are these.
// Not movable: it lives in place (in a hash-table node).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace kiln {

template <typename T, std::size_t N>
class SmallQueue {
  static_assert(N > 0 && (N & (N - 1)) == 0, "N must be a power of two");

 public:
  SmallQueue() noexcept = default;
  SmallQueue(const SmallQueue&) = delete;
  SmallQueue& operator=(const SmallQueue&) = delete;
  ~SmallQueue();

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  // Precondition for front / pop_front: !empty().
  T& front() noexcept { return data_[head_]; }
  void pop_front() noexcept;
  void push_back(T&& value);
  // Removes the first element for which pred(element) holds, moving it into
  // `out`; false when there is none. Keeps the others' order.
  template <typename Pred>
  bool remove_first_if(Pred pred, T& out);
  // Moves every element, in order, to out(T&&), leaving the queue empty.
  template <typename Out>
  void drain(Out out);

 private:
  T& at(std::size_t i) noexcept { return data_[(head_ + i) & (capacity_ - 1)]; }
  void grow();

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = reinterpret_cast<T*>(inline_);
  std::size_t capacity_ = N;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// ---------------------------------------------------------------------------

template <typename T, std::size_t N>
inline SmallQueue<T, N>::~SmallQueue() {
  for (std::size_t i = 0; i < size_; ++i) at(i).~T();
  if (data_ != reinterpret_cast<T*>(inline_)) std::allocator<T>().deallocate(data_, capacity_);
}

template <typename T, std::size_t N>
inline void SmallQueue<T, N>::pop_front() noexcept {
  data_[head_].~T();
  head_ = (head_ + 1) & (capacity_ - 1);
  --size_;
}

template <typename T, std::size_t N>
inline void SmallQueue<T, N>::push_back(T&& value) {
  if (size_ == capacity_) grow();
  ::new (static_cast<void*>(&at(size_))) T(std::move(value));
  ++size_;
}

template <typename T, std::size_t N>
void SmallQueue<T, N>::grow() {
  const std::size_t capacity = capacity_ * 2;
  T* data = std::allocator<T>().allocate(capacity);
  for (std::size_t i = 0; i < size_; ++i) {
    ::new (static_cast<void*>(data + i)) T(std::move(at(i)));
    at(i).~T();
  }
  if (data_ != reinterpret_cast<T*>(inline_)) std::allocator<T>().deallocate(data_, capacity_);
  data_ = data;
  capacity_ = capacity;
  head_ = 0;
}

template <typename T, std::size_t N>
template <typename Pred>
bool SmallQueue<T, N>::remove_first_if(Pred pred, T& out) {
  for (std::size_t i = 0; i < size_; ++i) {
    if (!pred(at(i))) continue;
    out = std::move(at(i));
    for (std::size_t j = i + 1; j < size_; ++j) at(j - 1) = std::move(at(j));
    at(size_ - 1).~T();
    --size_;
    return true;
  }
  return false;
}

template <typename T, std::size_t N>
template <typename Out>
void SmallQueue<T, N>::drain(Out out) {
  while (size_ > 0) {
    out(std::move(front()));
    pop_front();
  }
}

}  // namespace kiln
