// Backward value recursions for torchrl.objectives.value.functional.
//
// Every estimate here is one linear recursion run backwards in time,
//     y_t = x_t + c_t * y_{t+1},   y_T = 0,
// where x_t and c_t are formed on the fly from rewards, values, flags and (per-step or scalar)
// gamma / lambda, so each input is streamed from memory once and each output written once.
//
// Data layout is [N, T, F] (C-contiguous): lane (n, f) walks time with stride F. The recursion is a
// serial dependency chain per lane, so one lane at a time is bound by multiply-add latency, not by
// memory; see run_group for how lanes are grouped so that both memory and arithmetic keep up.
#include "value.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

enum class Mode : int {
  // x = r + g (1 - term) v' - v,       c = g l (1 - stop)    -> advantage; target = y + v
  kGae = 0,
  // x = r + g (1 - term) v' - c v',    c = g l (1 - stop)    -> TD(lambda) return
  kTdLambda = 1,
  // x = r,                             c = g (1 - stop)      -> discounted sum (reward-to-go)
  kDiscountedSum = 2,
};

template <typename S>
struct Buffers {
  const S* reward;
  const S* state_value;
  const S* next_state_value;
  const uint8_t* done;
  const uint8_t* terminated;  // aliases done when the caller gave no terminated flags
  const S* gamma;             // per-step values, or nullptr to use gamma_s
  const S* lmbda;             // per-step values, or nullptr to use lmbda_s
  S gamma_s;
  S lmbda_s;
  S* out;
  S* target;  // kGae only: out + state_value
  int64_t n;
  int64_t t;
  int64_t f;
};

// Lanes per group, and the longest time tile. A group's tile of x and c (y is written over x)
// sits in two scratch arrays of kLanes x stride elements that stay in L2.
constexpr int kLanes = 8;
constexpr int64_t kMaxTile = 2048;

// Forms x and c for one lane over time steps [t0, t0 + len).
template <typename S, Mode kMode, bool kGammaArr, bool kLambdaArr>
inline void form_terms(const Buffers<S>& b, int64_t base, int64_t t0, int64_t len, S* x, S* c) {
  const int64_t F = b.f;
  for (int64_t j = 0; j < len; ++j) {
    const int64_t i = base + (t0 + j) * F;
    const S g = kGammaArr ? b.gamma[i] : b.gamma_s;
    const bool term = b.terminated[i] != 0;
    const bool stop = term | (b.done[i] != 0);
    S cj;
    if constexpr (kMode == Mode::kDiscountedSum) {
      cj = stop ? S(0) : g;
    } else {
      const S l = kLambdaArr ? b.lmbda[i] : b.lmbda_s;
      cj = stop ? S(0) : g * l;
    }
    S xj = b.reward[i];
    if constexpr (kMode != Mode::kDiscountedSum) {
      const S nv = b.next_state_value[i];
      xj += term ? S(0) : g * nv;
      if constexpr (kMode == Mode::kGae) {
        xj -= b.state_value[i];
      } else {
        xj -= cj * nv;
      }
    }
    x[j] = xj;
    c[j] = cj;
  }
  if (t0 + len == b.t) {
    // The last step of a row always ends the recursion: it bootstraps (unless terminated) and
    // nothing beyond the row is known.
    const int64_t j = len - 1;
    if constexpr (kMode == Mode::kTdLambda) {
      x[j] += c[j] * b.next_state_value[base + (t0 + j) * F];
    }
    c[j] = S(0);
  }
}

// Runs lanes [lane0, lane0 + lanes) (lanes <= kLanes) through the whole time axis, backwards in
// tiles. Each tile is done in three sweeps: per lane, form x and c (contiguous reads that the
// prefetchers stream; vectorized); across the kLanes lanes at once, run the recursion over the
// scratch (kLanes independent chains hide the multiply-add latency); per lane, write the outputs.
// Fusing the sweeps was measured slower: either one latency-bound chain, or kLanes x 7 strided
// streams that defeat the prefetchers.
template <typename S, Mode kMode, bool kGammaArr, bool kLambdaArr>
void run_group(const Buffers<S>& b, int64_t lane0, int lanes, int64_t stride, S* xs, S* cs) {
  const int64_t T = b.t;
  const int64_t F = b.f;
  const int64_t tile = std::min<int64_t>(T, kMaxTile);
  int64_t base[kLanes];
  S acc[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    const int64_t lane = lane0 + (k < lanes ? k : 0);
    base[k] = (lane / F) * T * F + lane % F;
    acc[k] = S(0);
  }
  for (int64_t end = T; end > 0; end -= tile) {
    const int64_t t0 = end > tile ? end - tile : 0;
    const int64_t len = end - t0;
    for (int k = 0; k < lanes; ++k) {
      form_terms<S, kMode, kGammaArr, kLambdaArr>(b, base[k], t0, len, xs + k * stride,
                                                  cs + k * stride);
    }
    // Unused lanes of a partial group run on zeros and are never written out.
    for (int64_t j = len - 1; j >= 0; --j) {
      for (int k = 0; k < kLanes; ++k) {
        acc[k] = xs[k * stride + j] + cs[k * stride + j] * acc[k];
        xs[k * stride + j] = acc[k];
      }
    }
    for (int k = 0; k < lanes; ++k) {
      const S* y = xs + k * stride;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t i = base[k] + (t0 + j) * F;
        b.out[i] = y[j];
        if constexpr (kMode == Mode::kGae) {
          b.target[i] = y[j] + b.state_value[i];
        }
      }
    }
  }
}

