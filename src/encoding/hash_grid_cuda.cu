// SPDX-License-Identifier: Apache-2.0
// The hash-grid CUDA driver: one thread per (point, level) over the shared math
// (hash_grid_math.h); params gradients and the levels' x-gradients are scattered with atomics.
//
// Note [hash-grid launch]
// -----------------------
// The grid is (point blocks, level groups) with the group in blockIdx.y, so the blocks that run at
// the same time mostly share a few levels: their tables (at most 2^T rows each, 4 MiB at the
// default 2^19 × 2 float32) stay in L2 while the points gather from them, which is what bounds
// the random corner reads. A thread walks G consecutive levels of its point, G such that the
// G·F features it writes fill a 32-byte sector (G = 4 at F = 2 in float32): with one level a
// thread, each thread wrote 8 of a sector's 32 bytes and the other three levels' blocks wrote
// the rest much later. The segment is stored as 16-byte vectors when the output rows allow it;
// x is read once per (point, group), grad_out as one segment, and grad_x gets one atomic add per
// (point, group) and dimension.
//
// The backward and double backward are the same walk: the params gradient and, summed over the
// levels, the x-gradient are atomic adds into zero-filled buffers (float16 params: a float32
// accumulator in the workspace, rounded into grad_params by a final pass). The double backward
// computes grad_grad_out, grad_x and grad_params from one read of each corner's params and seed
// rows.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "encoding/hash_grid_drivers.h"

namespace fieldfuse::detail::hash_grid {
namespace {

constexpr int kThreads = 256;

/// A quiet NaN of the compute type (std::numeric_limits is host-only without relaxed constexpr).
template <class T>
__device__ __forceinline__ T quiet_nan();
template <>
__device__ __forceinline__ float quiet_nan<float>() {
  return __int_as_float(0x7fc00000);
}
template <>
__device__ __forceinline__ double quiet_nan<double>() {
  return __longlong_as_double(0x7ff8000000000000LL);
}

template <class T>
__device__ __forceinline__ T to_compute(T v) {
  return v;
}
__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }

template <class T, class S>
__device__ __forceinline__ T load(const MatrixView& m, int64_t row, int64_t col) {
  return static_cast<T>(
      to_compute(static_cast<const S*>(m.data)[row * m.stride_row + col * m.stride_col]));
}

/// One table row of F elements as a single (vector) load: 16 bytes at most per access.
template <class S, int F>
constexpr std::size_t row_alignment() {
  return sizeof(S) * F >= 16 ? 16 : sizeof(S) * F;
}
template <class S, int F>
struct alignas(row_alignment<S, F>()) Row {
  S v[F];
};

/// Row `row` of a [rows, F] matrix into `out` (compute type): one vector load when `packed` (rows
/// contiguous and aligned, see packed_rows), else element by element through the strides.
template <class T, class S, int F>
__device__ __forceinline__ void load_row(const MatrixView& m, int64_t row, bool packed,
                                         T (&out)[F]) {
  if (packed) {
    const Row<S, F> r = static_cast<const Row<S, F>*>(m.data)[row];
#pragma unroll
    for (int f = 0; f < F; ++f) out[f] = static_cast<T>(to_compute(r.v[f]));
  } else {
#pragma unroll
    for (int f = 0; f < F; ++f) out[f] = load<T, S>(m, row, f);
  }
}

/// Adds `v` to the F contiguous elements at `dst`. On sm_90 float rows use the vector atomics
/// (one float2/float4 atomic instead of 2/4) when `vector` (dst 16-byte aligned).
template <class T, int F>
__device__ __forceinline__ void atomic_add_row(T* dst, const T (&v)[F], bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (std::is_same<T, float>::value && F % 4 == 0) {
    if (vector) {
#pragma unroll
      for (int f = 0; f < F; f += 4) {
        atomicAdd(reinterpret_cast<float4*>(dst + f),
                  make_float4(v[f], v[f + 1], v[f + 2], v[f + 3]));
      }
      return;
    }
  } else if constexpr (std::is_same<T, float>::value && F == 2) {
    if (vector) {
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(v[0], v[1]));
      return;
    }
  }
#endif
  (void)vector;
#pragma unroll
  for (int f = 0; f < F; ++f) atomicAdd(dst + f, v[f]);
}

