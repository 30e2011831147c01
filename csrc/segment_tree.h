// Sum and min segment trees over float64 / float32 values, for prioritized replay.
//
// Plain C++ (this header needs neither torch nor Python); the bindings in segment_tree.cpp work
// on numpy buffers only. The tree is a complete binary tree stored in one array: node 1 is the
// root, node k has children 2k and 2k+1, and the leaves live at [size, 2 * size) where size is
// the smallest power of two >= capacity. Leaves past the capacity hold the identity of the
// reduction (0 for sum, +inf for min), so they never change a result and scan_lower_bound never
// lands on them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

namespace torchrl {

struct SumOp {
  template <typename T>
  static constexpr T identity() {
    return T(0);
  }
  template <typename T>
  static T combine(T a, T b) {
    return a + b;
  }
  // Queries accumulate in double: a float32 tree still answers range sums to double precision.
  static double combine_acc(double a, double b) { return a + b; }
};

struct MinOp {
  template <typename T>
  static constexpr T identity() {
    return std::numeric_limits<T>::infinity();
  }
  template <typename T>
  static T combine(T a, T b) {
    return b < a ? b : a;
  }
  static double combine_acc(double a, double b) { return b < a ? b : a; }
};

// The data structure itself, free of Python. Callers validate arguments first (the bindings do);
// every method here assumes valid indices and values. A mutex serialises all accesses because the
// bindings release the GIL while they run.
template <typename T, typename Op>
class SegmentTree {
 public:
  explicit SegmentTree(int64_t capacity) : capacity_(capacity), size_(1) {
    while (size_ < capacity_) size_ <<= 1;
    tree_.assign(static_cast<size_t>(2 * size_), Op::template identity<T>());
  }

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }
  int64_t depth() const {
    int64_t d = 0;
    while ((int64_t(1) << d) < size_) ++d;
    return d;
  }
  std::mutex& mutex() const { return mutex_; }

  // Writes the leaves in order (a repeated index keeps its last value), then refreshes their
  // ancestors one level at a time: every child is final before its parent is recomputed, and the
  // n independent loads of a level overlap in memory instead of one walk-up after another.
  // O(n * log(capacity)); `scratch` must hold n elements.
  void update(const int64_t* indices, const T* values, int64_t n, bool broadcast,
              int64_t* scratch) {
    for (int64_t i = 0; i < n; ++i) {
      scratch[i] = indices[i] + size_;
      tree_[scratch[i]] = broadcast ? values[0] : values[i];
    }
    const int64_t levels = depth();
    for (int64_t level = 0; level < levels; ++level) {
      int64_t previous = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t node = scratch[i] >>= 1;
        if (node == previous) continue;  // sorted or repeated indices share ancestors
        previous = node;
        tree_[node] = Op::combine(tree_[2 * node], tree_[2 * node + 1]);
      }
    }
  }

  void at(const int64_t* indices, T* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = tree_[indices[i] + size_];
  }

  T total() const { return tree_[1]; }

  // Reduction over the leaves [start, end). The left and right partial results are kept apart so
  // the order of the additions is fixed (the NumPy fallback reproduces it bit for bit).
  double query(int64_t start, int64_t end) const {
    if (start == 0 && end == capacity_) return static_cast<double>(tree_[1]);
    double left = static_cast<double>(Op::template identity<T>());
    double right = left;
    int64_t lo = start + size_;
    int64_t hi = end + size_;
    while (lo < hi) {
      if (lo & 1) left = Op::combine_acc(left, static_cast<double>(tree_[lo++]));
      if (hi & 1) right = Op::combine_acc(static_cast<double>(tree_[--hi]), right);
      lo >>= 1;
      hi >>= 1;
    }
    return Op::combine_acc(left, right);
  }

  // For each v, the smallest index i with sum(values[:i + 1]) > v. The descent never enters a
  // subtree whose sum is zero, so a zero-valued leaf is never returned while the total is
  // positive; when rounding makes v reach the sum of the subtree it is in (or v >= total), the
  // descent ends on the last positive leaf of that subtree. Negative v gives the first positive
  // leaf. Requires a finite total() > 0 and no NaN in prefix_sums.
  void scan_lower_bound(const double* prefix_sums, int64_t* out, int64_t n) const {
    // Fast path: the plain descent "go right iff v >= left sum", for groups of kLanes queries
    // that move down together, level by level, without branches, so that their cache misses
    // overlap. It takes the same path as the careful rule of careful_descent() unless it steps
    // into a subtree of sum 0, and then it ends on a leaf of value 0: those (rare) queries are
    // redone with the careful rule. Negative v start at 0, which leads to the same leaf.
    constexpr int64_t kLanes = 32;
    const int64_t levels = depth();
    for (int64_t base = 0; base < n; base += kLanes) {
      const int64_t lanes = std::min(kLanes, n - base);
      double v[kLanes];
      int64_t node[kLanes];
      for (int64_t j = 0; j < lanes; ++j) {
        v[j] = std::max(prefix_sums[base + j], 0.0);
        node[j] = 1;
      }
      for (int64_t level = 0; level < levels; ++level) {
        for (int64_t j = 0; j < lanes; ++j) {
          const int64_t left = 2 * node[j];
          const double lv = static_cast<double>(tree_[left]);
          const uint64_t go_right = v[j] >= lv;
          // v -= go_right ? lv : 0 through a bit mask: compilers make the ternary a branch,
          // mispredicted half of the time.
          uint64_t bits;
          std::memcpy(&bits, &lv, sizeof bits);
          bits &= uint64_t(0) - go_right;
          double step;
          std::memcpy(&step, &bits, sizeof step);
          v[j] -= step;
          node[j] = left + static_cast<int64_t>(go_right);
        }
      }
      for (int64_t j = 0; j < lanes; ++j) {
        if (!(tree_[node[j]] > T(0))) node[j] = careful_descent(prefix_sums[base + j]);
        out[base + j] = node[j] - size_;
      }
    }
  }

  // The leaf (node number) for v: go left iff the left subtree is non-empty and v falls in it,
  // or the right subtree is empty, so a subtree of sum 0 is never entered.
  int64_t careful_descent(double v) const {
    int64_t node = 1;
    while (node < size_) {
      const int64_t left = 2 * node;
      const T lv = tree_[left];
      if (lv > T(0) && (v < lv || !(tree_[left + 1] > T(0)))) {
        node = left;
      } else {
        v -= lv;
        node = left + 1;
      }
    }
    return node;
  }

  void get_values(T* out) const { std::copy_n(tree_.begin() + size_, capacity_, out); }

  // Replaces all leaves and rebuilds every parent bottom-up in O(capacity).
  void set_values(const T* values) {
    std::copy_n(values, capacity_, tree_.begin() + size_);
    for (int64_t node = size_ - 1; node >= 1; --node) {
      tree_[node] = Op::combine(tree_[2 * node], tree_[2 * node + 1]);
    }
  }

 private:
  int64_t capacity_;
  int64_t size_;
  std::vector<T> tree_;
  mutable std::mutex mutex_;
};

}  // namespace torchrl

namespace pybind11 {
class module_;
}  // namespace pybind11

// Registers the four tree classes on torchrl._C (defined in segment_tree.cpp).
void init_segment_tree(pybind11::module_& m);
