// SPDX-License-Identifier: Apache-2.0
// The instantiations of register_double_backward_kernel (mlp_cuda_register_double.cuh) and their
// entry points (mlp_cuda_register_entries.h): a translation unit of their own, compiled beside the
// others.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "mlp/mlp_cuda_register_double.cuh"
#include "mlp/mlp_cuda_register_entries.h"

namespace fieldfuse::detail::mlp::fused {

template <class S, int MW>
const void* register_double_backward_entry() {
  return reinterpret_cast<const void*>(&register_double_backward_kernel<S, MW>);
}

template const void* register_double_backward_entry<__half, 64>();
template const void* register_double_backward_entry<__nv_bfloat16, 64>();

}  // namespace fieldfuse::detail::mlp::fused
