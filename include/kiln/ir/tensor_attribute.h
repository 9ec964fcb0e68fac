// A tensor's value as an attribute (MLIR's DenseElementsAttr, Paddle's
// assign_value values): dtype, dims and the elements' bytes, row-major. What
// builtin.constant holds and what an ONNX initializer or Constant node
// becomes. Uniqued in the IrContext by content (xxHash of the bytes), so two
// equal constants are one attribute; it lives as long as the context. JSON
// keeps the values as numbers (exact for every dtype kiln has; f16 and bf16
// as their bit patterns).
#pragma once

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
  };
  explicit TensorAttributeStorage(KeyTy k) : key(std::move(k)) {}
  bool operator==(const KeyTy& k) const {
    return key.dtype == k.dtype && key.dims == k.dims && key.bytes == k.bytes;
  }
  static std::size_t hash_key(const KeyTy& k);
  KeyTy key;
};

class TensorAttribute : public AttrBase<TensorAttribute, TensorAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  static constexpr std::string_view name = "tensor";
  // kiln::Error (InvalidArgument) for a dim below 0, an undefined dtype, or
  // bytes that are not numel × the dtype's size.
  static TensorAttribute get(DataType dtype, std::vector<std::int64_t> dims, std::string bytes);
  DataType dtype() const { return storage()->key.dtype; }
  const std::vector<std::int64_t>& dims() const { return storage()->key.dims; }
  std::string_view bytes() const { return storage()->key.bytes; }
  std::int64_t numel() const;

  // "tensor<2x3xf32> [1, 2, 3, 4, 5, 6]": every value (f16 / bf16 as their
  // bit patterns), floats in their shortest round-trip form.
  void print(std::ostream& os) const;
  // {"dtype": "f32", "dims": [2, 3], "values": [1, 2, 3, 4, 5, 6]}; NaN and
  // infinities as the strings "nan", "-inf", "nan(0x7fc00001)", ….
  void save(nlohmann::json& j) const;
  static TensorAttribute load(const nlohmann::json& j);
};

}  // namespace kiln
