// SPDX-License-Identifier: Apache-2.0
// The nanobind module fieldfuse._C: error translation, build facts and one bind_<family> per
// family. It never imports torch: tensors arrive through DLPack (Note [DLPack exchange API]) and
// streams as integers.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "fieldfuse/core.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace fieldfuse::python {
void bind_hash_grid(nb::module_& m);
void bind_kplanes(nb::module_& m);
void bind_mlp(nb::module_& m);
void bind_optics_inverse(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_optics_transfer(nb::module_& m);
void bind_project(nb::module_& m);
void bind_render(nb::module_& m);
void bind_tomo(nb::module_& m);
void bind_tomo_kplanes(nb::module_& m);
void bind_tomo_phantom(nb::module_& m);
void bind_tv(nb::module_& m);
}  // namespace fieldfuse::python

NB_MODULE(_C, m) {
  m.doc() = "fieldfuse C++ core (DLPack in, no libtorch)";

  // fieldfuse::Error carries the Python exception it should become (see ErrorKind).
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fieldfuse::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.kind()) {
        case fieldfuse::ErrorKind::Value:
          type = PyExc_ValueError;
          break;
        case fieldfuse::ErrorKind::Type:
          type = PyExc_TypeError;
          break;
        case fieldfuse::ErrorKind::NotImplemented:
          type = PyExc_NotImplementedError;
          break;
        case fieldfuse::ErrorKind::Runtime:
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });

  m.def("build_info", [] {
    const fieldfuse::BuildInfo info = fieldfuse::build_info();
    nb::dict d;
    d["version"] = info.version;
    d["cuda"] = info.cuda;
    d["cuda_architectures"] = info.cuda_architectures;
    d["openmp"] = info.openmp;
    d["openmp_max_threads"] = info.openmp_max_threads;
    return d;
  });
  m.def("cuda_device_count", &fieldfuse::cuda_device_count);
  m.def("has_dlpack_exchange_api", &fieldfuse::python::has_dlpack_exchange_api, nb::arg("cls"),
        "Whether tensors of type `cls` may be passed as they are, without DLPack capsules.");

  fieldfuse::python::bind_hash_grid(m);
  fieldfuse::python::bind_kplanes(m);
  fieldfuse::python::bind_mlp(m);
  fieldfuse::python::bind_optics_inverse(m);
  fieldfuse::python::bind_optim(m);
  fieldfuse::python::bind_optics_transfer(m);
  fieldfuse::python::bind_project(m);
  fieldfuse::python::bind_render(m);
  fieldfuse::python::bind_tomo(m);
  fieldfuse::python::bind_tomo_kplanes(m);
  fieldfuse::python::bind_tomo_phantom(m);
  fieldfuse::python::bind_tv(m);
}
