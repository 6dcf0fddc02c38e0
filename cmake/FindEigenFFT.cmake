# SPDX-License-Identifier: Apache-2.0
# Finds Eigen's header-only FFT module (unsupported/Eigen/FFT; Debian: libeigen3-dev, MPL-2.0) and
# defines the INTERFACE imported target EigenFFT::EigenFFT. A plain find_path rather than Eigen's
# own package config, which (like kissfft's, see FindKissFFT.cmake) CMake 4 may refuse to load;
# CMAKE_PREFIX_PATH prefixes are searched too (<prefix>/include/eigen3), which is how a machine
# without the Debian package gets the headers.
find_path(EigenFFT_INCLUDE_DIR unsupported/Eigen/FFT PATH_SUFFIXES eigen3 PATHS /usr/include/eigen3)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(EigenFFT REQUIRED_VARS EigenFFT_INCLUDE_DIR)
mark_as_advanced(EigenFFT_INCLUDE_DIR)
if(EigenFFT_FOUND AND NOT TARGET EigenFFT::EigenFFT)
  add_library(EigenFFT::EigenFFT INTERFACE IMPORTED)
  set_target_properties(EigenFFT::EigenFFT PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${EigenFFT_INCLUDE_DIR}")
endif()