/// Launch-time facts about the memory the kernels touch (Note [hash-grid launch]).
struct Access {
  bool params_packed = false;     ///< params rows loadable as one vector
  bool seed_packed = false;       ///< likewise grad_grad_params
  bool vector_atomics = false;    ///< the params-gradient buffer is 16-byte aligned
  bool out_vectors = false;       ///< output rows (out, grad_grad_out) allow 16-byte segment stores
  bool grad_out_vectors = false;  ///< likewise for loads of grad_out segments
};

/// Levels a thread walks (Note [hash-grid launch]): its G·F features fill a 32-byte sector.
template <class T, int F>
__host__ __device__ constexpr int levels_per_thread() {
  return sizeof(T) * F >= 32 ? 1 : static_cast<int>(32 / (sizeof(T) * F));
}

/// A thread's G·F outputs of one point, 16-byte aligned for vector stores and loads.
template <class T, int N>
struct alignas(16) Segment {
  static_assert(N * sizeof(T) % 16 == 0, "a segment is whole 16-byte vectors");
  T v[N];
};

/// This thread's point, first level and level count.
struct Work {
  int64_t b;
  int l0, levels;
};
template <int G>
__device__ __forceinline__ Work work_item(const Problem& pb) {
  const int l0 = static_cast<int>(blockIdx.y) * G;
  return {static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, l0, min(G, pb.levels - l0)};
}

/// The point's coordinates; false if any is NaN (its gathers are skipped).
template <class T, int D>
__device__ __forceinline__ bool point_coords(const Problem& pb, int64_t b, T (&x)[D]) {
  bool finite = true;
#pragma unroll
  for (int i = 0; i < D; ++i) {
    x[i] = load<T, T>(pb.x, b, i);
    finite = finite && x[i] == x[i];
  }
  return finite;
}

template <class T, int D>
__device__ __forceinline__ void level_axes(const Problem& pb, const LevelInfo& level,
                                           const T (&x)[D], Axis<T> (&axes)[D]) {
#pragma unroll
  for (int i = 0; i < D; ++i)
    axes[i] = make_axis<T>(x[i], static_cast<T>(level.scale), pb.smoothstep);
}

/// Writes the first `levels` of a thread's G level segments (F values each) at dst: whole
/// 16-byte vectors when all G are there and `vectors`, else element by element.
template <class T, int G, int F>
__device__ __forceinline__ void store_segment(T* dst, const Segment<T, G * F>& seg, int levels,
                                              bool vectors) {
  if (vectors && levels == G) {
    *reinterpret_cast<Segment<T, G * F>*>(dst) = seg;
    return;
  }
#pragma unroll
  for (int e = 0; e < G * F; ++e) {
    if (e < levels * F) dst[e] = seg.v[e];
  }
}

/// Reads a thread's grad_out segment (the first `levels` levels; the rest 0).
template <class T, int G, int F>
__device__ __forceinline__ void load_segment(const MatrixView& m, int64_t b, int l0, int levels,
                                             bool vectors, Segment<T, G * F>& seg) {
  if (vectors && levels == G) {
    seg = *reinterpret_cast<const Segment<T, G * F>*>(static_cast<const T*>(m.data) +
                                                      b * m.stride_row + l0 * F);
    return;
  }
#pragma unroll
  for (int e = 0; e < G * F; ++e) seg.v[e] = e < levels * F ? load<T, T>(m, b, l0 * F + e) : T(0);
}

