// SPDX-License-Identifier: Apache-2.0
// Layout copies (src/core/layout_copy.h): every layout, edge size and dtype against naive loops,
// the float32 -> 16-bit rounding, argument errors, and (on a GPU) the CUDA kernels against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/layout_copy.h"
#include "core/layout_copy_math.h"
#include "tv_test_util.h"  // expect_error

#if FIELDFUSE_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace fftest {
namespace {

using fieldfuse::Device;
using fieldfuse::DeviceType;
using fieldfuse::DType;
using fieldfuse::ErrorKind;
using fieldfuse::Stream;
using fieldfuse::TensorRef;
using fieldfuse::detail::channels_last_bytes;
using fieldfuse::detail::copy_from_channels_last;
using fieldfuse::detail::copy_to_channels_last;
using fieldfuse::detail::layout::float_to_bfloat16_bits;
using fieldfuse::detail::layout::float_to_half_bits;

using Bytes = std::vector<unsigned char>;

struct Shape4 {
  int64_t p, c, h, w;
  int64_t numel() const { return p * c * h * w; }
};

/// How a [P, C, H, W] view sits in its storage.
enum class Layout {
  kNCHW,
  kChannelsLast,
  kHeightInnermost,     ///< storage [P, C, W, H]: a permutation that is neither
  kSlicedNCHW,          ///< storage [P+1, C+2, H+1, 2W+1], view from (1, 2, 1, 1), every 2nd x
  kSlicedChannelsLast,  ///< storage [P, H, W, 2C+1], every 2nd channel from 1
  kExpandedChannels,    ///< storage [P, 1, H, W] expanded along C (sources only)
  kExpandedWidth,       ///< storage [P, C, H, 1] expanded along W (sources only)
};
constexpr Layout kDestinationLayouts[] = {Layout::kNCHW, Layout::kChannelsLast,
                                          Layout::kHeightInnermost, Layout::kSlicedNCHW,
                                          Layout::kSlicedChannelsLast};
constexpr Layout kSourceLayouts[] = {
    Layout::kNCHW,         Layout::kChannelsLast,       Layout::kHeightInnermost,
    Layout::kSlicedNCHW,   Layout::kSlicedChannelsLast, Layout::kExpandedChannels,
    Layout::kExpandedWidth};
constexpr DType kAllDTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64,
                                DType::Int32,   DType::Int64,    DType::UInt8,   DType::Bool};

/// Sizes 0 and 1 on every axis, odd sizes, C = 48 and C > 32 that is not a multiple of 32.
const std::vector<Shape4> kShapes = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 48, 5, 3}, {1, 5, 1, 9},
                                     {4, 1, 3, 5}, {2, 8, 7, 1}, {2, 33, 3, 5}, {0, 3, 4, 5},
                                     {2, 0, 4, 5}, {2, 3, 0, 5}, {2, 3, 4, 0},  {3, 48, 17, 19}};

/// A strided view over its own host storage of random bytes.
struct View {
  Bytes storage;
  TensorRef ref;  ///< points into storage, so a View moves but never copies
  std::size_t esize = 0;

  View() = default;
  View(View&&) = default;
  View& operator=(View&&) = default;
  View(const View&) = delete;

  int64_t offset(int64_t p, int64_t c, int64_t y, int64_t x) const {
    const char* base = static_cast<const char*>(ref.data);
    const char* start = reinterpret_cast<const char*>(storage.data());
    return (base - start) / static_cast<int64_t>(esize) + p * ref.strides[0] + c * ref.strides[1] +
           y * ref.strides[2] + x * ref.strides[3];
  }
};

std::string name(Layout l) {
  const char* names[] = {"nchw",          "channels_last",        "height_innermost",
                         "sliced_nchw",   "sliced_channels_last", "expanded_channels",
                         "expanded_width"};
  return names[static_cast<int>(l)];
}

