// SPDX-License-Identifier: Apache-2.0
// Python bindings of the optim family: adam_step over parallel lists of tensors (one entry per
// parameter tensor), the GIL released while it runs. The C++ front validates everything but the
// list lengths, which only this layer sees.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fieldfuse/optim.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using Arrays = std::vector<Array>;
using OptionalArray = std::optional<Array>;

constexpr const char* kOp = "adam_step";

/// A list argument with one entry per parameter tensor.
void check_length(const char* arg, std::size_t size, std::size_t count) {
  if (size != count) {
    throw Error(ErrorKind::Value, std::string(kOp) + "(): expected " + arg + " to have " +
                                      std::to_string(count) +
                                      " entries (one per params), but got " + std::to_string(size));
  }
}

}  // namespace

void bind_optim(nb::module_& m) {
  m.def(
      "adam_workspace_size",
      [](const Arrays& params) {
        std::vector<AdamParam> entries(params.size());
        for (std::size_t i = 0; i < params.size(); ++i)
          entries[i].param = to_tensor_ref(params[i], kOp, "params", i);
        return adam_workspace_size(entries.data(), static_cast<int>(entries.size()));
      },
      "params"_a.noconvert());
  m.def(
      "adam_step",
      [](const Arrays& params, const Arrays& grads, const Arrays& exp_avgs,
         const Arrays& exp_avg_sqs, const std::vector<double>& lrs, double beta1, double beta2,
         double eps, double weight_decay, double max_grad_norm, int64_t total_steps,
         const Array& step, const OptionalArray& grad_norm_out, const Array& workspace,
         std::uintptr_t stream) {
        const std::size_t n = params.size();
        check_length("grads", grads.size(), n);
        check_length("exp_avgs", exp_avgs.size(), n);
        check_length("exp_avg_sqs", exp_avg_sqs.size(), n);
        check_length("lrs", lrs.size(), n);
        std::vector<AdamParam> entries(n);
        for (std::size_t i = 0; i < n; ++i) {
          entries[i].param = to_tensor_ref(params[i], kOp, "params", i);
          entries[i].grad = to_tensor_ref(grads[i], kOp, "grads", i);
          entries[i].exp_avg = to_tensor_ref(exp_avgs[i], kOp, "exp_avgs", i);
          entries[i].exp_avg_sq = to_tensor_ref(exp_avg_sqs[i], kOp, "exp_avg_sqs", i);
          entries[i].lr = lrs[i];
        }
        AdamOptions options;
        options.beta1 = beta1;
        options.beta2 = beta2;
        options.eps = eps;
        options.weight_decay = weight_decay;
        options.max_grad_norm = max_grad_norm;
        options.total_steps = total_steps;
        const TensorRef s = to_tensor_ref(step, kOp, "step");
        const TensorRef norm =
            grad_norm_out ? to_tensor_ref(*grad_norm_out, kOp, "grad_norm_out") : TensorRef{};
        nb::gil_scoped_release release;
        adam_step(entries.data(), static_cast<int>(n), options, s, norm, workspace.data(),
                  workspace.nbytes(), to_stream(stream));
      },
      "params"_a.noconvert(), "grads"_a.noconvert(), "exp_avgs"_a.noconvert(),
      "exp_avg_sqs"_a.noconvert(), "lrs"_a, "beta1"_a, "beta2"_a, "eps"_a, "weight_decay"_a,
      "max_grad_norm"_a, "total_steps"_a, "step"_a.noconvert(),
      "grad_norm_out"_a.noconvert().none(), "workspace"_a.noconvert(), "stream"_a);
}

}  // namespace fieldfuse::python