template <class T, class S, int D, int F>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const __grid_constant__ Problem pb, Access access, T* __restrict__ out) {
  constexpr int G = levels_per_thread<T, F>();
  const Work w = work_item<G>(pb);
  if (w.b >= pb.batch) return;
  T x[D];
  const bool finite = point_coords<T, D>(pb, w.b, x);
  Segment<T, G * F> y;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    T acc[F];
#pragma unroll
    for (int f = 0; f < F; ++f) acc[f] = finite ? T(0) : quiet_nan<T>();
    if (finite && g < w.levels) {
      const LevelInfo& level = pb.level[w.l0 + g];
      Axis<T> axes[D];
      level_axes<T, D>(pb, level, x, axes);
#pragma unroll
      for (int c = 0; c < (1 << D); ++c) {
        const Corner<T, D> k = corner<Order::kValue, T, D>(axes, c, level);
        T p[F];
        load_row<T, S, F>(pb.params, level.offset + k.row, access.params_packed, p);
#pragma unroll
        for (int f = 0; f < F; ++f) acc[f] += k.w * p[f];
      }
    }
#pragma unroll
    for (int f = 0; f < F; ++f) y.v[g * F + f] = acc[f];
  }
  store_segment<T, G, F>(out + w.b * pb.out_cols() + w.l0 * F, y, w.levels, access.out_vectors);
}

/// `grad_params` is T (params of the compute type) or the float32 accumulator (float16 params).
template <class T, class S, int D, int F>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const __grid_constant__ Problem pb, Access access, MatrixView grad_out,
                    T* __restrict__ grad_x, T* __restrict__ grad_params) {
  constexpr int G = levels_per_thread<T, F>();
  const Work w = work_item<G>(pb);
  if (w.b >= pb.batch) return;
  T x[D];
  if (!point_coords<T, D>(pb, w.b, x)) {
    if (grad_x != nullptr) {
#pragma unroll
      for (int i = 0; i < D; ++i) atomicAdd(grad_x + w.b * D + i, quiet_nan<T>());
    }
    return;  // NaN points add nothing to the params gradient
  }
  Segment<T, G * F> g;
  load_segment<T, G, F>(grad_out, w.b, w.l0, w.levels, access.grad_out_vectors, g);
  T gx[D] = {};
#pragma unroll
  for (int l = 0; l < G; ++l) {
    if (l >= w.levels) break;
    const LevelInfo& level = pb.level[w.l0 + l];
    Axis<T> axes[D];
    level_axes<T, D>(pb, level, x, axes);
#pragma unroll
    for (int c = 0; c < (1 << D); ++c) {
      const Corner<T, D> k = corner<Order::kGradient, T, D>(axes, c, level);
      const int64_t row = level.offset + k.row;
      if (grad_params != nullptr) {
        T add[F];
#pragma unroll
        for (int f = 0; f < F; ++f) add[f] = k.w * g.v[l * F + f];
        atomic_add_row<T, F>(grad_params + row * F, add, access.vector_atomics);
      }
      if (grad_x != nullptr) {
        T p[F];
        load_row<T, S, F>(pb.params, row, access.params_packed, p);
        T dot = T(0);
#pragma unroll
        for (int f = 0; f < F; ++f) dot += p[f] * g.v[l * F + f];
#pragma unroll
        for (int i = 0; i < D; ++i) gx[i] += k.dw[i] * dot;
      }
    }
  }
  if (grad_x != nullptr) {
#pragma unroll
    for (int i = 0; i < D; ++i) atomicAdd(grad_x + w.b * D + i, gx[i]);
  }
}

