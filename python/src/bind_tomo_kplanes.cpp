// SPDX-License-Identifier: Apache-2.0
// Python binding of the K-Planes tomography reconstruction: `_C.kplanes_reconstruct` trains a
// KPlanesReconstruction on a stack, writes the exported volume and returns a report dict. The
// GIL is released while it trains; a progress callback re-acquires it.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "fieldfuse/tomo_kplanes.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

constexpr const char* kOp = "kplanes_reconstruct";

[[noreturn]] void bad_option(ErrorKind kind, const std::string& message) {
  throw Error(kind, std::string(kOp) + "(): " + message);
}

template <class V>
V option_as(const std::string& name, nb::handle value, const char* expected) {
  // bool is an int in Python: an int option refuses it, as a float option refuses both.
  const bool is_bool = nb::isinstance<nb::bool_>(value);
  if constexpr (std::is_same_v<V, bool>) {
    if (is_bool) return nb::cast<bool>(value);
  } else if constexpr (std::is_integral_v<V>) {
    if (!is_bool && nb::isinstance<nb::int_>(value)) return nb::cast<V>(value);
  } else if constexpr (std::is_floating_point_v<V>) {
    if (!is_bool && (nb::isinstance<nb::float_>(value) || nb::isinstance<nb::int_>(value))) {
      return nb::cast<V>(value);
    }
  } else {
    if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  }
  bad_option(ErrorKind::Type, "expected options[\"" + name + "\"] to be " + expected +
                                  ", but got " + nb::cast<std::string>(nb::str(value.type())));
}

/// The options dict (keys are KPlanesReconOptions' field names) over the defaults.
KPlanesReconOptions parse_options(const nb::dict& given) {
  KPlanesReconOptions o;
  for (auto [key, value] : given) {
    if (!nb::isinstance<nb::str>(key))
      bad_option(ErrorKind::Type, "expected option names to be str");
    const std::string name = nb::cast<std::string>(key);
    if (name == "num_tilts")
      o.num_tilts = option_as<int>(name, value, "an int");
    else if (name == "channels")
      o.channels = option_as<int>(name, value, "an int");
    else if (name == "resolutions") {
      o.resolutions.clear();
      if (!nb::isinstance<nb::list>(value) && !nb::isinstance<nb::tuple>(value)) {
        bad_option(ErrorKind::Type, "expected options[\"resolutions\"] to be a list of ints");
      }
      for (nb::handle r : value)
        o.resolutions.push_back(option_as<int64_t>(name, r, "a list of ints"));
    } else if (name == "decoder")
      o.decoder = option_as<std::string>(name, value, "a str");
    else if (name == "hidden")
      o.hidden = option_as<int>(name, value, "an int");
    else if (name == "layers")
      o.layers = option_as<int>(name, value, "an int");
    else if (name == "rays")
      o.rays = option_as<int64_t>(name, value, "an int");
    else if (name == "ds")
      o.ds = option_as<double>(name, value, "a float");
    else if (name == "tv_volume")
      o.tv_volume = option_as<double>(name, value, "a float");
    else if (name == "tv_points")
      o.tv_points = option_as<int64_t>(name, value, "an int");
    else if (name == "tv_plane")
      o.tv_plane = option_as<double>(name, value, "a float");
    else if (name == "sparsity")
      o.sparsity = option_as<double>(name, value, "a float");
    else if (name == "lr_planes")
      o.lr_planes = option_as<double>(name, value, "a float");
    else if (name == "lr_decoder")
      o.lr_decoder = option_as<double>(name, value, "a float");
    else if (name == "lr_rotations")
      o.lr_rotations = option_as<double>(name, value, "a float");
    else if (name == "lr_pose")
      o.lr_pose = option_as<double>(name, value, "a float");
    else if (name == "cosine_decay")
      o.cosine_decay = option_as<bool>(name, value, "a bool");
    else if (name == "max_grad_norm")
      o.max_grad_norm = option_as<double>(name, value, "a float");
    else if (name == "pose_refinement")
      o.pose_refinement = option_as<bool>(name, value, "a bool");
    else if (name == "iterations")
      o.iterations = option_as<int64_t>(name, value, "an int");
    else if (name == "epochs")
      o.epochs = option_as<double>(name, value, "a float");
    else if (name == "seed")
      o.seed = option_as<uint64_t>(name, value, "an int");
    else if (name == "deterministic")
      o.deterministic = option_as<bool>(name, value, "a bool");
    else if (name == "cuda_graph")
      o.cuda_graph = option_as<bool>(name, value, "a bool");
    else if (name == "dtype") {
      const std::string d = option_as<std::string>(name, value, "\"float32\" or \"float64\"");
      if (d == "float32")
        o.dtype = DType::Float32;
      else if (d == "float64")
        o.dtype = DType::Float64;
      else
        bad_option(
            ErrorKind::Value,
            "expected options[\"dtype\"] to be \"float32\" or \"float64\", but got \"" + d + "\"");
    } else {
      bad_option(ErrorKind::Value, "unknown option \"" + name + "\"");
    }
  }
  return o;
}

