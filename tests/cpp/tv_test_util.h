// SPDX-License-Identifier: Apache-2.0
// Test helpers for the tv family: host tensors with arbitrary layouts, and a table of ops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fieldfuse/core.h"
#include "fieldfuse/tv.h"
#include "naive_tv.h"

namespace fftest {

using fieldfuse::DType;
using fieldfuse::TensorRef;
using naive::Shape;

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}

/// Calls fn(T{}) with T the scalar type of `dtype` (float32 or float64).
template <class F>
void dispatch(DType dtype, F&& fn) {
  if (dtype == DType::Float64)
    fn(double{});
  else
    fn(float{});
}

/// Relative tolerance for a value, against the sum of the absolute values of its terms: a few
/// hundred ulps, so a fixed-order float64 sum of ~10^5 terms or a float32 kernel rounding each
/// term passes, and a wrong or missing term does not.
inline double rtol_for(DType dtype) { return dtype == DType::Float64 ? 1e-12 : 1e-5; }

/// Where a tensor lives in memory: dims listed outermost-first in memory (empty: natural order),
/// and `pad` unused elements after each dim's extent, so strides exceed the contiguous ones.
struct Layout {
  std::vector<int> order;
  int64_t pad = 0;
};

/// A host tensor owning its storage, with a (possibly strided) view onto it.
template <typename T>
struct HostTensor {
  std::vector<T> storage;
  TensorRef ref;  ///< points into `storage`: movable (the buffer moves along), not copyable