template <class T, class S, int D, int F>
__global__ void __launch_bounds__(kThreads)
    double_backward_kernel(const __grid_constant__ Problem pb, Access access, MatrixView grad_out,
                           MatrixView grad_grad_x, MatrixView grad_grad_params,
                           T* __restrict__ grad_grad_out, T* __restrict__ grad_x,
                           T* __restrict__ grad_params) {
  constexpr int G = levels_per_thread<T, F>();
  const Work w = work_item<G>(pb);
  if (w.b >= pb.batch) return;
  T* y = grad_grad_out != nullptr ? grad_grad_out + w.b * pb.out_cols() + w.l0 * F : nullptr;
  T x[D];
  if (!point_coords<T, D>(pb, w.b, x)) {
    const T nan = quiet_nan<T>();
    if (y != nullptr) {
      Segment<T, G * F> seg;
#pragma unroll
      for (int e = 0; e < G * F; ++e) seg.v[e] = nan;
      store_segment<T, G, F>(y, seg, w.levels, access.out_vectors);
    }
    if (grad_x != nullptr) {
#pragma unroll
      for (int i = 0; i < D; ++i) atomicAdd(grad_x + w.b * D + i, nan);
    }
    return;
  }
  const bool has_v = grad_grad_x.data != nullptr;
  const bool has_u = grad_grad_params.data != nullptr;
  T v[D], gx[D] = {};
#pragma unroll
  for (int i = 0; i < D; ++i) v[i] = has_v ? load<T, T>(grad_grad_x, w.b, i) : T(0);
  Segment<T, G * F> g, out;
  load_segment<T, G, F>(grad_out, w.b, w.l0, w.levels, access.grad_out_vectors, g);
#pragma unroll
  for (int l = 0; l < G; ++l) {
    T acc[F] = {};
    if (l < w.levels) {
      const LevelInfo& level = pb.level[w.l0 + l];
      Axis<T> axes[D];
      level_axes<T, D>(pb, level, x, axes);
#pragma unroll
      for (int c = 0; c < (1 << D); ++c) {
        const Corner<T, D> k = corner<Order::kHessian, T, D>(axes, c, level);
        const int64_t row = level.offset + k.row;
        T vdw = T(0);  // Σ_i v_i ∂_i W
#pragma unroll
        for (int i = 0; i < D; ++i) vdw += v[i] * k.dw[i];
        T p[F], u[F] = {}, add[F];
        load_row<T, S, F>(pb.params, row, access.params_packed, p);
        if (has_u) load_row<T, S, F>(grad_grad_params, row, access.seed_packed, u);
        T g_u = T(0), g_p = T(0);  // Σ_f g_f u[row, f], Σ_f g_f params[row, f]
#pragma unroll
        for (int f = 0; f < F; ++f) {
          const T gf = g.v[l * F + f];
          acc[f] += k.w * u[f] + vdw * p[f];
          g_u += gf * u[f];
          g_p += gf * p[f];
          add[f] = vdw * gf;
        }
        if (grad_params != nullptr && has_v) {
          atomic_add_row<T, F>(grad_params + row * F, add, access.vector_atomics);
        }
#pragma unroll
        for (int j = 0; j < D; ++j) {
          T vh = T(0);  // Σ_i v_i ∂_j ∂_i W
#pragma unroll
          for (int i = 0; i < D; ++i) vh += v[i] * k.hw[j][i];
          gx[j] += k.dw[j] * g_u + vh * g_p;
        }
      }
    }
#pragma unroll
    for (int f = 0; f < F; ++f) out.v[l * F + f] = acc[f];
  }
  if (y != nullptr) store_segment<T, G, F>(y, out, w.levels, access.out_vectors);
  if (grad_x != nullptr) {
#pragma unroll
    for (int i = 0; i < D; ++i) atomicAdd(grad_x + w.b * D + i, gx[i]);
  }
}

__global__ void round_to_half(const float* __restrict__ in, __half* __restrict__ out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2half_rn(in[i]);
  }
}

/// Calls f(TypeTag<T>, TypeTag<S>, D, F) for the problem's compute type, params storage type,
/// dimension and features per level.
template <class Fn>
void dispatch(const Problem& pb, Fn&& fn) {
  auto with_dims = [&](auto t_tag, auto s_tag) {
    auto with_features = [&](auto dims) {
      switch (pb.features) {
        case 1:
          return fn(t_tag, s_tag, dims, std::integral_constant<int, 1>{});
        case 2:
          return fn(t_tag, s_tag, dims, std::integral_constant<int, 2>{});
        case 4:
          return fn(t_tag, s_tag, dims, std::integral_constant<int, 4>{});
        default:
          return fn(t_tag, s_tag, dims, std::integral_constant<int, 8>{});
      }
    };
    if (pb.dims == 2) return with_features(std::integral_constant<int, 2>{});
    return with_features(std::integral_constant<int, 3>{});
  };
  if (pb.param_dtype == DType::Float16) return with_dims(TypeTag<float>{}, TypeTag<__half>{});
  detail::dispatch_float_types(pb.op, pb.dtype, [&](auto tag) { with_dims(tag, tag); });
}

