// kiln::nn losses (seed 001 §1.2, `paddle.nn.MSELoss()(out, label)`):
// callable objects over functional::mse_loss / l1_loss / cross_entropy,
// each with a reduction (mean by default, sum, none).
#pragma once

#include <cstdint>

#include "kiln/frontend/functional.h"

namespace kiln::nn {

class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  Value operator()(Value input, Value label) const {
    return functional::mse_loss(input, label, reduction_);
  }

 private:
  Reduction reduction_;
};

class L1Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  Value operator()(Value input, Value label) const {
    return functional::l1_loss(input, label, reduction_);
  }

 private:
  Reduction reduction_;
};

// logits [N, C], int64 (or int32) labels [N] / [N, 1].
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::Mean, std::int64_t ignore_index = -100)
      : reduction_(reduction), ignore_index_(ignore_index) {}
  Value operator()(Value logits, Value label) const {
    return functional::cross_entropy(logits, label, reduction_, ignore_index_);
  }

 private:
  Reduction reduction_;
  std::int64_t ignore_index_;
};

}  // namespace kiln::nn
