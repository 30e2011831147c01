// Entry point of torchrl._C. Each component registers its bindings from its own file.
#include <pybind11/pybind11.h>

#include "segment_tree.h"
#include "value.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchrl C++ kernels (torch-free: pybind11 over numpy buffers)";
  init_segment_tree(m);
  init_value(m);
}
