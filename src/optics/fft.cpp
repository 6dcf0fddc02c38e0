// SPDX-License-Identifier: Apache-2.0
// The FFT layout's size arithmetic, shared by the CPU and cuFFT paths of fft.h.
#include "optics/fft.h"

namespace fieldfuse::detail::fft {

int64_t FftLayout::points() const {
  int64_t p = 1;
  for (int d = 0; d < rank; ++d) p *= n[d];
  return p;
}

int64_t FftLayout::elements() const { return batch * points() * inner; }

}  // namespace fieldfuse::detail::fft