Bytes random_bytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& v : b) v = static_cast<unsigned char>(rng() & 0xffu);
  return b;
}

View make_view(const Shape4& s, Layout layout, DType dtype, uint32_t seed) {
  const int64_t P = s.p, C = s.c, H = s.h, W = s.w;
  int64_t strides[4] = {0, 0, 0, 0}, start = 0, storage_elems = 0;
  auto set = [&](int64_t sp, int64_t sc, int64_t sy, int64_t sx) {
    strides[0] = sp, strides[1] = sc, strides[2] = sy, strides[3] = sx;
  };
  switch (layout) {
    case Layout::kNCHW:
      set(C * H * W, H * W, W, 1);
      storage_elems = P * C * H * W;
      break;
    case Layout::kChannelsLast:
      set(H * W * C, 1, W * C, C);
      storage_elems = P * C * H * W;
      break;
    case Layout::kHeightInnermost:
      set(C * W * H, W * H, 1, H);
      storage_elems = P * C * H * W;
      break;
    case Layout::kSlicedNCHW: {
      const int64_t sw = 2 * W + 1, sh = H + 1, sc = C + 2;
      set(sc * sh * sw, sh * sw, sw, 2);
      start = strides[0] + 2 * strides[1] + strides[2] + 1;
      storage_elems = (P + 1) * sc * sh * sw;
      break;
    }
    case Layout::kSlicedChannelsLast: {
      const int64_t sc = 2 * C + 1;
      set(H * W * sc, 2, W * sc, sc);
      start = 1;
      storage_elems = P * H * W * sc;
      break;
    }
    case Layout::kExpandedChannels:
      set(H * W, 0, W, 1);
      storage_elems = P * H * W;
      break;
    case Layout::kExpandedWidth:
      set(C * H, H, 1, 0);
      storage_elems = P * C * H;
      break;
  }
  View v;
  v.esize = fieldfuse::dtype_size(dtype);
  v.storage = random_bytes(static_cast<std::size_t>(storage_elems) * v.esize + v.esize, seed);
  v.ref.data = v.storage.data() + start * static_cast<int64_t>(v.esize);
  v.ref.dtype = dtype;
  v.ref.ndim = 4;
  const int64_t sizes[4] = {P, C, H, W};
  for (int i = 0; i < 4; ++i) v.ref.sizes[i] = sizes[i], v.ref.strides[i] = strides[i];
  return v;
}

int64_t dense_index(const Shape4& s, int64_t p, int64_t c, int64_t y, int64_t x) {
  return ((p * s.h + y) * s.w + x) * s.c + c;
}

/// Calls f(p, c, y, x) for every element in row-major [P, C, H, W] order.
template <class F>
void for_each_element(const Shape4& s, const F& f) {
  for (int64_t p = 0; p < s.p; ++p)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t y = 0; y < s.h; ++y)
        for (int64_t x = 0; x < s.w; ++x) f(p, c, y, x);
}

/// Count of elements whose `size` bytes differ between a[ia] and b[ib] over all (p, c, y, x),
/// with the first such element described in `first`.
template <class IndexA, class IndexB>
int64_t count_mismatches(const Shape4& s, const unsigned char* a, IndexA ia, const unsigned char* b,
                         IndexB ib, std::size_t size, std::string& first) {
  int64_t bad = 0;
  for_each_element(s, [&](int64_t p, int64_t c, int64_t y, int64_t x) {
    if (std::memcmp(a + ia(p, c, y, x) * size, b + ib(p, c, y, x) * size, size) != 0) {
      if (bad++ == 0) {
        first = "(" + std::to_string(p) + ", " + std::to_string(c) + ", " + std::to_string(y) +
                ", " + std::to_string(x) + ")";
      }
    }
  });
  return bad;
}

Shape4 shape_of(const TensorRef& t) { return {t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]}; }

