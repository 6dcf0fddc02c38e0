// SPDX-License-Identifier: Apache-2.0
// Writes the input files the CLI tests feed to `fieldfuse denoise` and `fieldfuse tomo`: good
// volumes and tilt series, broken ones, and the raw pages that make_tiff_inputs.sh turns into TIFFs
// with libtiff's own tools.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

#include "atomic_outputs.h"
#include "fieldfuse/tomo_phantom.h"
#include "mrc.h"
#include "npy.h"
#include "phantom.h"
#include "tiff_fixture_values.h"
#include "tomo_methods.h"

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

void write_mrc(const std::string& path, const Volume& volume, bool is_volume) {
  fieldfuse::cli::MrcWriteInfo info;
  info.is_volume = is_volume;
  info.voxel_size = {2.5, 2.5, 2.5};
  info.label = "fieldfuse test input";
  fieldfuse::cli::AtomicOutputs outputs;
  outputs.add(path, [&](fieldfuse::cli::OutputStream& out) {
    fieldfuse::cli::write_mrc_float32(out, volume.depth, volume.height, volume.width,
                                      volume.voxels.data(), info);
  });
  outputs.commit();
}

// The embedded phantom's tilt series at 24 pixels, tilts -60:60:6 about the image x axis,
// noiseless, in pixel lengths; `tilt_24.npy` as projected (tilt axis along x) and `tilt_24.mrc`
// with every image transposed (tilt axis along y, as IMOD's aligned stacks), plus the truth and the
// angles.
void write_tomo_inputs(const std::string& dir) {
  using namespace fieldfuse::cli;
  const std::int64_t n = 24;
  std::vector<double> angles;
  std::string tlt;
  for (int a = -60; a <= 60; a += 6) {
    angles.push_back(a);
    tlt += std::to_string(a) + ".00\n";
  }
  std::vector<double> rotations = tilt_rotations(angles);
  const auto count = static_cast<std::int64_t>(angles.size());
  Volume stack(count, n, n);
  fieldfuse::tomo_phantom_projections(
      fieldfuse::TensorRef::contiguous(rotations.data(), fieldfuse::DType::Float64, {},
                                       {count, 3, 3}),
      host_view(stack), 2);
  for (float& v : stack.voxels) v *= static_cast<float>(n) / 2.0f;
  write_npy(dir + "/tilt_24.npy", stack.shape(), stack.voxels);
  Volume transposed(stack.depth, n, n);
  for (std::int64_t m = 0; m < stack.depth; ++m)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        transposed.voxels[static_cast<std::size_t>((m * n + j) * n + i)] = stack.at(m, i, j);
  write_mrc(dir + "/tilt_24.mrc", transposed, false);
  Volume truth(n, n, n);
  fieldfuse::tomo_phantom_volume(host_view(truth), 3);
  write_npy(dir + "/truth_24.npy", truth.shape(), truth.voxels);
  write_bytes(dir + "/tilt_24.tlt", tlt.data(), tlt.size());
  const std::string bad_tlt = "-60\n-54\nminus 48\n";
  write_bytes(dir + "/bad.tlt", bad_tlt.data(), bad_tlt.size());
  // Broken stacks: a NaN, no projections, an MRC of complex values (mode 4).
  Volume with_nan(21, 8, 8);
  with_nan.voxels[5 * 64 + 6 * 8 + 7] = std::numeric_limits<float>::quiet_NaN();
  write_npy(dir + "/stack_nan.npy", with_nan.shape(), with_nan.voxels);
  write_npy(dir + "/stack_empty.npy", {0, 8, 8}, {});
  const std::vector<float> zeros(2 * 4 * 4 * 2, 0.0f);  // complex64: two floats per value
  MrcWriteInfo info;
  info.is_volume = false;
  std::vector<std::uint8_t> complex_file = encode_mrc_header(2, 4, 4, zeros.data(), info);
  complex_file[12] = 4;  // mode 4
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(zeros.data());
  complex_file.insert(complex_file.end(), bytes, bytes + zeros.size() * sizeof(float));
  write_bytes(dir + "/complex.mrc", complex_file.data(), complex_file.size());
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
    write_tomo_inputs(dir);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_cli_inputs: %s\n", error.what());
    return 1;
  }
  return 0;
}
