// SPDX-License-Identifier: Apache-2.0
// CPU driver of SIRT's elementwise steps (tomo_math.h formulas over OpenMP loops); each element is
// independent, and the residual is summed in fixed contiguous parts, so results do not depend on
// the thread count.
#include <cstdint>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "tomo/tomo_drivers.h"
#include "tomo/tomo_math.h"

namespace fieldfuse::detail::tomo {
namespace {

void fill(const Exec& e, void* data, int64_t count, double value) {
  dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = static_cast<T*>(data);
    parallel_for(0, count, 1, [&](int64_t i) { d[i] = static_cast<T>(value); });
  });
}

void invert(const Exec& e, void* data, int64_t count) {
  dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = static_cast<T*>(data);
    parallel_for(0, count, 1, [&](int64_t i) { d[i] = reciprocal_or_zero(d[i]); });
  });
}

void ratio(const Exec& e, const View3& b, void* stack, const void* inv_row) {
  dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* measured = static_cast<const T*>(b.data);
    const T* r = static_cast<const T*>(inv_row);
    T* s = static_cast<T*>(stack);
    const int64_t count = b.sizes[0] * b.sizes[1] * b.sizes[2];
    parallel_for(0, count, 1, [&](int64_t i) {
      s[i] = sirt_ratio(measured[strided_offset3(i, b.sizes, b.strides)], s[i], r[i]);
    });
  });
}

void update(const Exec& e, void* x, const void* inv_col, const void* back, int64_t count,
            double relaxation, bool positivity) {
  dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* v = static_cast<T*>(x);
    const T* c = static_cast<const T*>(inv_col);
    const T* a = static_cast<const T*>(back);
    const T lambda = static_cast<T>(relaxation);
    parallel_for(0, count, 1,
                 [&](int64_t i) { v[i] = sirt_update(v[i], c[i], a[i], lambda, positivity); });
  });
}

double residual(const Exec& e, const View3& b, const void* projected, double* partials) {
  const int64_t count = b.sizes[0] * b.sizes[1] * b.sizes[2];
  const int64_t per_part = (count + kResidualParts - 1) / kResidualParts;
  dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* measured = static_cast<const T*>(b.data);
    const T* ax = static_cast<const T*>(projected);
    parallel_for(0, kResidualParts, per_part, [&](int64_t p) {
      double sum = 0.0;
      const int64_t end = (p + 1) * per_part < count ? (p + 1) * per_part : count;
      for (int64_t i = p * per_part; i < end; ++i) {
        const T bi = measured[strided_offset3(i, b.sizes, b.strides)];
        sum += residual_term(bi, ax == nullptr ? T(0) : ax[i]);
      }
      partials[p] = sum;
    });
  });
  return add_parts(partials);
}

}  // namespace

SirtDriver sirt_driver_cpu() { return {fill, invert, ratio, update, residual}; }

}  // namespace fieldfuse::detail::tomo
