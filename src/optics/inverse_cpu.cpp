// SPDX-License-Identifier: Apache-2.0
// CPU driver of the optics inverses, loss and forward model: inverse_pipeline.h over the family's
// CPU policy (exec_cpu.h: parallel_for with a static schedule and per-index results, the Eigen FFT
// layer), so results never depend on the thread count.
#include <cstdint>

#include "core/dispatch.h"
#include "optics/exec_cpu.h"
#include "optics/inverse_drivers.h"
#include "optics/inverse_pipeline.h"

namespace fieldfuse::detail::optics {
namespace {

template <class Args, class Run>
void dispatch(const Args& a, const Run& run) {
  CpuExec e;
  dispatch_float_types(a.exec.op, a.exec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(e, T{});
  });
}

}  // namespace

void run_cpu(const FilterArgs& a) {
  dispatch(a, [&](CpuExec& e, auto t) { run_filter<decltype(t)>(e, a); });
}

void run_cpu(const InverseArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) {
    if (backward) {
      run_inverse_backward<decltype(t)>(e, a);
    } else {
      run_inverse<decltype(t)>(e, a);
    }
  });
}

void run_cpu(const Inverse3dArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) { run_inverse_3d<decltype(t)>(e, a, backward); });
}

void run_cpu(const MidbandArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) { run_midband<decltype(t)>(e, a, backward); });
}

void run_cpu(const ForwardModelArgs& a) {
  dispatch(a, [&](CpuExec& e, auto t) { run_forward_model<decltype(t)>(e, a); });
}

}  // namespace fieldfuse::detail::optics
