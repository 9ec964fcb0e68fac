// Variable: the runtime slot one IR value maps to (seed 001 §3.1: the Scope's
// Variables, InitializeVariable by var type). It holds nothing yet, a Tensor,
// a TensorArray or a Scalar; typed getters throw kiln::Error naming the
// variable when it holds another kind.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/runtime/tensor.h"
#include "kiln/support/data_type.h"
#include "kiln/support/error.h"
#include "kiln/support/host_device.h"

namespace kiln {

using TensorArray = std::vector<Tensor>;

// A host scalar: f64, i64 or bool.
class Scalar {
 public:
  Scalar() : value_(0.0) {}
  Scalar(double v) : value_(v) {}               // NOLINT(google-explicit-constructor)
  Scalar(float v) : value_(double{v}) {}        // NOLINT
  Scalar(std::int64_t v) : value_(v) {}         // NOLINT
  Scalar(int v) : value_(std::int64_t{v}) {}    // NOLINT
  Scalar(bool v) : value_(v) {}                 // NOLINT

  // Float64, Int64 or Bool.
  DataType dtype() const noexcept;
  // The value converted to T (arithmetic) as static_cast would.
  template <typename T>
  T to() const;
  friend bool operator==(const Scalar&, const Scalar&) = default;
  std::string to_string() const;

 private:
  std::variant<double, std::int64_t, bool> value_;
};

enum class VariableKind : std::uint8_t { Empty, Tensor, TensorArray, Scalar };
std::string_view to_string(VariableKind kind);

template <typename T>
inline constexpr bool is_variable_content =
    std::is_same_v<T, Tensor> || std::is_same_v<T, TensorArray> || std::is_same_v<T, Scalar>;

class Variable {
 public:
  explicit Variable(std::string name = {}) : name_(std::move(name)) {}

  const std::string& name() const noexcept { return name_; }
  // Empty when nothing is held, or when what is held was parked (park()).
  VariableKind kind() const noexcept {
    return parked_ ? VariableKind::Empty : static_cast<VariableKind>(content_.index());
  }
  // Holds something (a Tensor counts even when the Tensor is uninitialized).
  bool is_initialized() const noexcept { return kind() != VariableKind::Empty; }
  template <typename T>
  bool is() const noexcept;

  // The held T; kiln::Error (PreconditionNotMet) naming the variable, the kind
  // asked for and the kind held, when it holds something else or nothing.
  template <typename T>
  const T& get() const;
  template <typename T>
  T& get();
  // The held T, created (default) when empty, taken back when parked;
  // kiln::Error (PreconditionNotMet) when it holds another kind.
  template <typename T>
  T& get_mutable();
  // Stores `value`; allowed when empty or holding the same kind, otherwise
  // kiln::Error (PreconditionNotMet) — clear() first to change the kind.
  template <typename T>
  void set(T value);
  // Back to empty; drops what was held (a tensor's buffer reference).
  void clear() noexcept {
    content_.template emplace<std::monostate>();
    parked_ = false;
  }
  // Empty as a user sees it (kind(), is<T>(), get<T>()), as after clear(),
  // but what was held stays underneath: the next get_mutable<T>() (a
  // kernel's KernelContext::alloc_output) takes it back, a tensor with its
  // buffer and dims, instead of allocating. The executor's GC of values
  // whose buffers it keeps from run to run (small static temporaries,
  // memory-plan pieces): one store, where moving the tensor out and back
  // made the seed model's step ~11 % more instructions.
  void park() noexcept { parked_ = true; }
  // The held tensor, parked or not; null when there is none (for the
  // executor's own bookkeeping: which buffers its slots keep).
  const Tensor* held_or_parked() const noexcept { return std::get_if<Tensor>(&content_); }
  // Back to empty, like clear(), but a tensor buffer of at most `max_bytes`
  // that nothing else references is kept as this variable's spare: the next
  // KernelContext::alloc_output into this variable takes it instead of
  // allocating (the executor's GC of small temporaries, run after run).
  void recycle(std::size_t max_bytes) noexcept;
  // Exchanges what the two variables hold, parked or not (not their names
  // or spares).
  void swap_content(Variable& other) noexcept;
  // Holds what `other` holds: the same tensor (a shared buffer reference), a
  // copy of its tensor array (sharing the elements' buffers) or scalar;
  // nothing when `other`'s content is parked.
  void share_content(const Variable& other);
  // Takes what `other` holds, parked or not; `other` becomes empty.
  void take_content(Variable& other) noexcept;
  // The spare buffer, if any (the variable no longer holds it).
  BufferRef take_spare() noexcept { return std::move(spare_); }
  bool has_spare() const noexcept { return static_cast<bool>(spare_); }