/// dense must equal the naive channels-last gather of `src`.
void expect_channels_last_of(const View& src, const Bytes& dense) {
  const Shape4 s = shape_of(src.ref);
  std::string first;
  const int64_t bad = count_mismatches(
      s, dense.data(), [&](auto... i) { return dense_index(s, i...); }, src.storage.data(),
      [&](auto... i) { return src.offset(i...); }, src.esize, first);
  EXPECT_EQ(bad, 0) << "first mismatch at " << first;
}

/// Storage bytes of `dst` outside its view must still equal `before`.
void expect_gaps_untouched(const View& dst, const Bytes& before) {
  std::vector<bool> in_view(dst.storage.size() / dst.esize, false);
  for_each_element(shape_of(dst.ref), [&](int64_t p, int64_t c, int64_t y, int64_t x) {
    in_view[dst.offset(p, c, y, x)] = true;
  });
  int64_t changed = 0;
  for (std::size_t e = 0; e < in_view.size(); ++e) {
    if (!in_view[e] &&
        std::memcmp(&dst.storage[e * dst.esize], &before[e * dst.esize], dst.esize) != 0)
      ++changed;
  }
  EXPECT_EQ(changed, 0) << "elements outside the view were written";
}

std::string describe(const Shape4& s, Layout l, DType d) {
  return "shape [" + std::to_string(s.p) + ", " + std::to_string(s.c) + ", " + std::to_string(s.h) +
         ", " + std::to_string(s.w) + "] " + name(l) + " " + fieldfuse::dtype_name(d);
}

TEST(LayoutCopy, ToChannelsLastMatchesNaiveGatherForEveryLayoutShapeAndDType) {
  uint32_t seed = 1;
  for (const Shape4& s : kShapes) {
    for (Layout l : kSourceLayouts) {
      for (DType d : kAllDTypes) {
        SCOPED_TRACE(describe(s, l, d));
        const View src = make_view(s, l, d, seed++);
        const Bytes before = src.storage;
        Bytes dense(channels_last_bytes(src.ref, d) + 1, 0xab);
        copy_to_channels_last(src.ref, dense.data(), d, Stream{});
        expect_channels_last_of(src, dense);
        EXPECT_EQ(src.storage, before) << "the source was modified";
        // Bytes past the logical size (alignment padding) are left alone.
        const auto used = static_cast<std::size_t>(s.numel()) * src.esize;
        for (std::size_t i = used; i < dense.size(); ++i) ASSERT_EQ(dense[i], 0xab) << i;
      }
    }
  }
}

TEST(LayoutCopy, FromChannelsLastMatchesNaiveScatterAndLeavesGaps) {
  uint32_t seed = 1000;
  for (const Shape4& s : kShapes) {
    for (Layout l : kDestinationLayouts) {
      for (DType d : kAllDTypes) {
        SCOPED_TRACE(describe(s, l, d));
        View dst = make_view(s, l, d, seed++);
        const Bytes before = dst.storage;
        const Bytes dense = random_bytes(static_cast<std::size_t>(s.numel()) * dst.esize +
                                             dst.esize,  // never empty, so data() is valid
                                         seed++);
        copy_from_channels_last(dense.data(), d, dst.ref, Stream{});
        std::string first;
        const int64_t bad = count_mismatches(
            s, dst.storage.data(), [&](auto... i) { return dst.offset(i...); }, dense.data(),
            [&](auto... i) { return dense_index(s, i...); }, dst.esize, first);
        EXPECT_EQ(bad, 0) << "first mismatch at " << first;
        expect_gaps_untouched(dst, before);
      }
    }
  }
}

