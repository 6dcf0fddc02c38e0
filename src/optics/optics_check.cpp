// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the optics fronts.
#include "optics/optics_check.h"

#include <cmath>
#include <string>

#include "core/check.h"

namespace fieldfuse::detail::optics {

DType complex_partner(DType real) {
  return real == DType::Float64 ? DType::Complex128 : DType::Complex64;
}

void check_real_dtype(const char* op, const char* arg, const TensorRef& t) {
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to be float32 or float64, but got " +
             dtype_name(t.dtype));
  }
}

namespace {

void check_setting(const char* op, const char* name, double value, bool allow_zero) {
  const bool ok = std::isfinite(value) && (allow_zero ? value >= 0.0 : value > 0.0);
  if (!ok) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + name + " to be finite and " + (allow_zero ? ">= 0" : "> 0") +
             ", but got " + number_text(value));
  }
}

}  // namespace

void check_microscope(const char* op, const MicroscopeSettings& s) {
  check_setting(op, "pixel_size", s.pixel_size, false);
  check_setting(op, "wavelength", s.wavelength, false);
  check_setting(op, "index_medium", s.index_medium, false);
  check_setting(op, "na_detection", s.na_detection, false);
  check_setting(op, "na_illumination", s.na_illumination, true);
  check_setting(op, "pupil_steepness", s.pupil_steepness, false);
  if (!(s.na_detection < s.index_medium)) {
    fail(ErrorKind::Value, op,
         "expected na_detection to be < index_medium (" + number_text(s.index_medium) +
             "), but got " + number_text(s.na_detection));
  }
}

}  // namespace fieldfuse::detail::optics
