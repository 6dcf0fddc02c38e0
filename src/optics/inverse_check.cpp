// SPDX-License-Identifier: Apache-2.0
// Definitions of the optics fronts' shared checks, views and workspace carving (inverse_check.h).
#include "optics/inverse_check.h"

#include <cmath>
#include <string>

#include "core/check.h"

namespace fieldfuse::detail::optics {

namespace {

DType complex_partner(DType real) {
  return real == DType::Float64 ? DType::Complex128 : DType::Complex64;
}

void check_dims(const char* op, const char* arg, const TensorRef& t, int dims, const char* layout) {
  if (t.ndim != dims) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to have " + std::to_string(dims) + " dims " + layout +
             ", but got shape " + t.shape_str());
  }
}

}  // namespace

void check_real(const char* op, const char* arg, const TensorRef& t, int dims, const char* layout) {
  check_storage(op, arg, t);
  check_device_supported(op, arg, t);
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to be real float32 or float64, but got " +
             dtype_name(t.dtype));
  }
  check_dims(op, arg, t, dims, layout);
}

void check_same_real(const char* op, const char* arg, const TensorRef& t, DType real,
                     const char* real_arg) {
  if (t.dtype != real) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to have " + real_arg + "'s dtype " + dtype_name(real) +
             ", but got " + dtype_name(t.dtype));
  }
}

void check_complex(const char* op, const char* arg, const TensorRef& t, int dims,
                   const char* layout, DType real, const char* real_arg, const TensorRef& ref) {
  check_storage(op, arg, t);
  const DType expected = complex_partner(real);
  if (t.dtype != expected) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to be " + dtype_name(expected) +
             " (the complex partner of " + real_arg + "'s " + dtype_name(real) + "), but got " +
             dtype_name(t.dtype));
  }
  check_same_device(op, arg, t, real_arg, ref);
  check_dims(op, arg, t, dims, layout);
}

void check_output(const char* op, const char* arg, const TensorRef& t,
                  std::initializer_list<int64_t> shape, const char* layout, const char* ref_arg,
                  const TensorRef& ref) {
  check_storage(op, arg, t);
  check_same_device(op, arg, t, ref_arg, ref);
  check_shape(op, arg, t, shape, layout);
  check_contiguous(op, arg, t);
  check_disjoint(op, arg, t, ref_arg, ref);
}

void check_regularization(const char* op, double regularization) {
  if (!(std::isfinite(regularization) && regularization > 0.0)) {
    fail(ErrorKind::Value, op,
         "expected regularization to be finite and > 0, but got " + number_text(regularization));
  }
}

bool check_transfer_pair(const char* op, const TensorRef& data, const char* data_arg, int64_t B,
                         int64_t Z, int64_t Y, int64_t X, const TensorRef& absorption_tf,
                         const TensorRef& phase_tf) {
  const char* layout = "[B, Z, Y, X] or [1, Z, Y, X]";
  for (const auto& [arg, t] :
       {std::pair<const char*, const TensorRef&>{"absorption_tf", absorption_tf},
        {"phase_tf", phase_tf}}) {
    check_complex(op, arg, t, 4, layout, data.dtype, data_arg, data);
    const bool batch_ok = t.sizes[0] == B || t.sizes[0] == 1;
    if (!batch_ok || t.sizes[1] != Z || t.sizes[2] != Y || t.sizes[3] != X) {
      fail(ErrorKind::Value, op,
           std::string("expected ") + arg + " to have shape [" + std::to_string(B) + " or 1, " +
               std::to_string(Z) + ", " + std::to_string(Y) + ", " + std::to_string(X) + "] (" +
               data_arg + "'s [B, Z, Y, X]), but got shape " + t.shape_str());
    }
  }
  check_same_shape(op, "phase_tf", phase_tf, "absorption_tf", absorption_tf);
  return absorption_tf.sizes[0] == 1 && B > 1;
}

View view_of(const TensorRef& t, std::initializer_list<int> slots, bool broadcast_batch) {
  View v;
  if (is_absent(t)) return v;
  v.data = t.data;
  int d = 0;
  for (int slot : slots) {
    v.strides[slot] = broadcast_batch && slot == 0 && t.sizes[d] == 1 ? 0 : t.strides[d];
    ++d;
  }
  return v;
}

void* Carver::take(std::size_t bytes) {
  constexpr std::size_t kAlignment = 256;  // cuFFT's and coalescing's preference
  void* p = base_ == nullptr ? nullptr : base_ + at_;
  at_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return p;
}

std::size_t complex_size(DType real) { return real == DType::Float64 ? 16 : 8; }

}  // namespace fieldfuse::detail::optics