TEST(LayoutCopy, RoundTripBetweenLayoutsReproducesTheSource) {
  uint32_t seed = 5000;
  for (const Shape4& s : {Shape4{3, 48, 5, 7}, Shape4{2, 3, 1, 5}, Shape4{12, 8, 9, 11}}) {
    for (Layout from : kSourceLayouts) {
      for (Layout to : kDestinationLayouts) {
        SCOPED_TRACE(describe(s, from, DType::Float32) + " -> " + name(to));
        const View src = make_view(s, from, DType::Float32, seed++);
        View dst = make_view(s, to, DType::Float32, seed++);
        const Bytes before = dst.storage;
        Bytes dense(channels_last_bytes(src.ref, DType::Float32));
        copy_to_channels_last(src.ref, dense.data(), DType::Float32, Stream{});
        copy_from_channels_last(dense.data(), DType::Float32, dst.ref, Stream{});
        std::string first;
        const int64_t bad = count_mismatches(
            s, dst.storage.data(), [&](auto... i) { return dst.offset(i...); }, src.storage.data(),
            [&](auto... i) { return src.offset(i...); }, 4, first);
        EXPECT_EQ(bad, 0) << "first mismatch at " << first;
        expect_gaps_untouched(dst, before);
      }
    }
  }
}

// ---- float32 -> float16 / bfloat16 -------------------------------------------------------------

float float_of_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Exact value of binary16 bits (a finite or infinite half; not NaN).
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

/// Exact value of bfloat16 bits: the top half of a float32.
double bfloat16_value(uint16_t b) { return float_of_bits(static_cast<uint32_t>(b) << 16); }

bool is_nan16(uint16_t bits, bool bfloat) {
  return bfloat ? std::isnan(bfloat16_value(bits))
                : ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0);
}

/// `r` is the 16-bit value nearest to `x`, ties to the even bit pattern; results past the largest
/// finite value must be the infinity that round-to-nearest gives (`overflow` is the threshold).
void expect_nearest(float x, uint16_t r, bool bfloat, uint16_t inf_bits, double overflow) {
  auto value = [&](uint16_t bits) { return bfloat ? bfloat16_value(bits) : half_value(bits); };
  const double ax = std::fabs(static_cast<double>(x));
  const uint16_t mag = r & 0x7fff;
  ASSERT_EQ((r & 0x8000) != 0, std::signbit(x)) << "sign of " << x;
  if (mag == inf_bits) {
    ASSERT_GE(ax, overflow) << x << " rounded to inf";
    return;
  }
  ASSERT_LT(ax, overflow) << x << " should overflow to inf";
  const double err = std::fabs(ax - value(mag));
  if (mag > 0) {
    const double below = std::fabs(ax - value(mag - 1));
    ASSERT_TRUE(err < below || (err == below && (mag & 1) == 0)) << x << " -> " << r;
  }
  if (mag + 1 < inf_bits) {
    const double above = std::fabs(ax - value(mag + 1));
    ASSERT_TRUE(err < above || (err == above && (mag & 1) == 0)) << x << " -> " << r;
  }
}

TEST(LayoutCopyMath, FloatToHalfKnownValues) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // tie, odd mantissa: rounds up to inf
  EXPECT_EQ(float_to_half_bits(-1e30f), 0xfc00);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: 0
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);         // tie to even: 2
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);         // above the tie
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie to even
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(is_nan16(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()), false));
  EXPECT_TRUE(is_nan16(float_to_half_bits(float_of_bits(0xff800001u)), false));  // signalling
}

TEST(LayoutCopyMath, FloatToBFloat16KnownValues) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie to even
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(is_nan16(float_to_bfloat16_bits(std::numeric_limits<float>::quiet_NaN()), true));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  EXPECT_TRUE(is_nan16(float_to_bfloat16_bits(float_of_bits(0x7f800001u)), true));
}

