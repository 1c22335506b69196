// Shapes are plain vectors of extents; helpers for the arithmetic every op needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace seqto {

using Shape = std::vector<int64_t>;

// Product of the extents; INT64_MAX if that overflows.
int64_t NumElements(const Shape& shape);
// "1x3x224x224"; "scalar" for rank 0.
std::string ShapeToString(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> ContiguousStrides(const Shape& shape);
// Numpy-style broadcast of two shapes, or an error naming both.
Expected<Shape> BroadcastShapes(const Shape& a, const Shape& b);
// Maps a possibly negative axis into [0, rank); error if out of range.
Expected<int64_t> NormalizeAxis(int64_t axis, int64_t rank);

}  // namespace seqto
