// Python bindings of the segment trees (see segment_tree.h): argument checks with the GIL held,
// then the batched work with the GIL released.
#include "segment_tree.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace py = pybind11;

namespace {

using torchrl::MinOp;
using torchrl::SegmentTree;
using torchrl::SumOp;

using IndexArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// Above 2**50 leaves the tree would not fit in any memory, and doubling the size would overflow.
constexpr int64_t kMaxCapacity = int64_t(1) << 50;

std::string dtype_str(const py::array& arr) { return py::str(arr.dtype()).cast<std::string>(); }

py::array as_array(const py::object& obj, const char* what) {
  py::array arr = py::array::ensure(obj);
  if (!arr) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + " must be convertible to a numpy array, got " +
                         py::str(py::type::of(obj)).cast<std::string>());
  }
  return arr;
}

// Converts `obj` to a 1-D int64 array and checks every index lies in [0, capacity).
IndexArray check_indices(const py::object& obj, int64_t capacity) {
  py::array arr = as_array(obj, "indices");
  if (arr.ndim() != 1) {
    throw py::value_error("indices must be a 1-D array, got " + std::to_string(arr.ndim()) +
                          " dimensions");
  }
  const char kind = arr.dtype().kind();
  if (arr.size() > 0 && kind != 'i' && kind != 'u') {
    throw py::type_error("indices must be integers, got dtype " + dtype_str(arr));
  }
  IndexArray idx(arr);  // throws the numpy error if the cast fails
  const int64_t* p = idx.data();
  for (py::ssize_t i = 0; i < idx.size(); ++i) {
    if (p[i] < 0 || p[i] >= capacity) {
      throw py::index_error("index " + std::to_string(p[i]) + " is out of range for a tree of " +
                            "capacity " + std::to_string(capacity));
    }
  }
  return idx;
}

template <typename T>
py::array_t<T, py::array::c_style | py::array::forcecast> as_values(const py::object& obj,
                                                                    const char* what) {
  py::array arr = as_array(obj, what);
  const char kind = arr.dtype().kind();
  if (arr.size() > 0 && kind != 'f' && kind != 'i' && kind != 'u') {
    throw py::type_error(std::string(what) + " must be real numbers, got dtype " + dtype_str(arr));
  }
  return py::array_t<T, py::array::c_style | py::array::forcecast>(arr);
}

// Sum trees take finite non-negative values; min trees take anything but NaN (+inf is "empty").
template <typename T, typename Op>
void check_values(const T* values, py::ssize_t n) {
  for (py::ssize_t i = 0; i < n; ++i) {
    const T v = values[i];
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (!(v >= T(0)) || std::isinf(v)) {
        throw py::value_error("values of a sum tree must be finite and non-negative, got " +
                              std::to_string(v));
      }
    } else {
      if (std::isnan(v)) throw py::value_error("values of a min tree must not be NaN");
    }
  }
}

