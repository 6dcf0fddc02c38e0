// SPDX-License-Identifier: Apache-2.0
// CUDA SIMT driver of the MLP family (float32 and float64): a readout (one layer, one output) on
// the streaming kernels of mlp_cuda_readout.cuh (Note [mlp readout]); otherwise float32 on the
// warp-fused kernels of mlp_cuda_warp_fused*.cuh (FMA engine) where their plan fits, else (and
// float64) the row-tile kernels of mlp_cuda_tile.cuh over the FMA engine.
#include "mlp/mlp_cuda_readout.cuh"
#include "mlp/mlp_cuda_tile.cuh"
#include "mlp/mlp_cuda_warp_fused_plan.cuh"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp {
namespace {

// 64 rows per tile: one 64-row product tile (the SIMT engine's M) per layer and sweep.
template <class T>
using Simt = tile::SimtEngine<T, T, 64>;

template <class F>
decltype(auto) dispatch(const Problem& p, const F& f) {
  return dispatch_float_types(p.op, p.dtype,
                              [&](auto tag) { return f(Simt<typename decltype(tag)::type>{}); });
}

}  // namespace

std::size_t forward_workspace_cuda(const Problem& problem) {
  if (readout::applies(problem)) return 0;
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::Forward);
  });
}

std::size_t backward_workspace_cuda(const Problem& problem) {
  if (readout::applies(problem)) return readout::backward_workspace_bytes(problem);
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::Backward);
  });
}

std::size_t double_backward_workspace_cuda(const Problem& problem) {
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::DoubleBackward);
  });
}

void forward_cuda(const ForwardArgs& args) {
  if (readout::applies(args.problem)) {
    return dispatch_float_types(args.problem.op, args.problem.dtype, [&](auto tag) {
      readout::forward<typename decltype(tag)::type>(args);
    });
  }
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

void backward_cuda(const BackwardArgs& args) {
  if (readout::applies(args.problem)) {
    return dispatch_float_types(args.problem.op, args.problem.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (args.out != nullptr) {  // the readout's backward forms no y: its forward writes it
        ForwardArgs forward;
        forward.problem = args.problem;
        forward.x = args.x;
        forward.out = args.out;
        forward.stream = args.stream;
        readout::forward<T>(forward);
      }
      readout::backward<T>(args);
    });
  }
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

void double_backward_cuda(const DoubleBackwardArgs& args) {
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

}  // namespace fieldfuse::detail::mlp
