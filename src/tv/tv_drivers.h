// SPDX-License-Identifier: Apache-2.0
// The interface between the TV front (tv.cpp), which validates and plans, and the CPU and CUDA
// drivers, which only iterate and reduce. Arguments arrive here already checked.
#pragma once

#include <cstddef>

#include "core/check.h"
#include "core/volume_view.h"
#include "fieldfuse/core.h"
#include "tv/plane_tv_math.h"
#include "tv/tv_math.h"

namespace fieldfuse::detail::tv {

enum class Functional { Sq, Iso, L1, SqAxes };

/// Partial sums a functional reduces (L1 and SqAxes: one per axis).
inline int num_sums(Functional f) { return f == Functional::L1 || f == Functional::SqAxes ? 3 : 1; }

/// Calls `run(policy)` with the policy of `functional` (tv_math.h, plane_tv_math.h).
template <class Run>
decltype(auto) visit_functional(Functional functional, double eps, const Run& run) {
  switch (functional) {
    case Functional::Sq:
      return run(SqTV{});
    case Functional::Iso:
      return run(IsoTV{eps});
    case Functional::L1:
      return run(L1TV{});
    case Functional::SqAxes:
      return run(SqAxesTV{});
  }
  fail(ErrorKind::Runtime, "tv", "internal error: unknown functional");
}

struct ForwardArgs {
  const char* op;  ///< public name, for error messages and profiler ranges
  Functional functional;
  double eps;  ///< Iso only
  VolumeView vol;
  const void* vol_data;
  DType dtype;
  Device device;
  ReducePlan plan;
  void* out;  ///< plan.num_outputs elements of out_dtype, at out_stride
  DType out_dtype;
  int64_t out_stride;
  void* workspace;
  Stream stream;
};

struct BackwardArgs {
  const char* op;
  Functional functional;
  double eps;
  VolumeView vol;
  const void* vol_data;
  DType dtype;
  Device device;
  ReducePlan plan;
  const void* grad_out;  ///< plan.num_outputs elements of grad_out_dtype, at grad_out_stride
  DType grad_out_dtype;
  int64_t grad_out_stride;
  VolumeView grad;  ///< same sizes as vol, its own strides
  void* grad_data;
  Stream stream;
  bool accumulate;  ///< add the gradient to what grad holds instead of overwriting it
};

/// Workspace bytes of forward_cpu (one float64 partial per depth plane and sum; at least 1).
std::size_t forward_workspace_cpu(const VolumeView& vol, Functional functional);
void forward_cpu(const ForwardArgs& args);
void backward_cpu(const BackwardArgs& args);

#if FIELDFUSE_WITH_CUDA
/// Workspace bytes of forward_cuda (the per-block partial sums).
std::size_t forward_workspace_cuda(const VolumeView& vol, Functional functional);
void forward_cuda(const ForwardArgs& args);
void backward_cuda(const BackwardArgs& args);
#endif

}  // namespace fieldfuse::detail::tv
