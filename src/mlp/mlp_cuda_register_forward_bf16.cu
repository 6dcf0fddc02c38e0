// SPDX-License-Identifier: Apache-2.0
// The bfloat16 instantiations of register_forward_kernel (mlp_cuda_register_forward.cuh) and their
// entry points (mlp_cuda_register_entries.h): a translation unit per 16-bit type, compiled beside
// the others (the width-64 kernel is compiled once per hidden activation, Note [mlp register
// forward shape], and both types in one unit took about twice the project's 60 s budget).
#include <cuda_bf16.h>

#include "mlp/mlp_cuda_register_entries.h"
#include "mlp/mlp_cuda_register_forward.cuh"

namespace fieldfuse::detail::mlp::fused {

template <class S, int MW>
const void* register_forward_entry() {
  return reinterpret_cast<const void*>(&register_forward_kernel<S, MW>);
}

template const void* register_forward_entry<__nv_bfloat16, 64>();
template const void* register_forward_entry<__nv_bfloat16, kRegisterMaxWidth>();

}  // namespace fieldfuse::detail::mlp::fused
