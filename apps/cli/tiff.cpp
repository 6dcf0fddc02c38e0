// SPDX-License-Identifier: Apache-2.0
// A minimal baseline TIFF reader: uncompressed, single-channel strips; pages stack into a volume.
//
// Layout (TIFF 6.0, section 2): an 8-byte header ("II" or "MM", the number 42, the offset of the
// first image file directory), then a chain of IFDs. Each IFD is a 2-byte entry count, 12-byte
// entries (tag, field type, value count, and the value itself when it fits in 4 bytes or else
// its offset), and the 4-byte offset of the next IFD (0 ends the chain).
#include "tiff.h"

#include <algorithm>
#include <map>
#include <set>

#include "cli_error.h"
#include "file_io.h"

namespace fieldfuse::cli {
namespace {

// Tag numbers from TIFF 6.0 section 8 (baseline) and section 19 (SampleFormat).
enum Tag : std::uint16_t {
  kNewSubfileType = 254,
  kImageWidth = 256,
  kImageLength = 257,
  kBitsPerSample = 258,
  kCompression = 259,
  kPhotometricInterpretation = 262,
  kStripOffsets = 273,
  kSamplesPerPixel = 277,
  kRowsPerStrip = 278,
  kStripByteCounts = 279,
  kPlanarConfiguration = 284,
  kPredictor = 317,
  kTileWidth = 322,
  kSampleFormat = 339,
};

constexpr std::uint16_t kClassicTiffVersion = 42;
constexpr std::uint16_t kBigTiffVersion = 43;
constexpr std::uint32_t kCompressionNone = 1;
constexpr std::uint32_t kPhotometricPalette = 3;
constexpr std::uint32_t kSubfileReducedResolution = 1;  // NewSubfileType bit 0: a thumbnail
constexpr std::uint32_t kSampleFormatUnsigned = 1;
constexpr std::uint32_t kSampleFormatSigned = 2;
constexpr std::uint32_t kSampleFormatFloat = 3;
constexpr std::size_t kEntryBytes = 12;

// Bytes per value of each TIFF 6.0 field type (1..12); 0 marks types this reader cannot size.
int field_type_bytes(std::uint16_t type) {
  static constexpr int kBytes[] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8};
  return type < sizeof(kBytes) / sizeof(kBytes[0]) ? kBytes[type] : 0;
}

// Bounds-checked reads in the file's byte order.
class TiffBytes {
 public:
  TiffBytes(const std::vector<std::uint8_t>& bytes, std::string source)
      : bytes_(bytes), source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  std::size_t size() const { return bytes_.size(); }
  bool big_endian() const { return big_endian_; }
  void set_big_endian(bool big_endian) { big_endian_ = big_endian; }

  void require(std::uint64_t offset, std::uint64_t length, const char* what) const {
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      fail(std::string("is truncated: ") + what + " lies past the end of the file");
    }
  }
  std::uint32_t unsigned_at(std::uint64_t offset, int bytes) const {
    require(offset, static_cast<std::uint64_t>(bytes), "a field");
    std::uint32_t value = 0;
    for (int b = 0; b < bytes; ++b) {
      const int shift = 8 * (big_endian_ ? bytes - 1 - b : b);
      value |= static_cast<std::uint32_t>(bytes_[offset + b]) << shift;
    }
    return value;
  }
  std::uint16_t u16(std::uint64_t offset) const {
    return static_cast<std::uint16_t>(unsigned_at(offset, 2));
  }
  std::uint32_t u32(std::uint64_t offset) const { return unsigned_at(offset, 4); }
  const std::uint8_t* data(std::uint64_t offset) const { return bytes_.data() + offset; }

  [[noreturn]] void fail(const std::string& what) const {
    throw input_error("TIFF file '" + source_ + "' " + what);
  }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::string source_;
  bool big_endian_ = false;
};

// One IFD entry, with its values read as unsigned integers (all the tags used here are).
struct Field {
  std::uint16_t type = 0;
  std::vector<std::uint32_t> values;
};

Field read_field(const TiffBytes& file, std::uint64_t entry_offset) {
  Field field;
  field.type = file.u16(entry_offset + 2);
  const std::uint32_t count = file.u32(entry_offset + 4);
  const int bytes = field_type_bytes(field.type);
  if (bytes == 0 || field.type == 5 || field.type == 10 || field.type == 11 || field.type == 12) {
    // Rationals and floats never carry the structural tags this reader needs; skip their values.
    return field;
  }
  const std::uint64_t total = static_cast<std::uint64_t>(count) * bytes;
  const std::uint64_t values_offset = total <= 4 ? entry_offset + 8 : file.u32(entry_offset + 8);
  file.require(values_offset, total, "a tag's values");
  field.values.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    field.values[i] =
        file.unsigned_at(values_offset + static_cast<std::uint64_t>(i) * bytes, bytes);
  }
  return field;
}

