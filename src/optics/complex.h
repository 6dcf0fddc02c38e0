// SPDX-License-Identifier: Apache-2.0
// A complex number for the optics formulas that both g++ and nvcc compile: interleaved (re, im)
// like std::complex and cuFFT's types, so arrays of it alias the Complex64/Complex128 tensors.
//
// std::complex is not usable in device code and cuda::std::complex is not available to CPU-only
// builds, hence this value type with only what the formulas need.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace fieldfuse::detail::optics {

template <class T>
struct alignas(2 * sizeof(T)) Complex {
  T re, im;

  FF_HOST_DEVICE constexpr Complex() : re(0), im(0) {}
  FF_HOST_DEVICE constexpr Complex(T real)
      : re(real), im(0) {}  // NOLINT: implicit like std::complex
  FF_HOST_DEVICE constexpr Complex(T real, T imag) : re(real), im(imag) {}

  FF_HOST_DEVICE Complex& operator+=(const Complex& o) {
    re += o.re;
    im += o.im;
    return *this;
  }
};

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator+(Complex<T> a, Complex<T> b) {
  return {a.re + b.re, a.im + b.im};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator-(Complex<T> a, Complex<T> b) {
  return {a.re - b.re, a.im - b.im};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator-(Complex<T> a) {
  return {-a.re, -a.im};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator*(Complex<T> a, Complex<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator*(T s, Complex<T> a) {
  return {s * a.re, s * a.im};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator*(Complex<T> a, T s) {
  return {s * a.re, s * a.im};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> conj(Complex<T> a) {
  return {a.re, -a.im};
}
/// |a|² (no square root).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T norm(Complex<T> a) {
  return a.re * a.re + a.im * a.im;
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> reciprocal(Complex<T> a) {
  const T n = norm(a);
  return {a.re / n, -a.im / n};
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> operator/(Complex<T> a, Complex<T> b) {
  return a * reciprocal(b);
}
/// i·a.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> times_i(Complex<T> a) {
  return {-a.im, a.re};
}
/// e^{iφ}.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Complex<T> unit_phasor(T phase) {
  return {std::cos(phase), std::sin(phase)};
}

}  // namespace fieldfuse::detail::optics