using Progress = std::function<void(int64_t, double)>;

nb::dict reconstruct(const TensorArg& stack_arg, const std::vector<double>& angles,
                     const TensorArg& volume_arg, const nb::dict& options_dict,
                     std::uintptr_t stream_handle, const std::optional<Progress>& progress,
                     int64_t log_every, int64_t max_steps, int64_t chunk_points,
                     const std::optional<std::string>& resume_from,
                     const std::optional<std::string>& checkpoint) {
  const TensorRef stack = to_tensor_ref(stack_arg, kOp, "stack"),
                  volume = to_tensor_ref(volume_arg, kOp, "volume");
  const KPlanesReconOptions options = parse_options(options_dict);
  if (log_every < 0) {
    bad_option(ErrorKind::Value,
               "expected log_every to be >= 0, but got " + std::to_string(log_every));
  }
  std::vector<int64_t> logged_steps;
  std::vector<double> losses;
  double seconds = 0.0;
  int64_t steps = 0;
  nb::dict report;
  {
    nb::gil_scoped_release release;
    KPlanesReconstruction recon(stack, angles.data(), static_cast<int64_t>(angles.size()), options,
                                volume.device, to_stream(stream_handle));
    if (resume_from) recon.load_checkpoint(*resume_from);
    const int64_t start = recon.steps_done();
    const int64_t stop =
        max_steps >= 0 ? std::min(recon.iterations(), start + max_steps) : recon.iterations();
    const auto begin = std::chrono::steady_clock::now();
    for (int64_t i = start; i < stop; ++i) {
      recon.step();
      const int64_t done = i + 1;
      const bool log = log_every > 0 && (done % log_every == 0 || done == stop);
      if (log) {
        // Reading the loss synchronises the stream: log_every = 0 trains with no sync at all.
        const double loss = recon.loss();
        logged_steps.push_back(done);
        losses.push_back(loss);
        if (progress) {
          nb::gil_scoped_acquire acquire;
          (*progress)(done, loss);
        }
      }
    }
    steps = stop - start;
    const double final_loss = steps > 0 ? recon.loss() : 0.0;  // waits for the last step
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    recon.export_volume(volume, chunk_points);
    if (checkpoint) recon.save_checkpoint(*checkpoint);
    const std::vector<KPlanesPose> poses = recon.poses();
    nb::gil_scoped_acquire acquire;
    nb::dict pose_lists;
    std::vector<double> tilt, z1, z3, su, sv;
    for (const KPlanesPose& p : poses) {
      tilt.push_back(p.tilt);
      z1.push_back(p.z1);
      z3.push_back(p.z3);
      su.push_back(p.shift_u);
      sv.push_back(p.shift_v);
    }
    pose_lists["tilt"] = tilt;
    pose_lists["z1"] = z1;
    pose_lists["z3"] = z3;
    pose_lists["shift_u"] = su;
    pose_lists["shift_v"] = sv;
    nb::dict described;
    for (const auto& [name, value] : describe(recon.options())) described[name.c_str()] = value;
    report["method"] = "kplanes";
    report["options"] = described;
    report["iterations"] = recon.iterations();
    report["steps_run"] = steps;
    report["logged_steps"] = logged_steps;
    report["losses"] = losses;
    report["final_loss"] = final_loss;
    report["seconds"] = seconds;
    report["seconds_per_step"] = steps > 0 ? seconds / double(steps) : 0.0;
    report["normalisation"] = recon.normalisation();
    report["reference_projection"] = recon.reference_projection();
    report["poses"] = pose_lists;
  }
  return report;
}