TEST(LayoutCopyMath, RoundingIsNearestEvenOverRandomFloats) {
  std::mt19937 rng(42);
  const double half_overflow = 65520.0;
  const double bf16_overflow = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);
  for (int i = 0; i < 200000; ++i) {
    // Random bits cover every exponent; every third draw lands in the half's own range.
    uint32_t bits = rng();
    if (i % 3 == 0) bits = (bits & 0x807fffffu) | ((100u + rng() % 45u) << 23);
    const float x = float_of_bits(bits);
    if (std::isnan(x)) continue;
    expect_nearest(x, float_to_half_bits(x), false, 0x7c00, half_overflow);
    expect_nearest(x, float_to_bfloat16_bits(x), true, 0x7f80, bf16_overflow);
    if (HasFailure()) return;
  }
  // Every tie: the midpoint of each pair of neighbouring 16-bit values (exact in float32).
  for (uint16_t m = 0; m < 0x7c00; ++m) {
    const auto x = static_cast<float>((half_value(m) + half_value(m + 1)) / 2);
    expect_nearest(x, float_to_half_bits(x), false, 0x7c00, half_overflow);
    expect_nearest(-x, float_to_half_bits(-x), false, 0x7c00, half_overflow);
    if (HasFailure()) return;  // one wrong rounding rule would fail thousands of values
  }
  for (uint16_t m = 0; m < 0x7f80; ++m) {
    const auto x = static_cast<float>((bfloat16_value(m) + bfloat16_value(m + 1)) / 2);
    expect_nearest(x, float_to_bfloat16_bits(x), true, 0x7f80, bf16_overflow);
    if (HasFailure()) return;
  }
}

TEST(LayoutCopy, FromFloat32RoundsInto16BitDestinations) {
  uint32_t seed = 9000;
  for (DType d : {DType::Float16, DType::BFloat16}) {
    for (Layout l : kDestinationLayouts) {
      for (const Shape4& s : {Shape4{2, 48, 5, 3}, Shape4{3, 5, 4, 7}, Shape4{1, 1, 1, 1}}) {
        SCOPED_TRACE(describe(s, l, d));
        View dst = make_view(s, l, d, seed++);
        const Bytes before = dst.storage;
        const Bytes dense = random_bytes(static_cast<std::size_t>(s.numel()) * 4, seed++);
        copy_from_channels_last(dense.data(), DType::Float32, dst.ref, Stream{});
        int64_t bad = 0;
        for_each_element(s, [&](int64_t p, int64_t c, int64_t y, int64_t x) {
          float v;
          std::memcpy(&v, &dense[dense_index(s, p, c, y, x) * 4], 4);
          const uint16_t want =
              d == DType::Float16 ? float_to_half_bits(v) : float_to_bfloat16_bits(v);
          uint16_t got;
          std::memcpy(&got, &dst.storage[dst.offset(p, c, y, x) * 2], 2);
          bad += got != want;
        });
        EXPECT_EQ(bad, 0);
        expect_gaps_untouched(dst, before);
      }
    }
  }
}

// ---- workspace sizing
// ----------------------------------------------------------------------------

TEST(LayoutCopy, ChannelsLastBytesRoundsTo256) {
  const auto shape = [](int64_t p, int64_t c, int64_t h, int64_t w) {
    return TensorRef::contiguous(nullptr, DType::Float32, Device{}, {p, c, h, w});
  };
  EXPECT_EQ(channels_last_bytes(shape(2, 3, 4, 5), DType::Float32), 512u);  // 480 bytes
  EXPECT_EQ(channels_last_bytes(shape(1, 1, 1, 64), DType::Float32), 256u);
  EXPECT_EQ(channels_last_bytes(shape(1, 1, 1, 65), DType::Float32), 512u);
  EXPECT_EQ(channels_last_bytes(shape(1, 1, 1, 65), DType::BFloat16), 256u);
  EXPECT_EQ(channels_last_bytes(shape(12, 8, 200, 200), DType::Float32), 15360000u);
  EXPECT_EQ(channels_last_bytes(shape(0, 8, 200, 200), DType::Float64), 0u);
  EXPECT_EQ(channels_last_bytes(shape(1, 1, 1, 1), DType::Bool), 256u);
  const TensorRef three = TensorRef::contiguous(nullptr, DType::Float32, Device{}, {2, 3, 4});
  expect_error([&] { channels_last_bytes(three, DType::Float32); }, ErrorKind::Value,
               {"channels_last_bytes()", "shape", "[P, C, H, W]", "[2, 3, 4]"});
}

