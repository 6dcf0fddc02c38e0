// SPDX-License-Identifier: Apache-2.0
// Index and element-conversion formulas of the 4-D layout copies, shared by the CPU and CUDA
// drivers.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace fieldfuse::detail::layout {

/// A strided `[P, C, H, W]` tensor in element strides. The dense side of every copy is the same
/// logical tensor stored channels-last: element (p, c, y, x) at ((p·H + y)·W + x)·C + c.
struct PlaneLayout {
  int64_t planes = 0, channels = 0, height = 0, width = 0;
  int64_t stride_p = 0, stride_c = 0, stride_y = 0, stride_x = 0;

  FF_HOST_DEVICE FF_FORCE_INLINE int64_t offset(int64_t p, int64_t c, int64_t y, int64_t x) const {
    return p * stride_p + c * stride_c + y * stride_y + x * stride_x;
  }
  /// Positions per plane (H·W): the drivers walk a plane's cells as one flat index s = y·W + x.
  FF_HOST_DEVICE FF_FORCE_INLINE int64_t cells() const { return height * width; }
  /// Offset of cell s within a plane and channel. When a row follows the previous one without a
  /// gap (stride_y == W·stride_x, as in NCHW and channels-last) this is s·stride_x and needs no
  /// division; `flat` is that test, made once per launch.
  FF_HOST_DEVICE FF_FORCE_INLINE int64_t cell_offset(int64_t s, bool flat) const {
    if (flat) return s * stride_x;
    const int64_t y = s / width;
    return y * stride_y + (s - y * width) * stride_x;
  }
  bool rows_are_flat() const { return height <= 1 || stride_y == width * stride_x; }
};

/// Index of element (p, c, cell s) in the dense channels-last buffer.
FF_HOST_DEVICE FF_FORCE_INLINE int64_t channels_last_index(int64_t p, int64_t c, int64_t s,
                                                           int64_t cells, int64_t channels) {
  return (p * cells + s) * channels + c;
}

FF_HOST_DEVICE FF_FORCE_INLINE uint32_t float_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

/// IEEE binary16 bits of a float32, rounded to nearest with ties to even (as __float2half_rn):
/// overflow gives ±inf, tiny values round into the subnormals or to ±0, NaN stays a (quiet) NaN.
/// The CUDA kernels use this too, so CPU and GPU conversions agree bit for bit.
FF_HOST_DEVICE inline uint16_t float_to_half_bits(float v) {
  const uint32_t f = float_bits(v);
  const auto sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t mag = f & 0x7fffffffu;
  if (mag >= 0x7f800000u) return sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, inf
  // 65520 is halfway between the largest half (65504, odd mantissa) and 2^16: ties go to inf.
  if (mag >= 0x477ff000u) return sign | 0x7c00u;
  if (mag >= 0x38800000u) {  // a normal half: rebias the exponent (127 -> 15), round 13 bits off
    const uint32_t rebiased = mag - 0x38000000u;
    uint32_t half = rebiased >> 13;
    const uint32_t rest = rebiased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry bumps the exponent
    return static_cast<uint16_t>(sign | half);
  }
  // Subnormal half: the value in units of 2^-24 is mantissa >> shift with shift = 126 - exponent.
  const int exponent = static_cast<int>(mag >> 23);
  const int shift = 126 - exponent;
  if (shift > 24) return sign;  // below half the smallest subnormal (2^-25): rounds to ±0
  const uint32_t mantissa = (mag & 0x7fffffu) | 0x800000u;
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // may reach the smallest normal
  return static_cast<uint16_t>(sign | half);
}

/// bfloat16 bits of a float32, rounded to nearest with ties to even (as __float2bfloat16_rn);
/// NaN stays a (quiet) NaN.
FF_HOST_DEVICE inline uint16_t float_to_bfloat16_bits(float v) {
  const uint32_t f = float_bits(v);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);
  const uint32_t rounded = f + 0x7fffu + ((f >> 16) & 1u);  // carries into the exponent as needed
  return static_cast<uint16_t>(rounded >> 16);
}

/// Element conversions a copy applies, as functors so the drivers inline them.
struct CopyBits {  // same dtype: the bits move unchanged (NaN payloads and -0 included)
  template <class T>
  FF_HOST_DEVICE FF_FORCE_INLINE T operator()(T v) const {
    return v;
  }
};
struct FloatToHalfBits {
  FF_HOST_DEVICE FF_FORCE_INLINE uint16_t operator()(float v) const {
    return float_to_half_bits(v);
  }
};
struct FloatToBFloat16Bits {
  FF_HOST_DEVICE FF_FORCE_INLINE uint16_t operator()(float v) const {
    return float_to_bfloat16_bits(v);
  }
};

}  // namespace fieldfuse::detail::layout