/// "cpu" or "cuda:N" as a Device (the Python layer passes str(torch.device)).
Device parse_device(const std::string& device) {
  Device where;
  if (device.rfind("cuda:", 0) == 0) {
    where.type = DeviceType::CUDA;
    where.index = std::stoi(device.substr(5));
  } else if (device != "cpu") {
    bad_option(ErrorKind::Value,
               "expected device to be \"cpu\" or \"cuda:N\", but got \"" + device + "\"");
  }
  return where;
}

}  // namespace

void bind_tomo_kplanes(nb::module_& m) {
  nb::class_<KPlanesReconstruction>(m, "KPlanesReconstruction",
                                    "A K-Planes tomography reconstruction driven step by step "
                                    "(docs/tomo_kplanes.md).")
      .def(
          "__init__",
          [](KPlanesReconstruction* self, const TensorArg& stack_arg,
             const std::vector<double>& angles, const nb::dict& options_dict,
             const std::string& device, std::uintptr_t stream) {
            const TensorRef stack = to_tensor_ref(stack_arg, kOp, "stack");
            const KPlanesReconOptions options = parse_options(options_dict);
            const Device where = parse_device(device);
            nb::gil_scoped_release release;
            new (self)
                KPlanesReconstruction(stack, angles.data(), static_cast<int64_t>(angles.size()),
                                      options, where, to_stream(stream));
          },
          "stack"_a.noconvert(), "angles"_a, "options"_a, "device"_a, "stream"_a,
          "Trains on `stack [n, H, W]` with tilt `angles` (degrees) on `device` (\"cpu\" or "
          "\"cuda:N\"), CUDA work on `stream`; `options` as for kplanes_reconstruct.")
      .def("step", &KPlanesReconstruction::step, nb::call_guard<nb::gil_scoped_release>(),
           "One training iteration, enqueued (no synchronisation on CUDA).")
      .def("loss", &KPlanesReconstruction::loss, nb::call_guard<nb::gil_scoped_release>(),
           "The last step's loss (synchronises).")
      .def("steps_done", &KPlanesReconstruction::steps_done,
           nb::call_guard<nb::gil_scoped_release>())
      .def("iterations", &KPlanesReconstruction::iterations)
      .def("normalisation", &KPlanesReconstruction::normalisation)
      .def(
          "export_volume",
          [](KPlanesReconstruction& self, const TensorArg& volume, int64_t chunk_points) {
            const TensorRef v = to_tensor_ref(volume, kOp, "volume");
            nb::gil_scoped_release release;
            self.export_volume(v, chunk_points);
          },
          "volume"_a.noconvert(), "chunk_points"_a = int64_t(1) << 18)
      .def("save_checkpoint", &KPlanesReconstruction::save_checkpoint, "path"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("load_checkpoint", &KPlanesReconstruction::load_checkpoint, "path"_a,
           nb::call_guard<nb::gil_scoped_release>());

  m.def("kplanes_reconstruct", &reconstruct, "stack"_a.noconvert(), "angles"_a,
        "volume"_a.noconvert(), "options"_a, "stream"_a, "progress"_a.none() = nb::none(),
        "log_every"_a = 1, "max_steps"_a = -1, "chunk_points"_a = int64_t(1) << 18,
        "resume_from"_a.none() = nb::none(), "checkpoint"_a.none() = nb::none(),
        "K-Planes tomography reconstruction (docs/tomo_kplanes.md): trains on `stack [n, H, W]` "
        "with tilt `angles` (degrees), writes the density into `volume [D, H, W]` (whose device "
        "is the training device) and returns a report dict (losses, timings, poses). Trains "
        "from step 0 or the `resume_from` checkpoint up to the options' iteration count (at "
        "most `max_steps` steps when >= 0), logging the loss every `log_every` steps (0: only "
        "at the end, no per-step synchronisation), then saves `checkpoint` if given.");
}

}  // namespace fieldfuse::python
