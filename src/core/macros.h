// SPDX-License-Identifier: Apache-2.0
// Portability macros shared by host-only and CUDA translation units.
#pragma once

// FF_HOST_DEVICE marks the shared math that both the CPU driver (g++) and the CUDA kernels (nvcc)
// call, so each formula exists exactly once.
#if defined(__CUDACC__)
#define FF_HOST_DEVICE __host__ __device__
#define FF_FORCE_INLINE __forceinline__
#else
#define FF_HOST_DEVICE
#define FF_FORCE_INLINE inline __attribute__((always_inline))
#endif

// FF_DEVICE_UNROLL(n) unrolls the next loop n times in device code (so the loads of n iterations
// are in flight together on a GPU that does not reorder them); host compilers, which do their own
// unrolling, see nothing.
#if defined(__CUDA_ARCH__)
#define FF_DEVICE_UNROLL(n) _Pragma(FF_STRINGIFY(unroll n))
#else
#define FF_DEVICE_UNROLL(n)
#endif
#define FF_STRINGIFY(x) #x
