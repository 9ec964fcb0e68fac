// Callback<void(Args...)>: Task with arguments — a move-only callable with 48
// bytes of inline storage, for the done-callbacks of asynchronous calls (seed
// 003: RecvAsync's DoneCallback, RunAsync's done). Small captures (a pointer or
// two, an id) never allocate, which keeps the rendezvous' hot path malloc-free.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace kiln {

template <typename Signature>
class Callback;

template <typename... Args>
class Callback<void(Args...)> {
 public:
  static constexpr std::size_t kInlineBytes = 48;

  Callback() noexcept = default;
  // Defined here, not out of class: clang 14 matches no out-of-class
  // definition of a constructor template with a requires-clause.
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, Callback> &&
             std::is_invocable_v<std::decay_t<F>&, Args...>)
  Callback(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert implicitly
    using Fn = std::decay_t<F>;
    if constexpr (fits_inline<Fn>) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
      vtable_ = inline_vtable<Fn>();
    } else {
      *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(f));
      vtable_ = heap_vtable<Fn>();
    }
  }

  Callback(Callback&& other) noexcept;
  Callback& operator=(Callback&& other) noexcept;
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  // Calls the callable. Precondition: *this holds one (operator bool).
  void operator()(Args... args) { vtable_->invoke(storage_, std::forward<Args>(args)...); }
  explicit operator bool() const noexcept { return vtable_ != nullptr; }
  void reset() noexcept;

 private:
  struct VTable {
    void (*invoke)(void* storage, Args&&... args);
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

// ---------------------------------------------------------------------------

template <typename... Args>
template <typename F>
inline auto Callback<void(Args...)>::inline_vtable() -> const VTable* {
  static constexpr VTable table{
      [](void* s, Args&&... args) {
        (*std::launder(static_cast<F*>(s)))(std::forward<Args>(args)...);
      },
      [](void* dst, void* src) noexcept {
        F* from = std::launder(static_cast<F*>(src));
        ::new (dst) F(std::move(*from));
        from->~F();
      },
      [](void* s) noexcept { std::launder(static_cast<F*>(s))->~F(); },
  };
  return &table;
}

template <typename... Args>
template <typename F>
inline auto Callback<void(Args...)>::heap_vtable() -> const VTable* {
  static constexpr VTable table{
      [](void* s, Args&&... args) { (**static_cast<F**>(s))(std::forward<Args>(args)...); },
      [](void* dst, void* src) noexcept { *static_cast<F**>(dst) = *static_cast<F**>(src); },
      [](void* s) noexcept { delete *static_cast<F**>(s); },
  };
  return &table;
}


template <typename... Args>
inline Callback<void(Args...)>::Callback(Callback&& other) noexcept : vtable_(other.vtable_) {
  if (vtable_) {
    vtable_->move(storage_, other.storage_);
    other.vtable_ = nullptr;
  }
}

template <typename... Args>
inline Callback<void(Args...)>& Callback<void(Args...)>::operator=(Callback&& other) noexcept {
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

template <typename... Args>
inline void Callback<void(Args...)>::reset() noexcept {
  if (vtable_) {
    vtable_->destroy(storage_);
    vtable_ = nullptr;
  }
}

}  // namespace kiln