template <typename T, typename Op>
void bind_tree(py::module_& m, const char* name, const char* doc) {
  using Tree = SegmentTree<T, Op>;
  using ValueArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

  auto cls = py::class_<Tree>(m, name, doc);
  cls.def(py::init([](int64_t capacity) {
            if (capacity <= 0) {
              throw py::value_error("capacity must be a positive integer, got " +
                                    std::to_string(capacity));
            }
            if (capacity > kMaxCapacity) {
              throw py::value_error("capacity " + std::to_string(capacity) + " is too large");
            }
            return new Tree(capacity);
          }),
          py::arg("capacity"))
      .def_property_readonly("capacity", &Tree::capacity)
      .def("__len__", &Tree::capacity)
      .def(
          "update",
          [](Tree& self, const py::object& indices, const py::object& values) {
            IndexArray idx = check_indices(indices, self.capacity());
            ValueArray val = as_values<T>(values, "values");
            const py::ssize_t n = idx.size();
            bool broadcast = false;
            if (val.ndim() == 0) {
              broadcast = true;
            } else if (val.ndim() != 1) {
              throw py::value_error("values must be a scalar or a 1-D array, got " +
                                    std::to_string(val.ndim()) + " dimensions");
            } else if (val.size() != n) {
              throw py::value_error("got " + std::to_string(n) + " indices but " +
                                    std::to_string(val.size()) + " values");
            }
            check_values<T, Op>(val.data(), val.size());
            if (n == 0) return;
            const int64_t* pi = idx.data();
            const T* pv = val.data();
            py::gil_scoped_release nogil;
            std::vector<int64_t> scratch(static_cast<size_t>(n));
            std::lock_guard<std::mutex> lock(self.mutex());
            self.update(pi, pv, n, broadcast, scratch.data());
          },
          py::arg("indices"), py::arg("values"),
          "Sets values[indices[i]] = values[i] (a scalar is broadcast); the last write wins.")
      .def(
          "at",
          [](const Tree& self, const py::object& indices) {
            IndexArray idx = check_indices(indices, self.capacity());
            const py::ssize_t n = idx.size();
            py::array_t<T> out(n);
            const int64_t* pi = idx.data();
            T* po = out.mutable_data();
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lock(self.mutex());
              self.at(pi, po, n);
            }
            return out;
          },
          py::arg("indices"), "The values stored at the given indices.")
      .def(
          "total",
          [](const Tree& self) {
            std::lock_guard<std::mutex> lock(self.mutex());
            return static_cast<double>(self.total());
          },
          "The reduction over all values.")
      .def(
          "query",
          [](const Tree& self, int64_t start, int64_t end) {
            const int64_t cap = self.capacity();
            if (start < 0 || start > cap || end < 0 || end > cap) {
              throw py::index_error("query range [" + std::to_string(start) + ", " +
                                    std::to_string(end) + ") is out of range for a tree of " +
                                    "capacity " + std::to_string(cap));
            }
            if (start > end) {
              throw py::value_error("query start " + std::to_string(start) +
                                    " is greater than end " + std::to_string(end));
            }
            std::lock_guard<std::mutex> lock(self.mutex());
            return self.query(start, end);
          },
          py::arg("start"), py::arg("end"), "The reduction over values[start:end].")
      .def("get_values",
           [](const Tree& self) {
             py::array_t<T> out(self.capacity());
             T* po = out.mutable_data();
             py::gil_scoped_release nogil;
             std::lock_guard<std::mutex> lock(self.mutex());
             self.get_values(po);
             return out;
           })
      .def(
          "set_values",
          [](Tree& self, const py::object& values) {
            ValueArray val = as_values<T>(values, "values");
            if (val.ndim() != 1 || val.size() != self.capacity()) {
              throw py::value_error("set_values expects a 1-D array of " +
                                    std::to_string(self.capacity()) + " values");
            }
            check_values<T, Op>(val.data(), val.size());
            const T* pv = val.data();
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(self.mutex());
            self.set_values(pv);
          },
          py::arg("values"), "Replaces all values (a 1-D array of length capacity).")
      .def(py::pickle(
          [](const Tree& self) {
            py::array_t<T> values(self.capacity());
            std::lock_guard<std::mutex> lock(self.mutex());
            self.get_values(values.mutable_data());
            return py::make_tuple(self.capacity(), values);
          },
          [](const py::tuple& state) {
            if (state.size() != 2) throw py::value_error("invalid segment tree state");
            const auto capacity = state[0].cast<int64_t>();
            if (capacity <= 0 || capacity > kMaxCapacity) {
              throw py::value_error("invalid segment tree state");
            }
            ValueArray val = as_values<T>(state[1], "values");
            if (val.ndim() != 1 || val.size() != capacity) {
              throw py::value_error("invalid segment tree state");
            }
            check_values<T, Op>(val.data(), val.size());
            auto tree = new Tree(capacity);
            tree->set_values(val.data());
            return tree;
          }));

  if constexpr (std::is_same_v<Op, SumOp>) {
    cls.def(
        "scan_lower_bound",
        [](const Tree& self, const py::object& prefix_sums) {
          py::array arr = as_array(prefix_sums, "prefix_sums");
          if (arr.ndim() != 1) {
            throw py::value_error("prefix_sums must be a 1-D array, got " +
                                  std::to_string(arr.ndim()) + " dimensions");
          }
          const char kind = arr.dtype().kind();
          if (arr.size() > 0 && kind != 'f' && kind != 'i' && kind != 'u') {
            throw py::type_error("prefix_sums must be real numbers, got dtype " + dtype_str(arr));
          }
          DoubleArray v(arr);
          const py::ssize_t n = v.size();
          const double* pv = v.data();
          for (py::ssize_t i = 0; i < n; ++i) {
            if (std::isnan(pv[i])) throw py::value_error("prefix_sums must not contain NaN");
          }
          py::array_t<int64_t> out(n);
          int64_t* po = out.mutable_data();
          enum { kOk, kEmpty, kOverflow } status = kOk;
          {
            // The total is checked under the lock, so a concurrent update cannot change it
            // between the check and the descent.
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(self.mutex());
            const T total = self.total();
            if (!(total > T(0))) {
              status = kEmpty;
            } else if (std::isinf(total)) {
              status = kOverflow;
            } else {
              self.scan_lower_bound(pv, po, n);
            }
          }
          if (status == kEmpty) {
            throw py::value_error("scan_lower_bound needs a positive total, but every value is 0");
          }
          if (status == kOverflow) {
            throw py::value_error(
                "scan_lower_bound needs a finite total, but the sum of the values overflows the "
                "tree's dtype (use a float64 tree or smaller values)");
          }
          return out;
        },
        py::arg("prefix_sums"),
        "For each v, the smallest index i such that sum(values[:i + 1]) > v.");
  }
}

}  // namespace

void init_segment_tree(py::module_& m) {
  bind_tree<double, SumOp>(m, "SumSegmentTreeFp64", "Sum segment tree over float64 values.");
  bind_tree<float, SumOp>(m, "SumSegmentTreeFp32", "Sum segment tree over float32 values.");
  bind_tree<double, MinOp>(m, "MinSegmentTreeFp64", "Min segment tree over float64 values.");
  bind_tree<float, MinOp>(m, "MinSegmentTreeFp32", "Min segment tree over float32 values.");
}
