# SPDX-License-Identifier: Apache-2.0
# Finds KissFFT's single-precision library (Debian: libkissfft-dev; BSD-3-Clause) and defines the
# imported target KissFFT::KissFFT. It looks for the header and the library directly rather than
# through kissfft's own package config: Debian 12's calls cmake_minimum_required with a version
# below 3.5, which CMake 4 (the one pip installs) refuses to load.
find_path(KissFFT_INCLUDE_DIR kiss_fftr.h PATH_SUFFIXES kissfft)
find_library(KissFFT_LIBRARY NAMES kissfft-float)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(KissFFT REQUIRED_VARS KissFFT_LIBRARY KissFFT_INCLUDE_DIR)
mark_as_advanced(KissFFT_INCLUDE_DIR KissFFT_LIBRARY)
if(KissFFT_FOUND AND NOT TARGET KissFFT::KissFFT)
  add_library(KissFFT::KissFFT UNKNOWN IMPORTED)
  # The float build's definitions, as kissfft's own config sets them.
  set_target_properties(KissFFT::KissFFT PROPERTIES
    IMPORTED_LOCATION "${KissFFT_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${KissFFT_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "kiss_fft_scalar=float;KISS_FFT_SHARED")
endif()