// ---- argument errors
// -------------------------------------------------------------------------------

struct ErrorCase {
  View src = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Float32, 1);
  View dst = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Float32, 2);
  Bytes dense = Bytes(channels_last_bytes(src.ref, DType::Float32) + 8);
  void to(DType dtype = DType::Float32) const {
    copy_to_channels_last(src.ref, const_cast<unsigned char*>(dense.data()), dtype, Stream{});
  }
  void from(DType dtype = DType::Float32) const {
    copy_from_channels_last(dense.data(), dtype, dst.ref, Stream{});
  }
};

TEST(LayoutCopyErrors, ShapeAndStrides) {
  ErrorCase a;
  a.src.ref.ndim = 3;
  expect_error([&] { a.to(); }, ErrorKind::Value,
               {"copy_to_channels_last()", "src", "[P, C, H, W]", "[2, 3, 4]"});
  a.dst.ref.ndim = 5;
  a.dst.ref.sizes[4] = 1;
  expect_error([&] { a.from(); }, ErrorKind::Value,
               {"copy_from_channels_last()", "dst", "[P, C, H, W]"});
  ErrorCase b;
  b.src.ref.sizes[2] = -1;
  expect_error([&] { b.to(); }, ErrorKind::Value, {"src", "non-negative sizes"});
  ErrorCase c;
  c.src.ref.strides[3] = -1;
  expect_error([&] { c.to(); }, ErrorKind::Value, {"src", "non-negative strides", "dim 3"});
  c.dst.ref.strides[1] = -20;
  expect_error([&] { c.from(); }, ErrorKind::Value, {"dst", "non-negative strides", "dim 1"});
}

TEST(LayoutCopyErrors, DTypePairs) {
  ErrorCase a;
  expect_error([&] { a.to(DType::Float16); }, ErrorKind::Type,
               {"copy_to_channels_last()", "dst_dtype", "float32", "float16"});
  expect_error([&] { a.from(DType::Float64); }, ErrorKind::Type,
               {"copy_from_channels_last()", "src_dtype", "float32", "float64"});
  a.dst = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Float16, 3);
  expect_error([&] { a.from(DType::BFloat16); }, ErrorKind::Type,
               {"src_dtype", "float16) or float32", "bfloat16"});
  a.dst = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Int32, 3);
  expect_error([&] { a.from(DType::Float32); }, ErrorKind::Type, {"src_dtype", "int32", "float32"});
  a.dst = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Float64, 3);
  expect_error([&] { a.from(DType::Float32); }, ErrorKind::Type, {"src_dtype", "float64"});
}

TEST(LayoutCopyErrors, OverlappingDestination) {
  ErrorCase a;
  a.dst = make_view({2, 3, 4, 5}, Layout::kExpandedChannels, DType::Float32, 3);
  expect_error([&] { a.from(); }, ErrorKind::Value,
               {"copy_from_channels_last()", "dst", "distinct"});
  ErrorCase b;
  b.dst.ref.strides[2] = 3;  // rows of 5 cells 3 apart overlap
  expect_error([&] { b.from(); }, ErrorKind::Value, {"dst", "distinct", "[2, 3, 4, 5]"});
  // An expanded dim of size 1 or an empty view repeats nothing.
  ErrorCase c;
  c.dst = make_view({2, 1, 4, 5}, Layout::kExpandedChannels, DType::Float32, 3);
  c.from();
  c.dst = make_view({2, 3, 0, 5}, Layout::kExpandedChannels, DType::Float32, 3);
  c.from();
}

