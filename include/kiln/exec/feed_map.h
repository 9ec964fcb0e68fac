// FeedMap: a run's feeds by data-op name (Executor::run, DataLoader::feed,
// ExecutorBarrier). Sorted by name: the Executor's cores take their feeds
// in that order.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "kiln/runtime/tensor.h"

namespace kiln {

using FeedMap = std::map<std::string, Tensor, std::less<>>;

}  // namespace kiln
