// A tensor's value as an attribute (MLIR's DenseElementsAttr, Paddle's
// assign_value values): dtype, dims and the elements' bytes, row-major. What
// builtin.constant holds and what an ONNX initializer or Constant node
// becomes. JSON keeps the values as numbers (exact for every dtype kiln has;
// f16 and bf16 as their bit patterns).
//
// Two kinds, one attribute class:
//   - get(): uniqued in the IrContext by content (xxHash of the bytes), so
//     two equal constants are one attribute; its bytes live as long as the
//     context (the process).
//   - get_held(): a new attribute on every call, whose bytes belong to the
//     ops that carry it as an attribute (MLIR's resource blobs, with the ops
//     as owners): when the last such op is destroyed, or a setter takes it
//     from that op, the bytes are freed, so destroying a program frees its
//     weights. Until an op first carries it, the attribute keeps its bytes.
//     What large constants use. Only an op's own
//     attributes count: inside an array or dictionary attribute it holds
//     nothing, and its bytes go with the last op carrying it directly.
// A held attribute whose bytes were freed keeps its dtype and dims; reading
// its bytes, or giving it to a new op, is a kiln::Error (PreconditionNotMet).
// get_or_hold() chooses by size, as the text parser, JSON load and the ONNX
// importer do: small constants (shapes, scalars, what folding and CSE compare)
// stay one attribute per content, and a program's large ones go with it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/dialect.h"
#include "kiln/support/data_type.h"

namespace kiln {

struct TensorAttributeStorage : AttributeStorage {
  struct KeyTy {
    DataType dtype;
    std::vector<std::int64_t> dims;
    std::string bytes;
    std::uint64_t held_id = 0;  // 0: uniqued by content; else get_held's, one per call
  };
  explicit TensorAttributeStorage(KeyTy k) : key(std::move(k)) {}
  bool operator==(const KeyTy& k) const {
    if (key.held_id || k.held_id) return key.held_id == k.held_id;
    return key.dtype == k.dtype && key.dims == k.dims && key.bytes == k.bytes;
  }
  static std::size_t hash_key(const KeyTy& k);

  // Held attributes: the ops carrying it (Operation counts itself in and
  // out); kReleased once the last one went and the bytes were freed.
  static constexpr std::uint32_t kReleased = ~std::uint32_t{0};
  bool add_holder() const;  // false (nothing changed) when released
  void drop_holder() const;
  // Takes back an add_holder() of an op that was never made: frees nothing.
  void undo_add_holder() const { holders.fetch_sub(1, std::memory_order_acq_rel); }
  bool released() const { return holders.load(std::memory_order_acquire) == kReleased; }

  KeyTy key;
  mutable std::atomic<std::uint32_t> holders{0};
};

class TensorAttribute : public AttrBase<TensorAttribute, TensorAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  static constexpr std::string_view name = "tensor";
  // kiln::Error (InvalidArgument) for a dim below 0, an undefined dtype, or
  // bytes that are not numel × the dtype's size.
  static TensorAttribute get(DataType dtype, std::vector<std::int64_t> dims, std::string bytes);
  // Same checks; held by the ops that carry it (see the top of this file).
  static TensorAttribute get_held(DataType dtype, std::vector<std::int64_t> dims,
                                  std::string bytes);
  // The most elements get_or_hold() uniques.
  static constexpr std::int64_t kMaxUniquedElements = std::int64_t{1} << 16;
  // get() up to kMaxUniquedElements elements, get_held() above; same checks.
  static TensorAttribute get_or_hold(DataType dtype, std::vector<std::int64_t> dims,
                                     std::string bytes);
  DataType dtype() const { return storage()->key.dtype; }
  const std::vector<std::int64_t>& dims() const { return storage()->key.dims; }
  // kiln::Error (PreconditionNotMet) when held and released.
  std::string_view bytes() const {
    if (storage()->released()) throw_released();
    return storage()->key.bytes;
  }
  std::int64_t numel() const;
  bool held() const { return storage()->key.held_id != 0; }
  bool released() const { return storage()->released(); }

  // "tensor<2x3xf32> [1, 2, 3, 4, 5, 6]": every value (f16 / bf16 as their
  // bit patterns), floats in their shortest round-trip form.
  // A released attribute prints as "tensor<2x3xf32> <released>".
  void print(std::ostream& os) const;
  // {"dtype": "f32", "dims": [2, 3], "values": [1, 2, 3, 4, 5, 6]}; NaN and
  // infinities as the strings "nan", "-inf", "nan(0x7fc00001)", ….
  void save(nlohmann::json& j) const;
  static TensorAttribute load(const nlohmann::json& j);

 private:
  [[noreturn, gnu::cold]] void throw_released() const;
};

}  // namespace kiln
