// SPDX-License-Identifier: Apache-2.0
// Writes the input files the CLI tests feed to `fieldfuse denoise`: good volumes, broken ones, and
// the raw pages that make_tiff_inputs.sh turns into TIFFs with libtiff's own tools.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

#include "atomic_outputs.h"
#include "npy.h"
#include "phantom.h"
#include "tiff_fixture_values.h"

namespace {

using fieldfuse::cli::Volume;

void write_bytes(const std::string& path, const void* data, std::size_t size) {
  fieldfuse::cli::AtomicOutputs outputs;
  outputs.add(path, [&](fieldfuse::cli::OutputStream& out) { out.write(data, size); });
  outputs.commit();
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape,
               const std::vector<float>& values) {
  fieldfuse::cli::AtomicOutputs outputs;
  outputs.add(path, [&](fieldfuse::cli::OutputStream& out) {
    fieldfuse::cli::write_npy_float32(out, shape, values.data());
  });
  outputs.commit();
}

// A noisy copy of `clean` (Gaussian, sigma 0.1 on the 0..1 scale).
Volume noisy_copy(const Volume& clean, std::uint64_t seed) {
  Volume noisy = clean;
  fieldfuse::cli::add_gaussian_noise(noisy, 0.1, seed);
  return noisy;
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
    // A small phantom with its noisy copy, as .npy and as raw uint16 pages for TIFF stacks.
    const Volume clean = fieldfuse::cli::shepp_logan_3d(24);
    const Volume noisy = noisy_copy(clean, 11);
    write_npy(dir + "/clean_24.npy", clean.shape(), clean.voxels);
    write_npy(dir + "/noisy_24.npy", noisy.shape(), noisy.voxels);
    std::vector<std::uint16_t> counts;
    for (const float v : noisy.voxels) {
      counts.push_back(
          static_cast<std::uint16_t>(std::round(std::clamp(1000.0 + 10000.0 * v, 0.0, 65535.0))));
    }
    for (std::int64_t page = 0; page < 24; ++page) {
      write_bytes(dir + "/noisy_24_u16_page" + std::to_string(page) + ".raw",
                  counts.data() + page * 24 * 24, 24 * 24 * sizeof(std::uint16_t));
    }

    // 2-D images as [1, H, W] and [H, W, 1] volumes: the central slice of a 64^3 phantom.
    const Volume head = fieldfuse::cli::shepp_logan_3d(64);
    Volume slice(1, 64, 64);
    std::copy(head.voxels.begin() + 32 * 64 * 64, head.voxels.begin() + 33 * 64 * 64,
              slice.voxels.begin());
    const Volume noisy_slice = noisy_copy(slice, 12);
    write_npy(dir + "/clean_1x64x64.npy", {1, 64, 64}, slice.voxels);
    write_npy(dir + "/noisy_1x64x64.npy", {1, 64, 64}, noisy_slice.voxels);
    write_npy(dir + "/clean_64x64x1.npy", {64, 64, 1}, slice.voxels);
    write_npy(dir + "/noisy_64x64x1.npy", {64, 64, 1}, noisy_slice.voxels);

    // Raw pages of every sample type for the TIFF reader's tests (tiff_fixture_values.h).
    using fieldfuse::cli::testing::tiff_fixture_page_bytes;
    for (const auto& type : fieldfuse::cli::testing::tiff_sample_types()) {
      for (std::int64_t page = 0; page < fieldfuse::cli::testing::kTiffPages; ++page) {
        const std::vector<std::uint8_t> bytes = tiff_fixture_page_bytes(type, page);
        write_bytes(dir + "/ramp_" + type.raw2tiff_name + "_page" + std::to_string(page) + ".raw",
                    bytes.data(), bytes.size());
      }
    }

    // Broken inputs: a 2-D array, a volume with a NaN, a file that is no .npy.
    write_npy(dir + "/image_2d.npy", {16, 16}, std::vector<float>(256, 0.0f));
    Volume with_nan(8, 8, 8);
    with_nan.voxels[1 * 64 + 2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
    write_npy(dir + "/with_nan.npy", with_nan.shape(), with_nan.voxels);
    const std::string text = "this is text, not an array\n";
    write_bytes(dir + "/not_really.npy", text.data(), text.size());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_cli_inputs: %s\n", error.what());
    return 1;
  }
  return 0;
}
