// SPDX-License-Identifier: Apache-2.0
// Writes the input files the CLI tests feed to `fieldfuse denoise`: good volumes and broken ones.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

#include "file_io.h"
#include "npy.h"
#include "phantom.h"
#include "tiff_test_writer.h"

namespace {

using fieldfuse::cli::Volume;

void write(const std::string& directory, const std::string& name, const Volume& volume) {
  fieldfuse::cli::write_npy_float32(directory + "/" + name, volume.shape(), volume.voxels.data());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_cli_inputs OUTPUT_DIRECTORY\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    // A small phantom with its noisy copy, as .npy and as a 16-bit TIFF stack.
    const Volume clean = fieldfuse::cli::shepp_logan_3d(24);
    Volume noisy = clean;
    fieldfuse::cli::add_gaussian_noise(noisy, 0.1, 11);
    write(dir, "clean_24.npy", clean);
    write(dir, "noisy_24.npy", noisy);
    fieldfuse::cli::testing::TestTiffLayout layout;
    layout.width = layout.height = layout.pages = 24;
    layout.bits_per_sample = 16;
    std::vector<double> counts;
    for (const float v : noisy.voxels)
      counts.push_back(std::round(std::clamp(1000.0 + 10000.0 * v, 0.0, 65535.0)));
    fieldfuse::cli::write_file_bytes(dir + "/noisy_24_u16.tif",
                                     fieldfuse::cli::testing::TestTiffWriter(layout).write(counts));

    // Broken inputs: a 2-D image, a volume with a NaN, a compressed TIFF, a file that is no .npy.
    Volume flat(1, 16, 16);
    fieldfuse::cli::write_npy_float32(dir + "/image_2d.npy", {16, 16}, flat.voxels.data());
    Volume with_nan(8, 8, 8);
    with_nan.voxels[1 * 64 + 2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
    write(dir, "with_nan.npy", with_nan);
    layout.width = layout.height = layout.pages = 4;
    layout.compression = 5;
    fieldfuse::cli::write_file_bytes(
        dir + "/compressed.tif",
        fieldfuse::cli::testing::TestTiffWriter(layout).write(std::vector<double>(64, 1.0)));
    fieldfuse::cli::write_file_text(dir + "/not_really.npy", "this is text, not an array\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_cli_inputs: %s\n", error.what());
    return 1;
  }
  return 0;
}