template <typename S, Mode kMode, bool kGammaArr, bool kLambdaArr>
void run_all(const Buffers<S>& b) {
  const int64_t lanes = b.n * b.f;
  if (lanes == 0 || b.t == 0) return;
  // Scratch rows whose byte stride is a multiple of 2 KiB map onto the same L1 sets and thrash
  // (measured 5x slower); pad them off that grid.
  int64_t stride = (std::min<int64_t>(b.t, kMaxTile) + 15) / 16 * 16;
  if ((stride * static_cast<int64_t>(sizeof(S))) % 2048 == 0) stride += 16;
  std::vector<S> xs(kLanes * stride, S(0));
  std::vector<S> cs(kLanes * stride, S(0));
  for (int64_t lane = 0; lane < lanes; lane += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, lanes - lane));
    if (n < kLanes) {
      std::fill(xs.begin(), xs.end(), S(0));
      std::fill(cs.begin(), cs.end(), S(0));
    }
    run_group<S, kMode, kGammaArr, kLambdaArr>(b, lane, n, stride, xs.data(), cs.data());
  }
}

template <typename S, Mode kMode>
void dispatch_flags(const Buffers<S>& b) {
  const bool g = b.gamma != nullptr;
  const bool l = b.lmbda != nullptr;
  if (g && l) {
    run_all<S, kMode, true, true>(b);
  } else if (g) {
    run_all<S, kMode, true, false>(b);
  } else if (l) {
    run_all<S, kMode, false, true>(b);
  } else {
    run_all<S, kMode, false, false>(b);
  }
}

template <typename S>
void dispatch_mode(Mode mode, const Buffers<S>& b) {
  switch (mode) {
    case Mode::kGae:
      dispatch_flags<S, Mode::kGae>(b);
      break;
    case Mode::kTdLambda:
      dispatch_flags<S, Mode::kTdLambda>(b);
      break;
    case Mode::kDiscountedSum:
      dispatch_flags<S, Mode::kDiscountedSum>(b);
      break;
  }
}

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (d) s += ", ";
    s += std::to_string(a.shape(d));
  }
  return s + ")";
}

// Checks one buffer against the reward's [N, T, F] shape and the expected element type; raises
// ValueError (std::invalid_argument) with the argument's name otherwise.
void check_buffer(const py::array& a, const char* name, const py::array& ref, char kind,
                  py::ssize_t itemsize, bool writable) {
  if (a.ndim() != 3) {
    throw std::invalid_argument(std::string("value_recurrence: `") + name +
                                "` must be a 3-d [N, T, F] array, got shape " + shape_str(a));
  }
  for (int d = 0; d < 3; ++d) {
    if (a.shape(d) != ref.shape(d)) {
      throw std::invalid_argument(std::string("value_recurrence: `") + name + "` has shape " +
                                  shape_str(a) + " but `reward` has shape " + shape_str(ref));
    }
  }
  if (!(a.flags() & py::array::c_style)) {
    throw std::invalid_argument(std::string("value_recurrence: `") + name +
                                "` must be C-contiguous");
  }
  if (a.dtype().kind() != kind || a.itemsize() != itemsize) {
    throw std::invalid_argument(std::string("value_recurrence: `") + name + "` has dtype " +
                                std::string(py::str(a.dtype())) + ", expected kind '" +
                                std::string(1, kind) + "' with itemsize " +
                                std::to_string(itemsize));
  }
  if (writable && !a.writeable()) {
    throw std::invalid_argument(std::string("value_recurrence: `") + name +
                                "` must be writeable");
  }
}

