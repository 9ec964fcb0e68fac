// Where kiln.resize samples along one axis (ONNX Resize's coordinate
// transformations and interpolation weights): shared by its CPU kernel and
// the ONNX importer, which composes the same sampling at import when the
// sizes are known then. Not part of kiln_dialect.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ResizeSampling {
  std::string mode;         // nearest, linear, cubic
  std::string coordinates;  // ONNX's coordinate_transformation_mode
  std::string nearest;      // ONNX's nearest_mode
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

// One axis resized from `in` to `out` positions: output position j reads
// the `points` inputs index[j·points + k] (clamped to [0, in)) with weights
// weight[j·points + k]; outside[j]: tf_crop_and_resize's position j lies
// outside the input (it takes the extrapolation value). `scale` = out / in
// or the scale given; roi_start / roi_end are read by tf_crop_and_resize.
struct ResizeAxisTable {
  int points = 0;
  std::vector<std::int64_t> index;
  std::vector<double> weight;
  std::vector<char> outside;
};
ResizeAxisTable resize_axis_table(const ResizeSampling& s, std::int64_t in, std::int64_t out,
                                  double scale, double roi_start, double roi_end);

}  // namespace kiln
