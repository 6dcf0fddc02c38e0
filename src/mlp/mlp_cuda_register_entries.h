// SPDX-License-Identifier: Apache-2.0
// The register MLP kernels' entry points, for the host side of the tensor-core driver
// (mlp_cuda_warp_fused_plan.cuh): each kernel family is instantiated in a translation unit of its
// own (mlp_cuda_register_forward_{f16,bf16}.cu, mlp_cuda_register_backward.cu,
// mlp_cuda_register_double.cu), because together they were most of the CUDA build, which one
// translation unit ran on one core.
// The plan queries and launches them through the runtime's `const void*` function handles
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor, cudaLaunchKernel). S is __half or
// __nv_bfloat16; MW is 64, or also kRegisterMaxWidth for the forward.
#pragma once

namespace fieldfuse::detail::mlp::fused {

/// register_forward_kernel<S, MW> (Note [mlp register forward]).
template <class S, int MW>
const void* register_forward_entry();

/// register_backward_kernel<S, MW> (Note [mlp register backward]).
template <class S, int MW>
const void* register_backward_entry();

/// register_double_backward_kernel<S, MW> (Note [mlp register double backward]).
template <class S, int MW>
const void* register_double_backward_entry();

}  // namespace fieldfuse::detail::mlp::fused