TEST(LayoutCopyErrors, DensePointer) {
  ErrorCase a;
  expect_error([&] { copy_to_channels_last(a.src.ref, nullptr, DType::Float32, Stream{}); },
               ErrorKind::Value,
               {"copy_to_channels_last()", "dst", "null pointer", "[2, 3, 4, 5]"});
  expect_error([&] { copy_from_channels_last(nullptr, DType::Float32, a.dst.ref, Stream{}); },
               ErrorKind::Value, {"copy_from_channels_last()", "src", "null pointer"});
  expect_error(
      [&] { copy_to_channels_last(a.src.ref, a.dense.data() + 2, DType::Float32, Stream{}); },
      ErrorKind::Value, {"dst", "aligned", "4 bytes", "float32"});
  // Empty tensors never touch either pointer, so null is fine there.
  ErrorCase e;
  e.src.ref.sizes[1] = 0;
  e.dst.ref.sizes[0] = 0;
  copy_to_channels_last(e.src.ref, nullptr, DType::Float32, Stream{});
  copy_from_channels_last(nullptr, DType::Float32, e.dst.ref, Stream{});
  e.src.ref.data = nullptr;
  copy_to_channels_last(e.src.ref, nullptr, DType::Float32, Stream{});
  ErrorCase f;
  f.src.ref.data = nullptr;
  expect_error([&] { f.to(); }, ErrorKind::Value, {"src", "null pointer"});
}

TEST(LayoutCopyErrors, AliasingSides) {
  ErrorCase a;
  // The dense buffer inside the source's storage.
  expect_error(
      [&] { copy_to_channels_last(a.src.ref, a.src.storage.data() + 8, DType::Float32, Stream{}); },
      ErrorKind::Value, {"copy_to_channels_last()", "dst", "overlap", "src"});
  expect_error(
      [&] { copy_from_channels_last(a.dst.storage.data(), DType::Float32, a.dst.ref, Stream{}); },
      ErrorKind::Value, {"copy_from_channels_last()", "src", "overlap", "dst"});
}

TEST(LayoutCopyErrors, NamesTheCallersOp) {
  ErrorCase a;
  expect_error(
      [&] {
        copy_to_channels_last(a.src.ref, a.dense.data(), DType::Float64, Stream{},
                              "kplanes_tilted");
      },
      ErrorKind::Type, {"kplanes_tilted(): expected dst_dtype"});
}

TEST(LayoutCopyErrors, CudaTensorsNeedACudaBuild) {
  if (fieldfuse::build_info().cuda) GTEST_SKIP() << "this build has CUDA";
  ErrorCase a;
  a.src.ref.device = {DeviceType::CUDA, 0};
  expect_error([&] { a.to(); }, ErrorKind::NotImplemented,
               {"copy_to_channels_last()", "src", "cuda:0"});
  a.dst.ref.device = {DeviceType::CUDA, 0};
  expect_error([&] { a.from(); }, ErrorKind::NotImplemented, {"dst", "cuda:0"});
}

}  // namespace
}  // namespace fftest

