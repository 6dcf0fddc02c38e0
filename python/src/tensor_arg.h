// SPDX-License-Identifier: Apache-2.0
// TensorArg: the bindings' tensor argument, read through DLPack's C exchange API where the
// tensor's type offers one (no capsule), else imported as a nanobind DLPack array.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fieldfuse/core.h"

namespace fieldfuse::python {

// Note [DLPack exchange API]
// A tensor crosses into the bindings in one of two ways. Objects whose type carries DLPack's C
// exchange API (`type(t).__dlpack_c_exchange_api__`, DLPack >= 1.2: PyTorch 2.10 and newer) are
// passed as they are, and the caster asks the producer to describe them in a DLTensor it fills
// in place: no capsule, no Python call, no allocation, and no stream synchronisation (the
// "no_sync" entry), as with `torch.utils.dlpack.to_dlpack`. Anything else (a capsule from
// `to_dlpack`, which the Python layer makes with older PyTorch, or any object with `__dlpack__`)
// goes through nanobind's ndarray import as before. Per conversion that is about 0.3 µs of host
// time saved, and a K-Planes forward + backward converts 16 tensors (bench/host_time.py, CPU).
// The described tensor is borrowed: the call's arguments keep the object alive, and the caster
// copies its metadata while it holds the GIL, since the bindings release the GIL before they
// read their arguments. A tensor the producer cannot describe (sparse, ...) becomes a TypeError
// of to_tensor_ref, naming the op and the argument, with the producer's reason.

/// A tensor argument: its metadata, copied when the argument is converted, and what keeps its
/// memory alive for the call (the Python object itself, or the imported ndarray).
class TensorArg {
 public:
  /// Loads `src` (a nanobind caster's from_python); false leaves the error to nanobind.
  bool load(nanobind::handle src, uint32_t flags, nanobind::detail::cleanup_list* cleanup) noexcept;

  void* data() const { return data_; }
  /// Bytes spanned by a contiguous tensor (the workspaces the bindings take).
  std::size_t nbytes() const;

  nanobind::dlpack::dtype dtype() const { return dtype_; }
  int32_t device_type() const { return device_.device_type; }
  int32_t device_id() const { return device_.device_id; }
  /// The tensor's number of dims (may exceed kMaxDims: then only the first kMaxDims sizes and
  /// strides are kept, and to_tensor_ref rejects it).
  int32_t ndim() const { return ndim_; }
  int64_t size(int32_t i) const { return sizes_[i]; }
  int64_t stride(int32_t i) const { return strides_[i]; }
  /// Why the tensor's producer could not describe it (empty: it did); to_tensor_ref raises it.
  const std::string& refused() const { return refused_; }

 private:
  bool copy_from(const nanobind::dlpack::dltensor& t);

  void* data_ = nullptr;
  nanobind::dlpack::device device_{};
  nanobind::dlpack::dtype dtype_{};
  int32_t ndim_ = 0;
  int64_t sizes_[kMaxDims] = {};
  int64_t strides_[kMaxDims] = {};
  nanobind::ndarray<> imported_;  ///< the owner when the object was imported, else empty
  std::string refused_;
};

/// Whether the bindings read objects of `type` through DLPack's C exchange API (Note [DLPack
/// exchange API]); the Python layer passes such tensors without making capsules.
bool has_dlpack_exchange_api(const nanobind::type_object& type);

}  // namespace fieldfuse::python

namespace nanobind::detail {

template <>
struct type_caster<fieldfuse::python::TensorArg> {
  // Named like nanobind's own ndarray, so the type stubs read as before.
  NB_TYPE_CASTER(fieldfuse::python::TensorArg, make_caster<ndarray<>>::Name)

  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    return value.load(src, flags, cleanup);
  }
};

}  // namespace nanobind::detail