/// Whether a [rows, F] matrix of S can be read one row per vector load: rows contiguous, data
/// aligned to the row's vector size.
template <class S, int F>
bool packed_rows(const MatrixView& m) {
  const auto address = reinterpret_cast<std::uintptr_t>(m.data);
  return m.data != nullptr && m.stride_col == 1 && m.stride_row == F &&
         address % row_alignment<S, F>() == 0;
}

/// Whether every thread's output segment of a contiguous [B, L·F] matrix of T at `data` (rows
/// `row_stride` apart) starts on a 16-byte boundary.
template <class T>
bool segment_vectors(const void* data, int64_t row_stride) {
  return data != nullptr && reinterpret_cast<std::uintptr_t>(data) % 16 == 0 &&
         row_stride * sizeof(T) % 16 == 0;
}

template <class T, class S, int F>
Access access_of(const Problem& pb, const MatrixView& seed, const void* grad_params,
                 const void* out = nullptr, const MatrixView& grad_out = {}) {
  Access a;
  a.params_packed = packed_rows<S, F>(pb.params);
  a.seed_packed = packed_rows<S, F>(seed);
  a.vector_atomics = reinterpret_cast<std::uintptr_t>(grad_params) % 16 == 0;
  a.out_vectors = segment_vectors<T>(out, pb.out_cols());
  a.grad_out_vectors =
      grad_out.stride_col == 1 && segment_vectors<T>(grad_out.data, grad_out.stride_row);
  return a;
}

template <class T, int F>
dim3 grid_of(const Problem& pb) {
  return dim3(static_cast<unsigned>(cuda::ceil_div(pb.batch, kThreads)),
              static_cast<unsigned>(cuda::ceil_div(pb.levels, levels_per_thread<T, F>())));
}

void check_batch(const Problem& pb) {
  if (cuda::ceil_div(pb.batch, kThreads) > cuda::kMaxGridX) {
    fail(ErrorKind::NotImplemented, pb.op,
         "not implemented for more than " + std::to_string(cuda::kMaxGridX * kThreads) +
             " points on CUDA, but got " + std::to_string(pb.batch));
  }
}

void zero(void* p, std::size_t bytes, const Problem& pb, cudaStream_t stream) {
  cuda::check(cudaMemsetAsync(p, 0, bytes, stream), pb.op, "cudaMemsetAsync");
}

/// The params-gradient buffer the kernels add into: grad_params itself, or the float32
/// accumulator in the workspace for float16 params. Zero-filled.
template <class T>
T* params_accumulator(const GradArgs& a, cudaStream_t stream) {
  const Problem& pb = a.problem;
  if (a.grad_params == nullptr) return nullptr;
  T* acc = pb.param_dtype == DType::Float16 ? static_cast<T*>(a.workspace)
                                            : static_cast<T*>(a.grad_params);
  zero(acc, sizeof(T) * static_cast<std::size_t>(pb.rows * pb.features), pb, stream);
  return acc;
}

/// Rounds the float32 accumulator into float16 grad_params (no-op for other dtypes).
void finish_params(const GradArgs& a, cudaStream_t stream) {
  const Problem& pb = a.problem;
  if (a.grad_params == nullptr || pb.param_dtype != DType::Float16) return;
  const int64_t n = pb.rows * pb.features;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(n, kThreads), 65536));
  round_to_half<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(a.workspace),
                                                 static_cast<__half*>(a.grad_params), n);
  cuda::check_launch(pb.op, "round_to_half", stream);
}

}  // namespace

