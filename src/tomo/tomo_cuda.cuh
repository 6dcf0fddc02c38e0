// SPDX-License-Identifier: Apache-2.0
// The tomo CUDA drivers' launch shape and their elementwise launch (core/for_each.cuh).
#pragma once

#include "core/for_each.cuh"

namespace fieldfuse::detail::tomo {

constexpr int kThreads = cuda::kForEachThreads;

using cuda::for_each;

}  // namespace fieldfuse::detail::tomo
