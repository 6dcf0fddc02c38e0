// SPDX-License-Identifier: Apache-2.0
// Loading a TensorArg: DLPack's C exchange API, looked up once per type, else nanobind's import.
#include "tensor_arg.h"

#include <algorithm>
#include <string>
#include <utility>

namespace nb = nanobind;

namespace fieldfuse::python {
namespace {

/// DLPack's `DLPackExchangeAPI` (dlpack.h, DLPack 1.2 and later), as far as it is read here: the
/// stable header (version, link to an older API), then the producer's entry points in ABI order.
struct ExchangeApi {
  uint32_t major_version;
  uint32_t minor_version;
  const void* prev_api;
  const void* managed_tensor_allocator;
  const void* managed_tensor_from_py_object_no_sync;
  const void* managed_tensor_to_py_object_no_sync;
  /// Describes `py_object` in `out` (borrowed shape and strides); 0, or -1 with a Python error.
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  const void* current_work_stream;
};

/// The DLPack major version whose layout ExchangeApi follows; a producer of another major
/// version is read like any other object.
constexpr uint32_t kExchangeMajorVersion = 1;

const ExchangeApi* lookup_exchange_api(PyObject* type) noexcept {
  PyObject* capsule = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  // The struct is static in the producer (DLPack asks for that), so the pointer outlives the
  // capsule reference dropped here.
  const auto* api =
      static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  Py_DECREF(capsule);
  if (api == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (api->major_version != kExchangeMajorVersion ||
      api->dltensor_from_py_object_no_sync == nullptr) {
    return nullptr;
  }
  return api;
}

/// The exchange API of `type` (null: none). The same few types come back on every call
/// (torch.Tensor, nn.Parameter, capsules), so a small cache answers after the first; it holds a
/// reference to each type it names, so no other type can take a cached type's address. Callers
/// hold the GIL (nanobind converts arguments under it).
const ExchangeApi* exchange_api(PyObject* type) noexcept {
  struct Entry {
    PyObject* type = nullptr;
    const ExchangeApi* api = nullptr;
  };
  constexpr std::size_t kEntries = 8;
  static Entry cache[kEntries];
  static std::size_t next = 0;
  for (const Entry& entry : cache) {
    if (entry.type == type) return entry.api;
  }
  const ExchangeApi* api = lookup_exchange_api(type);
  Entry& slot = cache[next++ % kEntries];
  Py_INCREF(type);
  PyObject* evicted = std::exchange(slot.type, type);
  slot.api = api;
  Py_XDECREF(evicted);
  return api;
}

/// The first line of the pending Python error's message (cleared), for a message of ours: PyTorch
/// appends a C++ backtrace to its own.
std::string python_error_text() noexcept {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "an unknown error";
  if (PyObject* str = value != nullptr ? PyObject_Str(value) : nullptr) {
    Py_ssize_t size = 0;
    if (const char* utf8 = PyUnicode_AsUTF8AndSize(str, &size)) {
      text.assign(utf8, static_cast<std::size_t>(size));
      text.erase(std::min(text.find('\n'), text.size()));
    }
    Py_DECREF(str);
  }
  PyErr_Clear();  // from PyObject_Str or the conversion, if they failed
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

}  // namespace

bool TensorArg::copy_from(const nb::dlpack::dltensor& t) {
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) return false;
  data_ = static_cast<char*>(t.data) + t.byte_offset;
  device_ = t.device;
  dtype_ = t.dtype;
  ndim_ = t.ndim;
  // More dims than a TensorRef holds: kept for to_tensor_ref's message, which names the op.
  const int32_t kept = std::min<int32_t>(ndim_, kMaxDims);
  for (int32_t i = 0; i < kept; ++i) sizes_[i] = t.shape[i];
  if (t.strides != nullptr) {
    for (int32_t i = 0; i < kept; ++i) strides_[i] = t.strides[i];
  } else if (ndim_ <= kMaxDims) {  // DLPack's null strides: compact row-major
    int64_t stride = 1;
    for (int32_t i = ndim_ - 1; i >= 0; --i) {
      strides_[i] = stride;
      stride *= sizes_[i];
    }
  }
  return true;
}

bool TensorArg::load(nb::handle src, uint32_t flags, nb::detail::cleanup_list* cleanup) noexcept {
  PyObject* object = src.ptr();
  if (const ExchangeApi* api = exchange_api(reinterpret_cast<PyObject*>(Py_TYPE(object)))) {
    nb::dlpack::dltensor t;
    if (api->dltensor_from_py_object_no_sync(object, &t) == 0) return copy_from(t);
    // A tensor its producer cannot describe (sparse, a dead functorch wrapper, ...): no other
    // way would (`__dlpack__` shares the limits). Kept for to_tensor_ref, whose message names
    // the op and the argument, which nanobind's "incompatible function arguments" would not.
    refused_ = python_error_text();
    return true;
  }
  nb::detail::make_caster<nb::ndarray<>> importer;
  if (!importer.from_python(src, flags, cleanup)) return false;
  imported_ = std::move(importer.value);
  nb::dlpack::dltensor t;
  t.data = imported_.data_handle();
  t.byte_offset = imported_.byte_offset();
  t.device = {imported_.device_type(), imported_.device_id()};
  t.ndim = static_cast<int32_t>(imported_.ndim());
  t.dtype = imported_.dtype();
  t.shape = const_cast<int64_t*>(imported_.shape_ptr());
  t.strides = const_cast<int64_t*>(imported_.stride_ptr());
  return copy_from(t);
}

std::size_t TensorArg::nbytes() const {
  std::size_t elements = 1;
  for (int32_t i = 0; i < std::min<int32_t>(ndim_, kMaxDims); ++i) {
    elements *= static_cast<std::size_t>(sizes_[i]);
  }
  return (static_cast<std::size_t>(dtype_.bits) * elements + 7) / 8;
}

bool has_dlpack_exchange_api(const nb::type_object& type) {
  return exchange_api(type.ptr()) != nullptr;
}

}  // namespace fieldfuse::python