std::size_t grad_workspace_cuda(const Problem& pb, bool wants_grad_params) {
  if (!wants_grad_params || pb.param_dtype != DType::Float16) return 1;
  return sizeof(float) * static_cast<std::size_t>(pb.rows * pb.features);
}

void forward_cuda(const Problem& pb, void* out, Stream stream_handle) {
  check_batch(pb);
  cuda::ProfileRange range(pb.op);
  cuda::DeviceGuard guard(pb.device.index, pb.op);
  const auto stream = static_cast<cudaStream_t>(stream_handle.handle);
  dispatch(pb, [&](auto t_tag, auto s_tag, auto dims, auto features) {
    using T = typename decltype(t_tag)::type;
    using S = typename decltype(s_tag)::type;
    constexpr int F = decltype(features)::value;
    forward_kernel<T, S, decltype(dims)::value, F><<<grid_of<T, F>(pb), kThreads, 0, stream>>>(
        pb, access_of<T, S, F>(pb, {}, nullptr, out), static_cast<T*>(out));
    cuda::check_launch(pb.op, "forward_kernel", stream);
  });
}

namespace {

/// The shared frame of the two gradient drivers: checks, device and range, zero-filled
/// accumulators; `launch(tag_T, tag_S, dims, features, grad_x, grad_params, stream)` runs the
/// walk (only for a non-empty batch); float16 params gradients are rounded at the end.
template <class Launch>
void run_gradients(const GradArgs& a, const Launch& launch) {
  const Problem& pb = a.problem;
  check_batch(pb);
  cuda::ProfileRange range(pb.op);
  cuda::DeviceGuard guard(pb.device.index, pb.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  dispatch(pb, [&](auto t_tag, auto s_tag, auto dims, auto features) {
    using T = typename decltype(t_tag)::type;
    T* grad_params = params_accumulator<T>(a, stream);
    T* grad_x = static_cast<T*>(a.grad_x);
    if (grad_x != nullptr) zero(grad_x, sizeof(T) * pb.batch * decltype(dims)::value, pb, stream);
    if (pb.batch > 0) launch(t_tag, s_tag, dims, features, grad_x, grad_params, stream);
    finish_params(a, stream);
  });
}

}  // namespace

void backward_cuda(const GradArgs& a) {
  const Problem& pb = a.problem;
  run_gradients(a, [&](auto t_tag, auto s_tag, auto dims, auto features, auto* grad_x,
                       auto* grad_params, cudaStream_t stream) {
    using T = typename decltype(t_tag)::type;
    using S = typename decltype(s_tag)::type;
    if (grad_x == nullptr && grad_params == nullptr) return;
    constexpr int F = decltype(features)::value;
    backward_kernel<T, S, decltype(dims)::value, F><<<grid_of<T, F>(pb), kThreads, 0, stream>>>(
        pb, access_of<T, S, F>(pb, {}, grad_params, nullptr, a.grad_out), a.grad_out, grad_x,
        grad_params);
    cuda::check_launch(pb.op, "backward_kernel", stream);
  });
}

void double_backward_cuda(const GradArgs& a) {
  const Problem& pb = a.problem;
  run_gradients(a, [&](auto t_tag, auto s_tag, auto dims, auto features, auto* grad_x,
                       auto* grad_params, cudaStream_t stream) {
    using T = typename decltype(t_tag)::type;
    using S = typename decltype(s_tag)::type;
    constexpr int F = decltype(features)::value;
    double_backward_kernel<T, S, decltype(dims)::value, F>
        <<<grid_of<T, F>(pb), kThreads, 0, stream>>>(
            pb,
            access_of<T, S, F>(pb, a.grad_grad_params, grad_params, a.grad_grad_out, a.grad_out),
            a.grad_out, a.grad_grad_x, a.grad_grad_params, static_cast<T*>(a.grad_grad_out), grad_x,
            grad_params);
    cuda::check_launch(pb.op, "double_backward_kernel", stream);
  });
}

}  // namespace fieldfuse::detail::hash_grid
