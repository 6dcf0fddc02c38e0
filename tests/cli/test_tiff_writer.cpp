// SPDX-License-Identifier: Apache-2.0
// Tests of the float32 TIFF writer: a volume reads back page by page, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "scratch_dir.h"
#include "tiff.h"
#include "tiff_writer.h"

namespace fieldfuse::cli {
namespace {

class TiffWriterTest : public ScratchDirTest {
 protected:
  TiffWriterTest() : ScratchDirTest("fieldfuse_tiff_writer") {}
};

TEST_F(TiffWriterTest, VolumeReadsBackAsAFloatStack) {
  const std::int64_t depth = 3, height = 5, width = 7;
  std::vector<float> values(depth * height * width);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * i) * 1e3f;
  values[4] = -0.0f;
  values[9] = std::numeric_limits<float>::denorm_min();
  const std::vector<std::uint8_t> bytes = encode_tiff_float32(depth, height, width, values.data());
  ASSERT_GT(bytes.size(), values.size() * 4);
  EXPECT_EQ(bytes[0], 'I');  // little-endian classic TIFF
  EXPECT_EQ(bytes[2], 42);
  const std::string file = path("v.tif");
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const TiffStack stack = read_tiff(file);
  EXPECT_EQ(stack.pages, depth);
  EXPECT_EQ(stack.height, height);
  EXPECT_EQ(stack.width, width);
  EXPECT_EQ(stack.sample_format.kind, SampleKind::Float);
  EXPECT_EQ(stack.sample_format.bytes, 4);
  ASSERT_EQ(stack.values.size(), values.size());
  EXPECT_EQ(0, std::memcmp(stack.values.data(), values.data(), values.size() * 4));
}

}  // namespace
}  // namespace fieldfuse::cli
