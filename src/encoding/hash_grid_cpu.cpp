// SPDX-License-Identifier: Apache-2.0
// The hash-grid CPU driver: OpenMP loops over the shared math (hash_grid_math.h).
//
// Note [CPU hash-grid determinism]
// --------------------------------
// Point-owned results (features, x-gradients, the double backward's grad_grad_out) are computed
// by one loop over points, each point summing its levels in order. The params gradient is a
// scatter: many points add into one row. Per-thread copies of the table would cost threads × the
// table (tens of MB each) and a reduction; instead the scatter runs in a second loop whose unit
// is a level: a level's rows are disjoint from every other level's, so one thread owns each
// level and adds its points in point order. The sums therefore have a fixed order whatever the
// thread count (bit-identical across runs and OMP_NUM_THREADS), at the price of walking the
// table twice when both kinds of output are wanted. Parallelism is up to L threads, which covers
// the cores of a CPU that runs these loops.
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "encoding/hash_grid_drivers.h"

namespace fieldfuse::detail::hash_grid {
namespace {

template <class T>
T at(const MatrixView& m, int64_t row, int64_t col) {
  return static_cast<const T*>(m.data)[row * m.stride_row + col * m.stride_col];
}

/// The axes of point b at level `level`; false when a coordinate is NaN.
template <class T, int D>
bool point_axes(const Problem& pb, int64_t b, const LevelInfo& level, Axis<T> (&axes)[D]) {
  bool finite = true;
  for (int i = 0; i < D; ++i) {
    const T xi = at<T>(pb.x, b, i);
    finite = finite && xi == xi;
    axes[i] = make_axis<T>(xi, static_cast<T>(level.scale), pb.smoothstep);
  }
  return finite;
}

/// Work of one point at all levels, for parallel_for's threshold.
int64_t point_work(const Problem& pb) { return int64_t{pb.levels} << pb.dims; }

template <class T, int D>
void forward(const Problem& pb, T* out) {
  const int F = pb.features;
  parallel_for(0, pb.batch, point_work(pb) * F, [&](int64_t b) {
    for (int l = 0; l < pb.levels; ++l) {
      const LevelInfo& level = pb.level[l];
      T* y = out + b * pb.out_cols() + l * F;
      Axis<T> axes[D];
      if (!point_axes<T, D>(pb, b, level, axes)) {
        for (int f = 0; f < F; ++f) y[f] = std::numeric_limits<T>::quiet_NaN();
        continue;
      }
      for (int f = 0; f < F; ++f) y[f] = T(0);
      for (int c = 0; c < (1 << D); ++c) {
        const Corner<T, D> k = corner<Order::kValue, T, D>(axes, c, level);
        const int64_t row = level.offset + k.row;
        for (int f = 0; f < F; ++f) y[f] += k.w * at<T>(pb.params, row, f);
      }
    }
  });
}

/// The params scatter of Note [CPU hash-grid determinism]: `add(b, level, axes, grad_row)` adds
/// point b's contributions at one level into that level's rows of `grad` (zeroed first).
template <class T, int D, class Add>
void scatter_by_level(const Problem& pb, T* grad, const Add& add) {
  std::memset(grad, 0, sizeof(T) * static_cast<std::size_t>(pb.rows * pb.features));
  parallel_for(0, pb.levels, (pb.batch << D) * pb.features, [&](int64_t l) {
    const LevelInfo& level = pb.level[l];
    for (int64_t b = 0; b < pb.batch; ++b) {
      Axis<T> axes[D];
      if (!point_axes<T, D>(pb, b, level, axes)) continue;  // NaN points add nothing
      add(b, static_cast<int>(l), level, axes);
    }
  });
}

template <class T, int D>
void backward(const GradArgs& a) {
  const Problem& pb = a.problem;
  const int F = pb.features;
  if (a.grad_x != nullptr) {
    T* grad_x = static_cast<T*>(a.grad_x);
    parallel_for(0, pb.batch, point_work(pb) * F, [&](int64_t b) {
      T gx[D] = {};
      bool finite = true;
      for (int l = 0; l < pb.levels; ++l) {
        const LevelInfo& level = pb.level[l];
        Axis<T> axes[D];
        finite = point_axes<T, D>(pb, b, level, axes);
        if (!finite) break;
        for (int c = 0; c < (1 << D); ++c) {
          const Corner<T, D> k = corner<Order::kGradient, T, D>(axes, c, level);
          T dot = T(0);  // Σ_f params[row, f] · grad_out[b, l·F + f]
          for (int f = 0; f < F; ++f) {
            dot += at<T>(pb.params, level.offset + k.row, f) * at<T>(a.grad_out, b, l * F + f);
          }
          for (int i = 0; i < D; ++i) gx[i] += k.dw[i] * dot;
        }
      }
      for (int i = 0; i < D; ++i) {
        grad_x[b * D + i] = finite ? gx[i] : std::numeric_limits<T>::quiet_NaN();
      }
    });
  }
  if (a.grad_params != nullptr) {
    T* grad = static_cast<T*>(a.grad_params);
    scatter_by_level<T, D>(pb, grad,
                           [&](int64_t b, int l, const LevelInfo& level, const Axis<T>(&axes)[D]) {
                             for (int c = 0; c < (1 << D); ++c) {
                               const Corner<T, D> k = corner<Order::kValue, T, D>(axes, c, level);
                               T* row = grad + (level.offset + k.row) * F;
                               for (int f = 0; f < F; ++f)
                                 row[f] += k.w * at<T>(a.grad_out, b, l * F + f);
                             }
                           });
  }
}

template <class T, int D>
void double_backward(const GradArgs& a) {
  const Problem& pb = a.problem;
  const int F = pb.features;
  const bool has_v = a.grad_grad_x.data != nullptr;
  const bool has_u = a.grad_grad_params.data != nullptr;
  if (a.grad_grad_out != nullptr || a.grad_x != nullptr) {
    T* ggo = static_cast<T*>(a.grad_grad_out);
    T* grad_x = static_cast<T*>(a.grad_x);
    parallel_for(0, pb.batch, point_work(pb) * F * D, [&](int64_t b) {
      T v[D] = {}, gx[D] = {};
      for (int i = 0; i < D && has_v; ++i) v[i] = at<T>(a.grad_grad_x, b, i);
      bool finite = true;
      for (int l = 0; l < pb.levels; ++l) {
        const LevelInfo& level = pb.level[l];
        T* y = ggo != nullptr ? ggo + b * pb.out_cols() + l * F : nullptr;
        Axis<T> axes[D];
        finite = point_axes<T, D>(pb, b, level, axes) && finite;
        if (!finite) {
          for (int f = 0; f < F && y != nullptr; ++f) y[f] = std::numeric_limits<T>::quiet_NaN();
          continue;
        }
        for (int f = 0; f < F && y != nullptr; ++f) y[f] = T(0);
        for (int c = 0; c < (1 << D); ++c) {
          const Corner<T, D> k = corner<Order::kHessian, T, D>(axes, c, level);
          const int64_t row = level.offset + k.row;
          T vdw = T(0);  // Σ_i v_i ∂_i W
          for (int i = 0; i < D; ++i) vdw += v[i] * k.dw[i];
          T g_u = T(0), g_p = T(0);  // Σ_f g_f u[row, f], Σ_f g_f params[row, f]
          for (int f = 0; f < F; ++f) {
            const T u = has_u ? at<T>(a.grad_grad_params, row, f) : T(0);
            const T p = at<T>(pb.params, row, f);
            const T g = at<T>(a.grad_out, b, l * F + f);
            if (y != nullptr) y[f] += k.w * u + vdw * p;
            g_u += g * u;
            g_p += g * p;
          }
          for (int j = 0; j < D; ++j) {
            T vh = T(0);  // Σ_i v_i ∂_j ∂_i W
            for (int i = 0; i < D; ++i) vh += v[i] * k.hw[j][i];
            gx[j] += k.dw[j] * g_u + vh * g_p;
          }
        }
      }
      for (int i = 0; i < D && grad_x != nullptr; ++i) {
        grad_x[b * D + i] = finite ? gx[i] : std::numeric_limits<T>::quiet_NaN();
      }
    });
  }
  if (a.grad_params != nullptr) {
    T* grad = static_cast<T*>(a.grad_params);
    if (!has_v) {  // grad_params = grad_out · Σ_i v_i ∂_i W is 0 without a grad_x seed
      std::memset(grad, 0, sizeof(T) * static_cast<std::size_t>(pb.rows * F));
      return;
    }
    scatter_by_level<T, D>(
        pb, grad, [&](int64_t b, int l, const LevelInfo& level, const Axis<T>(&axes)[D]) {
          T v[D];
          for (int i = 0; i < D; ++i) v[i] = at<T>(a.grad_grad_x, b, i);
          for (int c = 0; c < (1 << D); ++c) {
            const Corner<T, D> k = corner<Order::kGradient, T, D>(axes, c, level);
            T vdw = T(0);
            for (int i = 0; i < D; ++i) vdw += v[i] * k.dw[i];
            T* row = grad + (level.offset + k.row) * F;
            for (int f = 0; f < F; ++f) row[f] += vdw * at<T>(a.grad_out, b, l * F + f);
          }
        });
  }
}

/// Calls f(TypeTag<T>, std::integral_constant<int, D>) for the problem's dtype and D.
template <class F>
void dispatch(const Problem& pb, F&& f) {
  dispatch_float_types(pb.op, pb.dtype, [&](auto tag) {
    if (pb.dims == 2) {
      f(tag, std::integral_constant<int, 2>{});
    } else {
      f(tag, std::integral_constant<int, 3>{});
    }
  });
}

}  // namespace

void forward_cpu(const Problem& pb, void* out) {
  dispatch(pb, [&](auto tag, auto dims) {
    using T = typename decltype(tag)::type;
    forward<T, decltype(dims)::value>(pb, static_cast<T*>(out));
  });
}

void backward_cpu(const GradArgs& args) {
  dispatch(args.problem, [&](auto tag, auto dims) {
    backward<typename decltype(tag)::type, decltype(dims)::value>(args);
  });
}

void double_backward_cpu(const GradArgs& args) {
  dispatch(args.problem, [&](auto tag, auto dims) {
    double_backward<typename decltype(tag)::type, decltype(dims)::value>(args);
  });
}

}  // namespace fieldfuse::detail::hash_grid
