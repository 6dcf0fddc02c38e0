// SPDX-License-Identifier: Apache-2.0
// CUDA driver of FBP's filtering: the same steps as fbp_filter_cpu.cpp (angles, weights, filter
// response, then the padded columns through a real FFT, a gain and the inverse), with cuFFT plans
// made for the call on the caller's stream (tomo_math.h formulas, no atomics).
#include <cuda_runtime.h>
#include <cufft.h>

#include <climits>
#include <cstdint>
#include <string>

#include "core/cuda_launch.cuh"
#include "core/cufft_check.cuh"
#include "tomo/tomo_cuda.cuh"
#include "tomo/tomo_drivers.h"
#include "tomo/tomo_math.h"

namespace fieldfuse::detail::tomo {
namespace {

using cuda::check_cufft;

/// A batched in-place real FFT plan of length N over rows of N + 2 floats, on the call's stream;
/// destroyed (with its cuFFT-allocated work area) at the end of the scope.
class Plan {
 public:
  Plan(const char* op, int64_t padded, int64_t batch, cufftType type, cudaStream_t stream) {
    int length = static_cast<int>(padded);
    const int real_stride = static_cast<int>(fbp_column_stride(padded));
    const int complex_stride = real_stride / 2;
    const bool forward = type == CUFFT_R2C;
    check_cufft(cufftPlanMany(
                    &plan_, 1, &length, &length, 1, forward ? real_stride : complex_stride, &length,
                    1, forward ? complex_stride : real_stride, type, static_cast<int>(batch)),
                op, "cufftPlanMany");
    check_cufft(cufftSetStream(plan_, stream), op, "cufftSetStream");
  }
  ~Plan() { cufftDestroy(plan_); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  cufftHandle get() const { return plan_; }

 private:
  cufftHandle plan_ = 0;
};

struct Angles {
  const float* rotations;
  int64_t strides[3];
  double* angles;
  __device__ void operator()(int64_t m) const {
    const float* r = rotations + m * strides[0];
    angles[m] = tilt_angle(r[strides[1] + 2 * strides[2]], r[2 * strides[1] + 2 * strides[2]]);
  }
};

struct Scales {
  const double* angles;
  int64_t count, width, padded;
  int64_t volume[3];
  double* scales;
  __device__ void operator()(int64_t m) const {
    scales[m] = fbp_projection_scale(fbp_interval(angles, count, m), volume, width, padded);
  }
};

struct KernelTaps {
  float* kernel;
  int64_t padded;
  __device__ void operator()(int64_t i) const {
    kernel[i] = static_cast<float>(ramp_tap_circular(i, padded));
  }
};

struct Response {
  const float* spectrum;  ///< complex, interleaved
  int32_t filter;
  int64_t padded;
  float* response;
  __device__ void operator()(int64_t k) const {
    response[k] = fbp_response(spectrum[2 * k], filter, k, padded);
  }
};

/// Element i of row c of the padded columns: sample i of column (m, j), or 0 past Hd.
struct Gather {
  View3 p;
  int64_t stride;
  float* columns;
  __device__ void operator()(int64_t e) const {
    const int64_t c = e / stride, i = e % stride;
    const int64_t m = c / p.sizes[2], j = c % p.sizes[2];
    columns[e] = i < p.sizes[1]
                     ? static_cast<const float*>(
                           p.data)[m * p.strides[0] + i * p.strides[1] + j * p.strides[2]]
                     : 0.0f;
  }
};

struct Scale {
  const float* response;
  const double* scales;
  int64_t bins, width;
  float2* spectra;
  __device__ void operator()(int64_t e) const {
    const int64_t c = e / bins, k = e % bins;
    const float gain = fbp_gain(response[k], scales[c / width]);
    spectra[e].x *= gain;
    spectra[e].y *= gain;
  }
};

}  // namespace

void fbp_filter_cuda(const FbpFilterArgs& a) {
  const char* op = a.exec.op;
  const int64_t n = a.projections.sizes[0], width = a.projections.sizes[2];
  const int64_t padded = a.padded, stride = fbp_column_stride(padded), bins = padded / 2 + 1;
  const int64_t columns = n * width;
  if (columns > INT_MAX || stride > INT_MAX) {
    fail(ErrorKind::NotImplemented, op,
         "not implemented for " + std::to_string(columns) + " detector columns of FFT length " +
             std::to_string(padded) + " on CUDA (cuFFT batches and lengths are int)");
  }
  cuda::ProfileRange range(op);
  cuda::DeviceGuard guard(a.exec.device.index, op);
  const auto stream = static_cast<cudaStream_t>(a.exec.stream.handle);

  for_each(op, "fbp_angles", n, stream,
           Angles{static_cast<const float*>(a.rotations),
                  {a.rotation_strides[0], a.rotation_strides[1], a.rotation_strides[2]},
                  a.angles});
  for_each(op, "fbp_scales", n, stream,
           Scales{a.angles,
                  n,
                  width,
                  padded,
                  {a.volume_sizes[0], a.volume_sizes[1], a.volume_sizes[2]},
                  a.scales});

  for_each(op, "fbp_kernel_taps", padded, stream, KernelTaps{a.kernel, padded});
  {
    Plan kernel_plan(op, padded, 1, CUFFT_R2C, stream);
    check_cufft(
        cufftExecR2C(kernel_plan.get(), a.kernel, reinterpret_cast<cufftComplex*>(a.kernel)), op,
        "cufftExecR2C (filter)");
  }
  for_each(op, "fbp_response", bins, stream,
           Response{a.kernel, static_cast<int32_t>(a.filter), padded, a.response});

  for_each(op, "fbp_gather", columns * stride, stream, Gather{a.projections, stride, a.columns});
  Plan forward(op, padded, columns, CUFFT_R2C, stream);
  Plan inverse(op, padded, columns, CUFFT_C2R, stream);
  auto* spectra = reinterpret_cast<cufftComplex*>(a.columns);
  check_cufft(cufftExecR2C(forward.get(), a.columns, spectra), op, "cufftExecR2C");
  for_each(op, "fbp_scale", columns * bins, stream,
           Scale{a.response, a.scales, bins, width, reinterpret_cast<float2*>(spectra)});
  check_cufft(cufftExecC2R(inverse.get(), spectra, a.columns), op, "cufftExecC2R");
}

}  // namespace fieldfuse::detail::tomo