 private:
  template <typename T>
  static constexpr VariableKind kind_of();
  template <typename T>
  [[noreturn]] void throw_kind_mismatch(const char* what) const;
  // get_mutable when the variable does not hold a T yet (out of line: the
  // held case, on every kernel run, stays two instructions).
  template <typename T>
  [[gnu::noinline]] T& make_content();

  std::string name_;
  std::variant<std::monostate, Tensor, TensorArray, Scalar> content_;
  BufferRef spare_;      // see recycle()
  bool parked_ = false;  // see park()
};

// ---------------------------------------------------------------------------

inline DataType Scalar::dtype() const noexcept {
  switch (value_.index()) {
    case 0: return DataType::Float64;
    case 1: return DataType::Int64;
    default: return DataType::Bool;
  }
}

template <typename T>
inline T Scalar::to() const {
  static_assert(std::is_arithmetic_v<T>, "Scalar::to<T>: T must be arithmetic");
  return std::visit([](auto v) { return static_cast<T>(v); }, value_);
}

template <typename T>
inline constexpr VariableKind Variable::kind_of() {
  static_assert(is_variable_content<T>, "a Variable holds Tensor, TensorArray or Scalar");
  if constexpr (std::is_same_v<T, Tensor>) return VariableKind::Tensor;
  else if constexpr (std::is_same_v<T, TensorArray>) return VariableKind::TensorArray;
  else return VariableKind::Scalar;
}

inline void Variable::recycle(std::size_t max_bytes) noexcept {
  if (auto* t = std::get_if<Tensor>(&content_)) {
    const Buffer* b = t->buffer().get();
    // use_count() loads with acquire: the other owners' last reads happen
    // before the buffer is written again (see Buffer::use_count).
    // A buffer with recorded stream work goes the slow way (its last release
    // waits for the streams); recycling it would skip that wait.
    if (b && b->size() <= max_bytes && b->allocator() && !b->stream_recorded() &&
        t->use_count() == 1)
      spare_ = t->release_buffer();
  }
  content_.template emplace<std::monostate>();
  parked_ = false;
}

template <typename T>
inline bool Variable::is() const noexcept {
  return kind() == kind_of<T>();
}

template <typename T>
inline void Variable::throw_kind_mismatch(const char* what) const {
  throw_error(ErrorKind::PreconditionNotMet, "variable '", name_, "': ", what, "<",
              to_string(kind_of<T>()), "> but it holds ",
              is_initialized() ? "a " : "", to_string(kind()), " (expected ", to_string(kind_of<T>()),
              ", given ", to_string(kind()), ")");
}

template <typename T>
inline const T& Variable::get() const {
  if (const T* p = std::get_if<T>(&content_); p && !parked_) return *p;
  throw_kind_mismatch<T>("get");
}

template <typename T>
inline T& Variable::get() {
  if (T* p = std::get_if<T>(&content_); p && !parked_) return *p;
  throw_kind_mismatch<T>("get");
}

template <typename T>
KILN_ALWAYS_INLINE inline T& Variable::get_mutable() {
  if (T* p = std::get_if<T>(&content_)) [[likely]] {
    parked_ = false;  // a parked T is taken back
    return *p;
  }
  return make_content<T>();
}

template <typename T>
T& Variable::make_content() {
  if (kind() != VariableKind::Empty) throw_kind_mismatch<T>("get_mutable");
  parked_ = false;  // a parked value of another kind goes
  return content_.template emplace<T>();
}

template <typename T>
inline void Variable::set(T value) {
  if (kind() != VariableKind::Empty && kind() != kind_of<T>()) throw_kind_mismatch<T>("set");
  content_.template emplace<T>(std::move(value));
  parked_ = false;
}

}  // namespace kiln
