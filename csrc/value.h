// Backward value recursions (GAE, TD(lambda), discounted sums) over numpy buffers.
//
// Torch-free: Python hands over numpy views of contiguous CPU tensors laid out as [N, T, F]
// (lanes x time x features) and preallocated outputs; the kernels release the GIL.
#pragma once

#include <pybind11/pybind11.h>

void init_value(pybind11::module_& m);
