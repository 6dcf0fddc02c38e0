// SPDX-License-Identifier: Apache-2.0
// A tiny TIFF writer for the tests: uncompressed strips in either byte order, any tag values.
//
// It writes whatever it is told (a compression code, three samples per pixel, ...) so tests can
// also produce the files the reader must refuse. Pages are laid out as [strip data][IFD], with the
// IFD entries in ascending tag order as TIFF 6.0 requires.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fieldfuse::cli::testing {

struct TestTiffLayout {
  bool big_endian = false;
  std::uint32_t width = 4;
  std::uint32_t height = 3;
  std::uint32_t pages = 2;
  std::uint16_t bits_per_sample = 8;
  std::uint16_t sample_format = 1;   // 1 unsigned, 2 signed, 3 float
  std::uint32_t rows_per_strip = 0;  // 0: one strip per page
  std::uint16_t compression = 1;
  std::uint16_t samples_per_pixel = 1;
  bool big_tiff_magic = false;        // writes version 43 in the header
  std::uint32_t last_page_width = 0;  // nonzero: the last page gets this width instead
};

class TestTiffWriter {
 public:
  explicit TestTiffWriter(const TestTiffLayout& layout) : layout_(layout) {}

  /// `values` holds pages·height·width·samples_per_pixel samples in C order.
  std::vector<std::uint8_t> write(const std::vector<double>& values) {
    bytes_.clear();
    const std::uint8_t order_mark = layout_.big_endian ? 'M' : 'I';
    bytes_ = {order_mark, order_mark};
    put(layout_.big_tiff_magic ? 43 : 42, 2);
    const std::size_t first_ifd_slot = bytes_.size();
    put(0, 4);

    const std::uint32_t rows_per_strip =
        layout_.rows_per_strip ? layout_.rows_per_strip : layout_.height;
    const std::uint32_t strips = (layout_.height + rows_per_strip - 1) / rows_per_strip;
    const std::size_t sample_bytes = layout_.bits_per_sample / 8;
    std::size_t previous_next_slot = first_ifd_slot;
    std::size_t value_index = 0;
    for (std::uint32_t page = 0; page < layout_.pages; ++page) {
      const bool last = page + 1 == layout_.pages;
      const std::uint32_t width =
          last && layout_.last_page_width ? layout_.last_page_width : layout_.width;
      const std::size_t row_samples = static_cast<std::size_t>(width) * layout_.samples_per_pixel;
      std::vector<std::uint32_t> offsets;
      std::vector<std::uint32_t> counts;
      for (std::uint32_t s = 0; s < strips; ++s) {
        const std::uint32_t rows = std::min(rows_per_strip, layout_.height - s * rows_per_strip);
        offsets.push_back(static_cast<std::uint32_t>(bytes_.size()));
        counts.push_back(static_cast<std::uint32_t>(rows * row_samples * sample_bytes));
        for (std::size_t i = 0; i < rows * row_samples; ++i) put_sample(values.at(value_index++));
      }
      const std::uint32_t offsets_array = put_array_if_long(offsets);
      const std::uint32_t counts_array = put_array_if_long(counts);
      if (bytes_.size() % 2) bytes_.push_back(0);  // IFDs start on a word boundary
      patch(previous_next_slot, static_cast<std::uint32_t>(bytes_.size()));
      const std::uint16_t entries = 10;
      put(entries, 2);
      entry(256, 4, 1, width);
      entry(257, 4, 1, layout_.height);
      entry(258, 3, 1, layout_.bits_per_sample);
      entry(259, 3, 1, layout_.compression);
      entry(262, 3, 1, 1);  // BlackIsZero
      entry(273, 4, strips, strips == 1 ? offsets[0] : offsets_array);
      entry(277, 3, 1, layout_.samples_per_pixel);
      entry(278, 4, 1, rows_per_strip);
      entry(279, 4, strips, strips == 1 ? counts[0] : counts_array);
      entry(339, 3, 1, layout_.sample_format);
      previous_next_slot = bytes_.size();
      put(0, 4);
    }
    return bytes_;
  }

 private:
  void put(std::uint64_t value, int size) {
    for (int b = 0; b < size; ++b) {
      const int shift = 8 * (layout_.big_endian ? size - 1 - b : b);
      bytes_.push_back(static_cast<std::uint8_t>(value >> shift));
    }
  }
  void patch(std::size_t at, std::uint32_t value) {
    for (int b = 0; b < 4; ++b) {
      const int shift = 8 * (layout_.big_endian ? 3 - b : b);
      bytes_[at + b] = static_cast<std::uint8_t>(value >> shift);
    }
  }
  // One 12-byte entry; a SHORT value sits left-justified in the 4-byte value field.
  void entry(std::uint16_t tag, std::uint16_t type, std::uint32_t count, std::uint32_t value) {
    put(tag, 2);
    put(type, 2);
    put(count, 4);
    if (type == 3 && count == 1) {
      put(value, 2);
      put(0, 2);
    } else {
      put(value, 4);
    }
  }
  std::uint32_t put_array_if_long(const std::vector<std::uint32_t>& values) {
    if (values.size() == 1) return 0;
    const auto at = static_cast<std::uint32_t>(bytes_.size());
    for (const std::uint32_t v : values) put(v, 4);
    return at;
  }
  void put_sample(double value) {
    const int size = layout_.bits_per_sample / 8;
    if (layout_.sample_format == 3 && size == 4) {
      const float f = static_cast<float>(value);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      put(bits, 4);
    } else if (layout_.sample_format == 3 && size == 8) {
      std::uint64_t bits;
      std::memcpy(&bits, &value, 8);
      put(bits, 8);
    } else if (layout_.sample_format == 2) {
      put(static_cast<std::uint64_t>(static_cast<std::int64_t>(value)), size);
    } else {
      put(static_cast<std::uint64_t>(value), size);
    }
  }

  TestTiffLayout layout_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace fieldfuse::cli::testing