// The tags of one page that decide how to read it.
struct PageLayout {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  SampleFormat sample;
  std::uint32_t rows_per_strip = 0;
  std::vector<std::uint32_t> strip_offsets;
  std::vector<std::uint32_t> strip_byte_counts;
  bool reduced_resolution = false;
};

std::uint32_t single_value(const TiffBytes& file, const std::map<std::uint16_t, Field>& fields,
                           std::uint16_t tag, const char* name, std::uint32_t fallback,
                           bool required) {
  const auto it = fields.find(tag);
  if (it == fields.end() || it->second.values.empty()) {
    if (required) file.fail(std::string("lacks the required ") + name + " tag");
    return fallback;
  }
  // Per-sample tags repeat their value for each sample; with one sample the first is the value.
  return it->second.values.front();
}

SampleFormat sample_format_of(const TiffBytes& file, std::uint32_t bits, std::uint32_t code) {
  SampleFormat sample;
  sample.big_endian = file.big_endian();
  sample.bytes = static_cast<int>(bits / 8);
  switch (code) {
    case kSampleFormatUnsigned:
      sample.kind = SampleKind::UnsignedInt;
      break;
    case kSampleFormatSigned:
      sample.kind = SampleKind::SignedInt;
      break;
    case kSampleFormatFloat:
      sample.kind = SampleKind::Float;
      break;
    default:
      file.fail("has SampleFormat " + std::to_string(code) +
                ", which is not supported (expected 1 = unsigned, 2 = signed or 3 = float)");
  }
  const bool int_ok = sample.kind != SampleKind::Float && (bits == 8 || bits == 16 || bits == 32);
  const bool float_ok = sample.kind == SampleKind::Float && (bits == 32 || bits == 64);
  if (!int_ok && !float_ok) {
    file.fail("has " + std::to_string(bits) + "-bit samples of that SampleFormat, which are not " +
              "supported (expected 8/16/32-bit integers or 32/64-bit floats)");
  }
  return sample;
}

PageLayout read_page_layout(const TiffBytes& file, std::uint64_t ifd_offset,
                            std::uint64_t* next_ifd_offset) {
  const std::uint16_t entry_count = file.u16(ifd_offset);
  file.require(ifd_offset + 2, entry_count * kEntryBytes + 4, "an image file directory");
  std::map<std::uint16_t, Field> fields;
  for (std::uint16_t e = 0; e < entry_count; ++e) {
    const std::uint64_t entry_offset = ifd_offset + 2 + e * kEntryBytes;
    fields[file.u16(entry_offset)] = read_field(file, entry_offset);
  }
  *next_ifd_offset = file.u32(ifd_offset + 2 + entry_count * kEntryBytes);

  const auto value = [&](std::uint16_t tag, const char* name, std::uint32_t fallback) {
    return single_value(file, fields, tag, name, fallback, /*required=*/false);
  };
  PageLayout page;
  page.reduced_resolution =
      (value(kNewSubfileType, "NewSubfileType", 0) & kSubfileReducedResolution) != 0;
  page.width = single_value(file, fields, kImageWidth, "ImageWidth", 0, /*required=*/true);
  page.height = single_value(file, fields, kImageLength, "ImageLength", 0, /*required=*/true);
  if (page.width == 0 || page.height == 0) file.fail("has an empty page (width or length 0)");

  const std::uint32_t compression = value(kCompression, "Compression", kCompressionNone);
  if (compression != kCompressionNone) {
    file.fail("is compressed (Compression = " + std::to_string(compression) +
              "), which is not supported; save it uncompressed");
  }
  if (fields.count(kTileWidth) != 0)
    file.fail("is tiled, which is not supported; save it in strips");
  const std::uint32_t samples_per_pixel = value(kSamplesPerPixel, "SamplesPerPixel", 1);
  if (samples_per_pixel != 1) {
    file.fail("has " + std::to_string(samples_per_pixel) +
              " samples per pixel (e.g. RGB), but only single-channel images are supported");
  }
  if (value(kPhotometricInterpretation, "PhotometricInterpretation", 1) == kPhotometricPalette) {
    file.fail("is a palette (colour-mapped) image, which is not supported");
  }
  if (value(kPredictor, "Predictor", 1) != 1) file.fail("uses a Predictor, which is not supported");
  // PlanarConfiguration does not matter with one sample per pixel.

  const std::uint32_t bits = value(kBitsPerSample, "BitsPerSample", 1);
  page.sample =
      sample_format_of(file, bits, value(kSampleFormat, "SampleFormat", kSampleFormatUnsigned));
  page.rows_per_strip = std::min(value(kRowsPerStrip, "RowsPerStrip", page.height), page.height);
  if (page.rows_per_strip == 0) file.fail("has RowsPerStrip = 0");

  const auto offsets = fields.find(kStripOffsets);
  if (offsets == fields.end() || offsets->second.values.empty())
    file.fail("lacks the StripOffsets tag");
  page.strip_offsets = offsets->second.values;
  const auto counts = fields.find(kStripByteCounts);
  if (counts != fields.end()) page.strip_byte_counts = counts->second.values;
  return page;
}