  HostTensor() = default;
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  /// Storage offset of every logical element, in row-major logical order.
  std::vector<int64_t> offsets() const {
    std::vector<int64_t> out(static_cast<size_t>(ref.numel()));
    std::vector<int64_t> idx(static_cast<size_t>(ref.ndim), 0);
    for (size_t e = 0; e < out.size(); ++e) {
      int64_t off = 0;
      for (int d = 0; d < ref.ndim; ++d) off += idx[d] * ref.strides[d];
      out[e] = off;
      for (int d = ref.ndim - 1; d >= 0; --d) {
        if (++idx[d] < ref.sizes[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  }
  std::vector<double> logical() const {
    std::vector<double> out;
    for (int64_t off : offsets()) out.push_back(static_cast<double>(storage[off]));
    return out;
  }
  void set_logical(const std::vector<double>& values) {
    const std::vector<int64_t> offs = offsets();
    for (size_t e = 0; e < offs.size(); ++e) storage[offs[e]] = static_cast<T>(values[e]);
  }
  /// Whether every storage element outside the view still equals `fill` bit for bit.
  bool padding_untouched(T fill) const {
    std::vector<bool> inside(storage.size(), false);
    for (int64_t off : offsets()) inside[off] = true;
    for (size_t i = 0; i < storage.size(); ++i)
      if (!inside[i] && std::memcmp(&storage[i], &fill, sizeof(T)) != 0) return false;
    return true;
  }
};

/// An uninitialised-looking tensor: every storage element is `fill` (NaN by default).
template <typename T>
HostTensor<T> make_tensor(const Shape& shape, const Layout& layout = {},
                          T fill = std::numeric_limits<T>::quiet_NaN()) {
  HostTensor<T> t;
  const int nd = static_cast<int>(shape.size());
  std::vector<int> order = layout.order;
  if (order.empty())
    for (int d = 0; d < nd; ++d) order.push_back(d);
  t.ref.dtype = dtype_of<T>();
  t.ref.ndim = nd;
  int64_t extent = 1;
  for (int i = nd - 1; i >= 0; --i) {
    const int d = order[i];
    t.ref.sizes[d] = shape[d];
    t.ref.strides[d] = extent;
    extent *= shape[d] + layout.pad;
  }
  t.storage.assign(static_cast<size_t>(std::max<int64_t>(extent, 1)), fill);
  t.ref.data = t.storage.data();
  return t;
}

/// A tensor of `shape` holding `values` (row-major logical order); NaN everywhere else.
template <typename T>
HostTensor<T> make_tensor(const Shape& shape, const std::vector<double>& values,
                          const Layout& layout = {}) {
  HostTensor<T> t = make_tensor<T>(shape, layout);
  t.set_logical(values);
  return t;
}

/// Uniform values in [lo, hi) from a fixed seed, rounded to T so the oracle sees what the op sees.
template <typename T>
std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(static_cast<T>(dist(rng)));
  return v;
}

/// One tv functional behind a uniform interface, with its oracle.
struct TvOp {
  std::string id;                 ///< short tag for test names
  std::string api;                ///< op name every message must contain
  std::string in_name;            ///< "vol" or "array"
  int num_outputs = 1;            ///< 1, or 3 for tv_l1_3d
  int num_axes = 3;               ///< trailing axes differenced: 3, or num_weights
  bool size1_axes_ok = true;      ///< false where a size-1 axis is an error (weighted L1)
  bool piecewise_linear = false;  ///< finite differences must not straddle a kink
  double fd_step = 0.0;           ///< central-difference step (an upper bound if piecewise_linear)
  double fd_rtol = 0.0;           ///< truncation error of that step, relative to the gradient scale
  std::function<size_t(const TensorRef&)> workspace_size;
  std::function<void(const TensorRef&, const TensorRef&, void*, size_t)> forward;
  std::function<void(const TensorRef&, const TensorRef&, const TensorRef&)> backward;
  std::function<std::vector<naive::Sum>(const std::vector<double>&, const Shape&)> naive_forward;
  std::function<naive::Grad(const std::vector<double>&, const Shape&, const std::vector<double>&)>
      naive_backward;

  std::string grad_name() const { return "grad_" + in_name; }
  /// Shape of `out` and `grad_out`: 0-d, or [3].
  Shape out_shape() const { return num_outputs == 1 ? Shape{} : Shape{num_outputs}; }
};

/// Wraps a scalar-valued oracle as the one-output form the table holds.
template <class F>
std::function<std::vector<naive::Sum>(const std::vector<double>&, const Shape&)> one_output(F f) {
  return [f](const std::vector<double>& v, const Shape& s) {
    return std::vector<naive::Sum>{f(v, s)};
  };
}

inline TvOp make_sq_op() {
  TvOp op;
  op.id = "sq";
  op.api = "tv_sq_3d";
  op.in_name = "vol";
  op.fd_step = 0.25;  // S is quadratic: central differences are exact at any step
  op.fd_rtol = 1e-12;
  op.workspace_size = fieldfuse::tv_sq_3d_workspace_size;
  op.forward = [](const TensorRef& v, const TensorRef& out, void* ws, size_t bytes) {
    fieldfuse::tv_sq_3d_forward(v, out, ws, bytes);
  };
  op.backward = [](const TensorRef& v, const TensorRef& go, const TensorRef& gv) {
    fieldfuse::tv_sq_3d_backward(v, go, gv);
  };
  op.naive_forward = one_output(naive::sq_forward);
  op.naive_backward = [](const std::vector<double>& v, const Shape& s,
                         const std::vector<double>& g) { return naive::sq_backward(v, s, g[0]); };
  return op;
}

inline TvOp make_iso_op(double eps, const std::string& id) {
  TvOp op;
  op.id = id;
  op.api = "tv_iso_3d";
  op.in_name = "vol";
  // Truncation h^2 f'''/6 relative to f' stays below 1e-5 while every corner has s >= ~3e-3,
  // which random uniform data on [-1, 1) meets with a wide margin.
  op.fd_step = 1e-5;
  op.fd_rtol = 1e-5;
  op.workspace_size = fieldfuse::tv_iso_3d_workspace_size;
  op.forward = [eps](const TensorRef& v, const TensorRef& out, void* ws, size_t bytes) {
    fieldfuse::tv_iso_3d_forward(v, eps, out, ws, bytes);
  };
  op.backward = [eps](const TensorRef& v, const TensorRef& go, const TensorRef& gv) {
    fieldfuse::tv_iso_3d_backward(v, eps, go, gv);
  };
  op.naive_forward = one_output([eps](const std::vector<double>& v, const Shape& s) {
    return naive::iso_forward(v, s, eps);
  });
  op.naive_backward = [eps](const std::vector<double>& v, const Shape& s,
                            const std::vector<double>& g) {
    return naive::iso_backward(v, s, eps, g[0]);
  };
  return op;
}

inline TvOp make_l1_op() {
  TvOp op;
  op.id = "l1";
  op.api = "tv_l1_3d";
  op.in_name = "vol";
  op.num_outputs = 3;
  op.piecewise_linear = true;  // exact between kinks; the step stays short of the nearest one
  op.fd_step = 1e-2;
  op.fd_rtol = 1e-12;
  op.workspace_size = fieldfuse::tv_l1_3d_workspace_size;
  op.forward = [](const TensorRef& v, const TensorRef& out, void* ws, size_t bytes) {
    fieldfuse::tv_l1_3d_forward(v, out, ws, bytes);
  };
  op.backward = [](const TensorRef& v, const TensorRef& go, const TensorRef& gv) {
    fieldfuse::tv_l1_3d_backward(v, go, gv);
  };
  op.naive_forward = naive::l1_forward;
  op.naive_backward = naive::l1_backward;
  return op;
}

inline TvOp make_weighted_op(const std::vector<double>& w, const std::string& id) {
  TvOp op;
  op.id = id;
  op.api = "tv_weighted_l1";
  op.in_name = "array";
  op.num_axes = static_cast<int>(w.size());
  op.size1_axes_ok = false;
  op.piecewise_linear = true;
  op.fd_step = 1e-2;
  op.fd_rtol = 1e-12;
  const int k = op.num_axes;
  op.workspace_size = [k](const TensorRef& a) {
    return fieldfuse::tv_weighted_l1_workspace_size(a, k);
  };
  op.forward = [w, k](const TensorRef& a, const TensorRef& out, void* ws, size_t bytes) {
    fieldfuse::tv_weighted_l1_forward(a, w.data(), k, out, ws, bytes);
  };
  op.backward = [w, k](const TensorRef& a, const TensorRef& go, const TensorRef& ga) {
    fieldfuse::tv_weighted_l1_backward(a, w.data(), k, go, ga);
  };
  op.naive_forward = one_output([w](const std::vector<double>& v, const Shape& s) {
    return naive::weighted_l1_forward(v, s, w);
  });
  op.naive_backward = [w](const std::vector<double>& v, const Shape& s,
                          const std::vector<double>& g) {
    return naive::weighted_l1_backward(v, s, w, g[0]);
  };
  return op;
}

/// Every op of the family, with the options the generic tests run it at: iso at the spec's
/// forward eps (1e-8) and gradient eps (1e-6); weighted L1 with distinct per-axis weights, so a
/// mixed-up axis shows.
inline const std::vector<TvOp>& all_ops() {
  static const std::vector<TvOp> ops = {
      make_sq_op(),
      make_iso_op(1e-8, "iso_eps1e8"),
      make_iso_op(1e-6, "iso_eps1e6"),
      make_l1_op(),
      make_weighted_op({0.7, 0.2, 0.45}, "wl1_3w"),
      make_weighted_op({0.3, 1.1}, "wl1_2w"),
  };
  return ops;
}

inline const TvOp& op_by_id(const std::string& id) {
  for (const TvOp& op : all_ops())
    if (op.id == id) return op;
  throw std::invalid_argument("no tv op " + id);
}

/// An upstream gradient for `op` that is neither 1 nor equal across outputs.
inline std::vector<double> upstream(const TvOp& op) {
  return op.num_outputs == 1 ? std::vector<double>{2.5} : std::vector<double>{2.5, -0.5, 1.25};
}

/// Runs op.forward on `in` into an output pre-filled with `fill`, with a workspace of the
/// reported size.
template <typename T>
std::vector<double> run_forward(const TvOp& op, const TensorRef& in,
                                T fill = std::numeric_limits<T>::quiet_NaN()) {
  HostTensor<T> out = make_tensor<T>(op.out_shape(), {}, fill);
  std::vector<unsigned char> ws(op.workspace_size(in));
  op.forward(in, out.ref, ws.data(), ws.size());
  return out.logical();
}

/// Runs op.backward with upstream gradient `g` into `grad_in` (its storage is left as is).
template <typename T>
void run_backward(const TvOp& op, const TensorRef& in, const std::vector<double>& g,
                  const TensorRef& grad_in, const Layout& grad_out_layout = {}) {
  HostTensor<T> grad_out = make_tensor<T>(op.out_shape(), g, grad_out_layout);
  op.backward(in, grad_out.ref, grad_in);
}

/// Expects |got − want| <= rtol·scale elementwise, naming the first few failures.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<double>& scale, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * scale[i];
    if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (tolerance " << tol << ")";
  }
}

/// Whether two value lists are identical bit for bit (NaN payloads included).
inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

/// Expects `fn` to throw fieldfuse::Error of `kind` whose message contains every one of `parts`.
template <class F>
void expect_error(F&& fn, fieldfuse::ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected fieldfuse::Error, nothing thrown";
  } catch (const fieldfuse::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << "message: " << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

}  // namespace fftest
