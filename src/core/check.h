// SPDX-License-Identifier: Apache-2.0
// Argument validation shared by every op's front: each check throws fieldfuse::Error with a message
// that names the op, the argument, what was expected and what was given.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "fieldfuse/core.h"

namespace fieldfuse::detail {

/// A double as messages print it: shortest round-trip-ish form ("0.3", "1e-09", "nan").
std::string number_text(double value);

/// An optional argument left out: a default-constructed TensorRef (0 dims, no data).
inline bool is_absent(const TensorRef& t) { return t.ndim == 0 && t.data == nullptr; }

/// Throws `Error(kind, op + "(): " + message)`.
[[noreturn]] void fail(ErrorKind kind, const char* op, const std::string& message);

/// The tensor has at least `min_dims` dims; `layout` describes them for the message, e.g.
/// "[..., D, H, W]".
void check_min_dims(const char* op, const char* arg, const TensorRef& t, int min_dims,
                    const char* layout);

/// Floating dtype this build can compute on t's device: float32/float64 anywhere, float16/bfloat16
/// on CUDA only. Wrong kind of dtype -> Type; 16-bit on CPU -> NotImplemented.
void check_float_dtype(const char* op, const char* arg, const TensorRef& t);

/// The tensor's device is usable: CPU, or CUDA in a build with CUDA support.
void check_device_supported(const char* op, const char* arg, const TensorRef& t);

/// Both tensors live on the same device (the message names both).
void check_same_device(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                       const TensorRef& ref);

/// `t` has dtype `dtype`; `why` explains where that dtype comes from, e.g. "the dtype of vol".
void check_dtype(const char* op, const char* arg, const TensorRef& t, DType dtype, const char* why);

/// Same sizes as `ref` (strides may differ).
void check_same_shape(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                      const TensorRef& ref);

/// Exactly the shape `expected` (an entry of -1 matches any size); `layout` names the dims for the
/// message, e.g. "[B, 3]".
void check_shape(const char* op, const char* arg, const TensorRef& t,
                 std::initializer_list<int64_t> expected, const char* layout);

/// Row-major contiguous (an output the kernels write with row-major indexing).
void check_contiguous(const char* op, const char* arg, const TensorRef& t);

/// Dense: its elements exactly fill the span they cover (a permutation of a contiguous layout, such
/// as NCHW or channels-last), so it can be cleared as one block of memory.
bool is_dense(const TensorRef& t);
void check_dense(const char* op, const char* arg, const TensorRef& t);

/// Exactly `numel` elements, any shape.
void check_numel(const char* op, const char* arg, const TensorRef& t, int64_t numel);

/// Non-negative sizes and, when `needs_data`, a data pointer whenever there are elements.
void check_storage(const char* op, const char* arg, const TensorRef& t, bool needs_data = true);

/// An output that is written while `input` is read must not share memory with it. The test is on
/// the byte ranges the two views span, so interleaved but disjoint views are rejected too.
void check_disjoint(const char* op, const char* out_arg, const TensorRef& out, const char* in_arg,
                    const TensorRef& input);

/// An output whose elements are all distinct memory (no stride-0 dim of size > 1).
void check_no_repeated_elements(const char* op, const char* arg, const TensorRef& t);

/// A finite, non-negative scalar option.
void check_non_negative(const char* op, const char* arg, double value);

/// Workspaces hold float64 partial sums; any allocator's memory is aligned at least this well.
constexpr std::size_t kWorkspaceAlignment = 8;

/// A workspace of at least `required` bytes, aligned to kWorkspaceAlignment.
void check_workspace(const char* op, const void* workspace, std::size_t bytes,
                     std::size_t required);

}  // namespace fieldfuse::detail