// Decodes one page's strips into `dst` (height * width floats).
void read_page_pixels(const TiffBytes& file, const PageLayout& page, float* dst) {
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(page.width) * page.sample.bytes;
  const std::uint64_t strips = (page.height + page.rows_per_strip - 1) / page.rows_per_strip;
  if (page.strip_offsets.size() != strips) {
    file.fail("has " + std::to_string(page.strip_offsets.size()) + " StripOffsets, expected " +
              std::to_string(strips) + " for its ImageLength and RowsPerStrip");
  }
  for (std::uint64_t s = 0; s < strips; ++s) {
    const std::uint64_t first_row = s * page.rows_per_strip;
    const std::uint64_t rows =
        std::min<std::uint64_t>(page.rows_per_strip, page.height - first_row);
    const std::uint64_t needed = rows * row_bytes;
    if (s < page.strip_byte_counts.size() && page.strip_byte_counts[s] < needed) {
      file.fail("has a strip of " + std::to_string(page.strip_byte_counts[s]) +
                " bytes where uncompressed rows need " + std::to_string(needed));
    }
    file.require(page.strip_offsets[s], needed, "strip data");
    decode_samples(file.data(page.strip_offsets[s]), static_cast<std::int64_t>(rows * page.width),
                   page.sample, dst + first_row * page.width);
  }
}

}  // namespace

TiffStack parse_tiff(const std::vector<std::uint8_t>& bytes, const std::string& source_name) {
  TiffBytes file(bytes, source_name);
  if (bytes.size() < 8 ||
      !((bytes[0] == 'I' && bytes[1] == 'I') || (bytes[0] == 'M' && bytes[1] == 'M'))) {
    file.fail("is not a TIFF file (missing the II/MM byte-order mark)");
  }
  file.set_big_endian(bytes[0] == 'M');
  const std::uint16_t version = file.u16(2);
  if (version == kBigTiffVersion) file.fail("is a BigTIFF, which is not supported");
  if (version != kClassicTiffVersion) file.fail("is not a TIFF file (bad version number)");

  TiffStack stack;
  std::set<std::uint64_t> visited;  // a corrupt chain could loop forever
  for (std::uint64_t ifd = file.u32(4); ifd != 0;) {
    if (!visited.insert(ifd).second) file.fail("has a loop in its chain of image directories");
    std::uint64_t next = 0;
    const PageLayout page = read_page_layout(file, ifd, &next);
    ifd = next;
    if (page.reduced_resolution) continue;
    if (stack.pages == 0) {
      stack.width = page.width;
      stack.height = page.height;
      stack.sample_format = page.sample;
    } else if (page.width != stack.width || page.height != stack.height ||
               sample_type_name(page.sample) != sample_type_name(stack.sample_format)) {
      file.fail("page " + std::to_string(stack.pages + 1) + " is " + std::to_string(page.width) +
                "x" + std::to_string(page.height) + " " + sample_type_name(page.sample) +
                " but page 1 is " + std::to_string(stack.width) + "x" +
                std::to_string(stack.height) + " " + sample_type_name(stack.sample_format) +
                "; all pages of a stack must match");
    }
    const std::size_t page_pixels = static_cast<std::size_t>(page.width) * page.height;
    stack.values.resize(stack.values.size() + page_pixels);
    read_page_pixels(file, page, stack.values.data() + stack.values.size() - page_pixels);
    ++stack.pages;
  }
  if (stack.pages == 0) file.fail("holds no full-resolution image");
  return stack;
}

TiffStack read_tiff(const std::string& path) { return parse_tiff(read_file_bytes(path), path); }

}  // namespace fieldfuse::cli
