// Task: a move-only `void()` callable with 48 bytes of inline storage, the unit
// of work a Stream runs (seed 001 §4.2: an op's kernel launched onto a stream).
// Unlike std::function it accepts move-only captures (a Tensor moved in, a
// promise) and does not allocate for the small captures kernels use.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace kiln {

class Task {
 public:
  static constexpr std::size_t kInlineBytes = 48;

  Task() noexcept = default;
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, Task> && std::is_invocable_v<std::decay_t<F>&>)
  Task(F&& f);  // NOLINT(google-explicit-constructor): lambdas convert implicitly

  Task(Task&& other) noexcept;
  Task& operator=(Task&& other) noexcept;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task();

  // Calls the callable. Precondition: *this holds one (operator bool).
  void operator()();
  explicit operator bool() const noexcept { return vtable_ != nullptr; }
  void reset() noexcept;

 private:
  struct VTable {
    void (*invoke)(void* storage);
    void (*move)(void* dst, void* src) noexcept;  // move-constructs dst, destroys src
    void (*destroy)(void* storage) noexcept;
  };

  template <typename F>
  static constexpr bool fits_inline = sizeof(F) <= kInlineBytes &&
                                      alignof(F) <= alignof(std::max_align_t) &&
                                      std::is_nothrow_move_constructible_v<F>;

  template <typename F>
  static const VTable* inline_vtable();
  template <typename F>
  static const VTable* heap_vtable();

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  const VTable* vtable_ = nullptr;
};

template <typename F>
inline const Task::VTable* Task::inline_vtable() {
  static constexpr VTable table{
      [](void* s) { (*std::launder(static_cast<F*>(s)))(); },
      [](void* dst, void* src) noexcept {
        F* from = std::launder(static_cast<F*>(src));
        ::new (dst) F(std::move(*from));
        from->~F();
      },
      [](void* s) noexcept { std::launder(static_cast<F*>(s))->~F(); },
  };
  return &table;
}

template <typename F>
inline const Task::VTable* Task::heap_vtable() {
  static constexpr VTable table{
      [](void* s) { (**static_cast<F**>(s))(); },
      [](void* dst, void* src) noexcept { *static_cast<F**>(dst) = *static_cast<F**>(src); },
      [](void* s) noexcept { delete *static_cast<F**>(s); },
  };
  return &table;
}

template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, Task> && std::is_invocable_v<std::decay_t<F>&>)
inline Task::Task(F&& f) {
  using Fn = std::decay_t<F>;
  if constexpr (fits_inline<Fn>) {
    ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
    vtable_ = inline_vtable<Fn>();
  } else {
    *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(f));
    vtable_ = heap_vtable<Fn>();
  }
}

inline Task::Task(Task&& other) noexcept : vtable_(other.vtable_) {
  if (vtable_) {
    vtable_->move(storage_, other.storage_);
    other.vtable_ = nullptr;
  }
}

inline Task& Task::operator=(Task&& other) noexcept {
  if (this != &other) {
    reset();
    vtable_ = other.vtable_;
    if (vtable_) {
      vtable_->move(storage_, other.storage_);
      other.vtable_ = nullptr;
    }
  }
  return *this;
}

inline Task::~Task() { reset(); }

inline void Task::reset() noexcept {
  if (vtable_) {
    vtable_->destroy(storage_);
    vtable_ = nullptr;
  }
}

inline void Task::operator()() { vtable_->invoke(storage_); }

}  // namespace kiln
