// SPDX-License-Identifier: Apache-2.0
// Definitions of the shared argument checks (see check.h for the contract of each).
#include "core/check.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace fieldfuse::detail {

std::string number_text(double value) {  // see Note [no iostreams] in core.cpp
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

void fail(ErrorKind kind, const char* op, const std::string& message) {
  throw Error(kind, std::string(op) + "(): " + message);
}

void check_min_dims(const char* op, const char* arg, const TensorRef& t, int min_dims,
                    const char* layout) {
  if (t.ndim < min_dims || t.ndim > kMaxDims) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to have " +
             (t.ndim > kMaxDims ? "at most " + std::to_string(kMaxDims)
                                : "at least " + std::to_string(min_dims)) +
             " dims " + layout + ", but got shape " + t.shape_str());
  }
}

static bool is_16bit_float(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

void check_float_dtype(const char* op, const char* arg, const TensorRef& t) {
  const bool is_float = t.dtype == DType::Float32 || t.dtype == DType::Float64;
  if (!is_float && !is_16bit_float(t.dtype)) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) +
             " to have a floating dtype (float32 or float64; float16 or bfloat16 on CUDA), but "
             "got " +
             dtype_name(t.dtype));
  }
  if (is_16bit_float(t.dtype) && !t.device.is_cuda()) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented for ") + arg + " of dtype " + dtype_name(t.dtype) + " on " +
             t.device.str() + "; float16 and bfloat16 are supported on CUDA (use float32 on cpu)");
  }
}

void check_device_supported(const char* op, const char* arg, const TensorRef& t) {
#if !FIELDFUSE_WITH_CUDA
  if (t.device.is_cuda()) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented for ") + arg + " on " + t.device.str() +
             ": this build of fieldfuse was compiled without CUDA");
  }
#else
  (void)op;
  (void)arg;
  (void)t;
#endif
}

void check_same_device(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                       const TensorRef& ref) {
  if (t.device != ref.device) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " and " + ref_arg + " on the same device, but got " +
             arg + " on " + t.device.str() + " and " + ref_arg + " on " + ref.device.str());
  }
}

void check_dtype(const char* op, const char* arg, const TensorRef& t, DType dtype,
                 const char* why) {
  if (t.dtype != dtype) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) + " to have dtype " + dtype_name(dtype) + " (" + why +
             "), but got " + dtype_name(t.dtype));
  }
}

void check_same_shape(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                      const TensorRef& ref) {
  bool same = t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.sizes[i] == ref.sizes[i];
  if (!same) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to have the shape of " + ref_arg + " " +
             ref.shape_str() + ", but got " + t.shape_str());
  }
}

void check_numel(const char* op, const char* arg, const TensorRef& t, int64_t numel) {
  if (t.numel() != numel) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to have " + std::to_string(numel) + " element" +
             (numel == 1 ? "" : "s") + ", but got shape " + t.shape_str());
  }
}

void check_shape(const char* op, const char* arg, const TensorRef& t,
                 std::initializer_list<int64_t> expected, const char* layout) {
  bool matches = t.ndim == static_cast<int32_t>(expected.size());
  int i = 0;
  for (const int64_t size : expected) {
    if (!matches) break;
    matches = size < 0 || t.sizes[i] == size;
    ++i;
  }
  if (!matches) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to have shape " + layout + ", but got shape " +
             t.shape_str());
  }
}

void check_contiguous(const char* op, const char* arg, const TensorRef& t) {
  if (!t.is_contiguous()) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be contiguous (row-major), but got shape " +
             t.shape_str() + " with other strides");
  }
}

bool is_dense(const TensorRef& t) {
  // Sorting the dims of size > 1 by stride, each stride must be the product of the sizes before.
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.sizes[i] == 0) return true;
    if (t.sizes[i] == 1) continue;
    int j = n++;
    for (; j > 0 && strides[j - 1] > t.strides[i]; --j) {
      sizes[j] = sizes[j - 1];
      strides[j] = strides[j - 1];
    }
    sizes[j] = t.sizes[i];
    strides[j] = t.strides[i];
  }
  int64_t expected = 1;
  for (int i = 0; i < n; ++i) {
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

void check_dense(const char* op, const char* arg, const TensorRef& t) {
  if (!is_dense(t)) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) +
             " to be dense (a permutation of a contiguous layout, e.g. NCHW or channels-last), "
             "but got shape " +
             t.shape_str() + " with gaps or overlaps in its strides");
  }
}