template <typename S>
void run_typed(Mode mode, const py::array& reward, const py::object& state_value,
               const py::object& next_state_value, const py::array& done,
               const py::object& terminated, const py::object& gamma, const py::object& lmbda,
               py::array& out, const py::object& target) {
  const py::ssize_t isz = sizeof(S);
  Buffers<S> b{};
  check_buffer(reward, "reward", reward, 'f', isz, false);
  b.reward = static_cast<const S*>(reward.data());
  check_buffer(done, "done", reward, 'b', 1, false);
  b.done = static_cast<const uint8_t*>(done.data());
  b.terminated = b.done;
  if (!terminated.is_none()) {
    auto a = terminated.cast<py::array>();
    check_buffer(a, "terminated", reward, 'b', 1, false);
    b.terminated = static_cast<const uint8_t*>(a.data());
  }
  if (mode == Mode::kGae) {
    if (state_value.is_none() || target.is_none()) {
      throw std::invalid_argument("value_recurrence: GAE needs `state_value` and `target`");
    }
    auto v = state_value.cast<py::array>();
    check_buffer(v, "state_value", reward, 'f', isz, false);
    b.state_value = static_cast<const S*>(v.data());
    auto tg = target.cast<py::array>();
    check_buffer(tg, "target", reward, 'f', isz, true);
    b.target = static_cast<S*>(tg.mutable_data());
  }
  if (mode != Mode::kDiscountedSum) {
    if (next_state_value.is_none()) {
      throw std::invalid_argument("value_recurrence: this mode needs `next_state_value`");
    }
    auto nv = next_state_value.cast<py::array>();
    check_buffer(nv, "next_state_value", reward, 'f', isz, false);
    b.next_state_value = static_cast<const S*>(nv.data());
  }
  if (py::isinstance<py::array>(gamma)) {
    auto a = gamma.cast<py::array>();
    check_buffer(a, "gamma", reward, 'f', isz, false);
    b.gamma = static_cast<const S*>(a.data());
  } else {
    b.gamma_s = static_cast<S>(gamma.cast<double>());
  }
  if (py::isinstance<py::array>(lmbda)) {
    auto a = lmbda.cast<py::array>();
    check_buffer(a, "lmbda", reward, 'f', isz, false);
    b.lmbda = static_cast<const S*>(a.data());
  } else {
    b.lmbda_s = static_cast<S>(lmbda.cast<double>());
  }
  check_buffer(out, "out", reward, 'f', isz, true);
  b.out = static_cast<S*>(out.mutable_data());
  b.n = reward.shape(0);
  b.t = reward.shape(1);
  b.f = reward.shape(2);
  // The arrays stay referenced by the caller's frame, so their buffers outlive this call.
  py::gil_scoped_release release;
  dispatch_mode<S>(mode, b);
}

void value_recurrence(int mode, const py::array& reward, const py::object& state_value,
                      const py::object& next_state_value, const py::array& done,
                      const py::object& terminated, const py::object& gamma,
                      const py::object& lmbda, py::array& out, const py::object& target) {
  if (mode < 0 || mode > 2) {
    throw std::invalid_argument("value_recurrence: mode must be 0 (GAE), 1 (TD(lambda)) or 2 "
                                "(discounted sum), got " +
                                std::to_string(mode));
  }
  const Mode m = static_cast<Mode>(mode);
  if (reward.dtype().kind() == 'f' && reward.itemsize() == 4) {
    run_typed<float>(m, reward, state_value, next_state_value, done, terminated, gamma, lmbda,
                     out, target);
  } else if (reward.dtype().kind() == 'f' && reward.itemsize() == 8) {
    run_typed<double>(m, reward, state_value, next_state_value, done, terminated, gamma, lmbda,
                      out, target);
  } else {
    throw std::invalid_argument("value_recurrence: `reward` must be float32 or float64, got " +
                                std::string(py::str(reward.dtype())));
  }
}

}  // namespace

void init_value(pybind11::module_& m) {
  m.def("value_recurrence", &value_recurrence, py::arg("mode"), py::arg("reward"),
        py::arg("state_value"), py::arg("next_state_value"), py::arg("done"),
        py::arg("terminated"), py::arg("gamma"), py::arg("lmbda"), py::arg("out"),
        py::arg("target"),
        R"doc(Runs y_t = x_t + c_t * y_{t+1} backwards over [N, T, F] float buffers, in place.

mode 0 (GAE) writes the advantage to `out` and advantage + state_value to `target`; mode 1 writes
the TD(lambda) return; mode 2 writes the discounted sum of `reward`. `done`/`terminated` are bool
arrays; `gamma`/`lmbda` are floats or arrays shaped like `reward`. The GIL is released.)doc");
}
