# SPDX-License-Identifier: Apache-2.0
# Sourced by the GPU scripts: where the GPU machine lacks KissFFT and Eigen, a folder .deps/ holding
# Debian's libkissfft-dev, libkissfft-float131 and libeigen3-dev unpacked (`dpkg -x`, carried with
# the device call) serves as a prefix for CMake and for the loader.
if [ -d .deps/usr ]; then
  export CMAKE_PREFIX_PATH="$PWD/.deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