#if FIELDFUSE_TEST_CUDA
// ---- CUDA kernels vs the CPU driver (skipped without a GPU) -------------------------------------
namespace fftest {
namespace {

/// Device memory holding a copy of host bytes, freed at scope exit.
class DeviceBytes {
 public:
  explicit DeviceBytes(const Bytes& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, size_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(ptr_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  Bytes to_host() const {
    Bytes host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, size_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

/// The view's twin in `d`, a device copy of its storage.
TensorRef on_device(const View& v, const DeviceBytes& d) {
  TensorRef r = v.ref;
  r.device = {DeviceType::CUDA, 0};
  r.data = d.data() + (static_cast<const unsigned char*>(v.ref.data) - v.storage.data());
  return r;
}

/// A created stream (not the legacy default), synchronised and destroyed at scope exit.
struct TestStream {
  cudaStream_t handle = nullptr;
  TestStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking), cudaSuccess);
  }
  ~TestStream() { cudaStreamDestroy(handle); }
  Stream stream() const { return Stream{handle}; }
  void sync() const { ASSERT_EQ(cudaStreamSynchronize(handle), cudaSuccess); }
};

// The two benchmark configs (one level of each), tile edges (C = 3, 33, 48; odd H·W) and empty.
const std::vector<Shape4> kCudaShapes = {{12, 8, 200, 200}, {24, 48, 50, 50}, {3, 48, 17, 19},
                                         {2, 3, 5, 7},      {2, 33, 3, 5},    {1, 1, 1, 1},
                                         {2, 0, 3, 3}};
constexpr DType kCudaDTypes[] = {DType::Float32, DType::BFloat16, DType::Float64, DType::UInt8};

bool has_gpu() { return fieldfuse::cuda_device_count() > 0; }

TEST(LayoutCopyCuda, ToChannelsLastMatchesCpu) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  TestStream s;
  uint32_t seed = 20000;
  for (const Shape4& shape : kCudaShapes) {
    for (Layout l : kSourceLayouts) {
      for (DType d : kCudaDTypes) {
        SCOPED_TRACE(describe(shape, l, d));
        const View src = make_view(shape, l, d, seed++);
        const std::size_t bytes = channels_last_bytes(src.ref, d);
        Bytes want(bytes + 1);
        copy_to_channels_last(src.ref, want.data(), d, Stream{});
        const DeviceBytes device_src(src.storage);
        const DeviceBytes got(Bytes(bytes + 1));
        copy_to_channels_last(on_device(src, device_src), got.data(), d, s.stream());
        s.sync();
        const Bytes host = got.to_host();
        const auto used = static_cast<std::size_t>(shape.numel()) * src.esize;
        EXPECT_EQ(std::memcmp(host.data(), want.data(), used), 0);
      }
    }
  }
}

TEST(LayoutCopyCuda, FromChannelsLastMatchesCpu) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  TestStream s;
  uint32_t seed = 30000;
  for (const Shape4& shape : kCudaShapes) {
    for (Layout l : kDestinationLayouts) {
      for (DType d : kCudaDTypes) {
        // Same dtype, and the float32 -> 16-bit rounding for the 16-bit destination.
        for (DType src_dtype : {d, DType::Float32}) {
          if (src_dtype != d && d != DType::BFloat16) continue;
          SCOPED_TRACE(describe(shape, l, d) + " from " + fieldfuse::dtype_name(src_dtype));
          View dst = make_view(shape, l, d, seed++);
          const Bytes dense = random_bytes(
              static_cast<std::size_t>(shape.numel()) * fieldfuse::dtype_size(src_dtype) + 8,
              seed++);
          const DeviceBytes device_dst(dst.storage);
          const DeviceBytes device_dense(dense);
          copy_from_channels_last(dense.data(), src_dtype, dst.ref, Stream{});
          copy_from_channels_last(device_dense.data(), src_dtype, on_device(dst, device_dst),
                                  s.stream());
          s.sync();
          EXPECT_EQ(device_dst.to_host(), dst.storage);  // the view and the gaps around it
        }
      }
    }
  }
}

TEST(LayoutCopyCuda, RejectsHostMemoryForACudaTensor) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const View src = make_view({2, 3, 4, 5}, Layout::kNCHW, DType::Float32, 1);
  const DeviceBytes device_src(src.storage);
  Bytes host(channels_last_bytes(src.ref, DType::Float32));
  expect_error(
      [&] {
        copy_to_channels_last(on_device(src, device_src), host.data(), DType::Float32, Stream{});
      },
      ErrorKind::Value, {"copy_to_channels_last()", "dst", "cuda:0", "host memory"});
  expect_error(
      [&] {
        copy_from_channels_last(host.data(), DType::Float32, on_device(src, device_src), Stream{});
      },
      ErrorKind::Value, {"copy_from_channels_last()", "src", "cuda:0", "host memory"});
}

}  // namespace
}  // namespace fftest
#endif  // FIELDFUSE_TEST_CUDA