namespace {

/// Whether t's element count and the bytes its strides reach fit in int64. numel() and the
/// drivers' offsets are int64 products: one that overflowed would turn a huge view into an empty
/// or negative one (and let a null pointer through the data check).
bool fits_int64(const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.sizes[i] == 0) return true;  // no element is ever addressed
  }
  const auto element = static_cast<int64_t>(dtype_size(t.dtype));
  int64_t elements = 1, reach = 0, bytes = 0;
  for (int i = 0; i < t.ndim; ++i) {
    int64_t extent = 0;
    if (t.strides[i] == INT64_MIN || __builtin_mul_overflow(elements, t.sizes[i], &elements) ||
        __builtin_mul_overflow(t.sizes[i] - 1, std::abs(t.strides[i]), &extent) ||
        __builtin_add_overflow(reach, extent, &reach)) {
      return false;
    }
  }
  return !__builtin_mul_overflow(elements, element, &bytes) &&
         !__builtin_add_overflow(reach, int64_t{1}, &reach) &&
         !__builtin_mul_overflow(reach, element, &bytes);
}

}  // namespace

void check_storage(const char* op, const char* arg, const TensorRef& t, bool needs_data) {
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to have 0 to " + std::to_string(kMaxDims) +
             " dims, but got " + std::to_string(t.ndim));
  }
  for (int i = 0; i < t.ndim; ++i) {
    if (t.sizes[i] < 0) {
      fail(ErrorKind::Value, op,
           "expected " + std::string(arg) + " to have non-negative sizes, but got shape " +
               t.shape_str());
    }
  }
  if (!fits_int64(t)) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to span fewer than 2^63 bytes, but got shape " +
             t.shape_str() + " (its element count or strides overflow 64 bits)");
  }
  if (needs_data && t.data == nullptr && t.numel() > 0) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to point at data, but got a null pointer for shape " +
             t.shape_str());
  }
}

namespace {

/// [first, last) byte addresses a non-empty view touches.
void byte_span(const TensorRef& t, std::uintptr_t& first, std::uintptr_t& last) {
  int64_t low = 0, high = 0;
  for (int i = 0; i < t.ndim; ++i) {
    const int64_t reach = (t.sizes[i] - 1) * t.strides[i];
    (reach < 0 ? low : high) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  const auto element = static_cast<int64_t>(dtype_size(t.dtype));
  first = base + low * element;
  last = base + (high + 1) * element;
}

}  // namespace

void check_disjoint(const char* op, const char* out_arg, const TensorRef& out, const char* in_arg,
                    const TensorRef& input) {
  if (out.numel() == 0 || input.numel() == 0 || out.device != input.device) return;
  std::uintptr_t out_first, out_last, in_first, in_last;
  byte_span(out, out_first, out_last);
  byte_span(input, in_first, in_last);
  if (out_first < in_last && in_first < out_last) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(out_arg) + " not to overlap " + in_arg +
             " in memory (it is written while " + in_arg +
             " is read), but the two share storage; pass a separate output tensor");
  }
}

void check_no_repeated_elements(const char* op, const char* arg, const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.sizes[i] > 1 && t.strides[i] == 0) {
      fail(ErrorKind::Value, op,
           "expected " + std::string(arg) + " to have distinct elements, but dim " +
               std::to_string(i) + " (size " + std::to_string(t.sizes[i]) +
               ") has stride 0 (an expanded view); pass a dense tensor");
    }
  }
}

void check_non_negative(const char* op, const char* arg, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be finite and >= 0, but got " + number_text(value));
  }
}

void check_workspace(const char* op, const void* workspace, std::size_t bytes,
                     std::size_t required) {
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
    fail(ErrorKind::Value, op,
         "expected a workspace aligned to " + std::to_string(kWorkspaceAlignment) +
             " bytes, but got an address " +
             std::to_string(reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment) +
             " bytes past that alignment");
  }
  if (bytes < required || (workspace == nullptr && required > 0)) {
    fail(ErrorKind::Value, op,
         "expected a workspace of at least " + std::to_string(required) + " bytes, but got " +
             (workspace == nullptr ? std::string("a null pointer")
                                   : std::to_string(bytes) + " bytes"));
  }
}

}  // namespace fieldfuse::detail
