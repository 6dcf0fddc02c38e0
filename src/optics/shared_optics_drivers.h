// SPDX-License-Identifier: Apache-2.0
// shared_optics_3d's drivers and the functor factory both share.
#pragma once

#include "fieldfuse/optics.h"
#include "optics/shared_optics.h"

namespace fieldfuse::detail::optics {

template <class T>
SharedOptics3d<T> shared_optics_functor(const MicroscopeSettings& s, const ThickGeometry& g,
                                        const TensorRef& pupil, const TensorRef& propagation,
                                        const TensorRef& greens);

void shared_optics_3d_cpu(const MicroscopeSettings& s, const ThickGeometry& g,
                          const TensorRef& pupil, const TensorRef& propagation,
                          const TensorRef& greens);
void shared_optics_3d_cuda(const MicroscopeSettings& s, const ThickGeometry& g,
                           const TensorRef& pupil, const TensorRef& propagation,
                           const TensorRef& greens, Stream stream);

}  // namespace fieldfuse::detail::optics
