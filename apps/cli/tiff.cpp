// SPDX-License-Identifier: Apache-2.0
// TIFF stacks through libtiff: every page of a file becomes one slice of a [pages, height, width]
// float32 volume, with the file's claims checked against its size before anything is allocated.
//
// Two passes over the directories: the first reads only tags and checks each page's claims against
// the file's size (Note [claims before allocation]); the second allocates the whole stack once and
// decodes strips or tiles straight into it through libtiff, which undoes compression, predictors
// and the file's byte order.
#include "tiff.h"

#include <tiffio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <memory>

#include "cli_error.h"
#include "file_io.h"

namespace fieldfuse::cli {
namespace {

// libtiff reports through callbacks; keep the first error for the exception.
struct Diagnostics {
  std::string first_error;
};

int on_error(TIFF*, void* user_data, const char* module, const char* format, va_list args) {
  auto* diagnostics = static_cast<Diagnostics*>(user_data);
  if (diagnostics->first_error.empty()) {
    char text[512];
    std::vsnprintf(text, sizeof(text), format, args);
    diagnostics->first_error = std::string(module != nullptr ? module : "libtiff") + ": " + text;
  }
  return 1;  // handled: libtiff prints nothing
}

int on_warning(TIFF*, void*, const char*, const char*, va_list) {
  return 1;  // unknown private tags and the like: harmless for reading pixels
}

struct TiffCloser {
  void operator()(TIFF* tif) const { TIFFClose(tif); }
};
using TiffHandle = std::unique_ptr<TIFF, TiffCloser>;

// What the first pass learns about one full-resolution page.
struct Page {
  tdir_t directory = 0;
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  SampleFormat sample;
};

class Reader {
 public:
  explicit Reader(const std::string& path) : file_(path) {}

  TiffStack read() {
    check_magic();
    open();
    const std::vector<Page> pages = scan_pages();
    return decode(pages);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error("'" + file_.path() + "' " + what);
  }
  [[noreturn]] void fail_libtiff(const std::string& what) const {
    fail(what + (diagnostics_.first_error.empty() ? "" : " (" + diagnostics_.first_error + ")"));
  }

  void check_magic() {
    unsigned char head[4] = {};
    if (file_.size() < 8) fail("is not a TIFF file (shorter than a TIFF header)");
    file_.read_exact(head, 4, "its header");
    const bool little = head[0] == 'I' && head[1] == 'I';
    const bool big = head[0] == 'M' && head[1] == 'M';
    const unsigned version = little ? head[2] | head[3] << 8 : head[2] << 8 | head[3];
    if (!(little || big) || (version != 42 && version != 43)) {
      fail("is not a TIFF file (missing the II/MM byte-order mark and version 42 or 43)");
    }
  }

  void open() {
    TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
    TIFFOpenOptionsSetErrorHandlerExtR(options, on_error, &diagnostics_);
    TIFFOpenOptionsSetWarningHandlerExtR(options, on_warning, nullptr);
    // libtiff closes the descriptor it is given; hand it a duplicate of the checked one.
    const int fd = ::dup(file_.fd());
    if (fd < 0) fail("cannot be read (dup failed)");
    ::lseek(fd, 0, SEEK_SET);
    // "m": read with read(2), not mmap, so a file truncated while we read cannot SIGBUS us.
    tif_.reset(TIFFFdOpenExt(fd, file_.path().c_str(), "rm", options));
    TIFFOpenOptionsFree(options);
    if (!tif_) {
      ::close(fd);  // TIFFFdOpenExt leaves it open on failure
      fail_libtiff("is not a readable TIFF file");
    }
  }

  template <class T>
  T tag(ttag_t tag, T fallback) {
    T value = fallback;
    if (TIFFGetFieldDefaulted(tif_.get(), tag, &value) != 1) return fallback;
    return value;
  }

  SampleFormat sample_format(const std::string& where) {
    const std::uint16_t samples = tag<std::uint16_t>(TIFFTAG_SAMPLESPERPIXEL, 1);
    if (samples != 1) {
      fail(where + " has " + std::to_string(samples) +
           " samples per pixel (e.g. RGB), but only single-channel images are supported");
    }
    if (tag<std::uint16_t>(TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) == PHOTOMETRIC_PALETTE) {
      fail(where + " is a palette (colour-mapped) image, which is not supported");
    }
    const std::uint16_t bits = tag<std::uint16_t>(TIFFTAG_BITSPERSAMPLE, 1);
    const std::uint16_t code = tag<std::uint16_t>(TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
    SampleFormat format;
    format.big_endian = kHostBigEndian;  // libtiff hands out samples in the host's order
    format.bytes = bits / 8;
    switch (code) {
      case SAMPLEFORMAT_UINT:
        format.kind = SampleKind::UnsignedInt;
        break;
      case SAMPLEFORMAT_INT:
        format.kind = SampleKind::SignedInt;
        break;
      case SAMPLEFORMAT_IEEEFP:
        format.kind = SampleKind::Float;
        break;
      case SAMPLEFORMAT_COMPLEXINT:
      case SAMPLEFORMAT_COMPLEXIEEEFP:
        fail(where + " holds complex samples; the denoiser works on real intensities");
      default:
        fail(where + " has SampleFormat " + std::to_string(code) +
             ", which is not supported (expected unsigned or signed integers or IEEE floats)");
    }
    if (bits % 8 != 0 || !is_supported(format)) {
      fail(where + " has " + std::to_string(bits) + "-bit samples of that SampleFormat, which " +
           "are not supported (expected 8/16/32/64-bit integers or 16/32/64-bit floats)");
    }
    return format;
  }

  // Note [claims before allocation]
  // A TIFF states its page sizes in a few bytes, so a 276-byte file can claim 60000x60000 pages.
  // Each strip or tile the decoder will read must therefore lie inside the file, and its decoded
  // size must be covered by the bytes it occupies: all of them when uncompressed, a factor of at
  // most kMaxCompressionRatio when compressed. The decoded stack is then bounded by the file's
  // size times that factor before a single pixel buffer exists.
  void check_claims(const std::string& where, const Page& page) {
    TIFF* tif = tif_.get();
    const std::uint16_t compression = tag<std::uint16_t>(TIFFTAG_COMPRESSION, COMPRESSION_NONE);
    if (!TIFFIsCODECConfigured(compression)) {
      const TIFFCodec* codec = TIFFFindCODEC(compression);
      fail(where + " uses compression " +
           (codec != nullptr ? std::string(codec->name) : std::to_string(compression)) +
           ", which this system's libtiff cannot decode");
    }
    const bool tiled = TIFFIsTiled(tif) != 0;
    const std::uint32_t striles = tiled ? TIFFNumberOfTiles(tif) : TIFFNumberOfStrips(tif);
    const std::uint64_t row_bytes = std::uint64_t{page.width} * page.sample.bytes;
    std::uint64_t tile_bytes = 0;
    std::uint32_t rows_per_strip = page.height;
    if (tiled) {
      const std::uint32_t tile_width = tag<std::uint32_t>(TIFFTAG_TILEWIDTH, 0);
      const std::uint32_t tile_height = tag<std::uint32_t>(TIFFTAG_TILELENGTH, 0);
      if (tile_width == 0 || tile_height == 0) fail(where + " has tiles of size 0");
      tile_bytes = std::uint64_t{tile_width} * tile_height * page.sample.bytes;
    } else {
      rows_per_strip = std::min(tag<std::uint32_t>(TIFFTAG_ROWSPERSTRIP, page.height), page.height);
      if (rows_per_strip == 0) fail(where + " has RowsPerStrip = 0");
    }
    if (striles == 0) fail(where + " has no strips or tiles");
    for (std::uint32_t s = 0; s < striles; ++s) {
      int error = 0;
      const std::uint64_t offset = TIFFGetStrileOffsetWithErr(tif, s, &error);
      const std::uint64_t stored = error ? 0 : TIFFGetStrileByteCountWithErr(tif, s, &error);
      if (error) fail_libtiff(where + " has unreadable strip or tile offsets");
      const char* unit = tiled ? "tile " : "strip ";
      if (offset > file_.size() || stored > file_.size() - offset) {
        fail("is truncated: " + where + "'s " + unit + std::to_string(s) + " claims bytes " +
             std::to_string(offset) + ".." + std::to_string(offset + stored) + " of a " +
             std::to_string(file_.size()) + "-byte file");
      }
      // The last strip may be shorter (and a file may list more strips than rows need).
      const std::uint64_t first_row = std::uint64_t{s} * rows_per_strip;
      const std::uint64_t rows =
          first_row >= page.height
              ? 0
              : std::min<std::uint64_t>(rows_per_strip, page.height - first_row);
      const std::uint64_t decoded = tiled ? tile_bytes : rows * row_bytes;
      if (compression == COMPRESSION_NONE ? stored < decoded
                                          : decoded > stored * kMaxCompressionRatio) {
        fail(where + "'s " + unit + std::to_string(s) + " claims " + std::to_string(decoded) +
             " bytes of pixels but stores " + std::to_string(stored) +
             (compression == COMPRESSION_NONE
                  ? " uncompressed"
                  : " compressed (more than " + std::to_string(kMaxCompressionRatio) + ":1)") +
             "; the file is damaged or not what it claims");
      }
    }
  }

  std::vector<Page> scan_pages() {
    std::vector<Page> pages;
    TIFF* tif = tif_.get();
    for (tdir_t directory = 0;; ++directory) {
      const std::string where = "page " + std::to_string(directory + 1);
      const std::uint32_t subfile = tag<std::uint32_t>(TIFFTAG_SUBFILETYPE, 0);
      if ((subfile & FILETYPE_REDUCEDIMAGE) == 0) {
        Page page;
        page.directory = directory;
        page.width = tag<std::uint32_t>(TIFFTAG_IMAGEWIDTH, 0);
        page.height = tag<std::uint32_t>(TIFFTAG_IMAGELENGTH, 0);
        if (page.width == 0 || page.height == 0) fail(where + " is empty (width or length 0)");
        page.sample = sample_format(where);
        check_claims(where, page);
        if (!pages.empty()) {
          const Page& first = pages.front();
          if (page.width != first.width || page.height != first.height ||
              sample_type_name(page.sample) != sample_type_name(first.sample)) {
            fail(where + " is " + std::to_string(page.width) + "x" + std::to_string(page.height) +
                 " " + sample_type_name(page.sample) + " but page 1 is " +
                 std::to_string(first.width) + "x" + std::to_string(first.height) + " " +
                 sample_type_name(first.sample) + "; all pages of a stack must match");
          }
        }
        pages.push_back(page);
      }
      diagnostics_.first_error.clear();
      if (!TIFFReadDirectory(tif)) {
        // 0 means either the end of the chain or a damaged directory; only the latter reports.
        if (!diagnostics_.first_error.empty()) fail_libtiff("has a damaged image directory");
        break;
      }
    }
    if (pages.empty()) fail("holds no full-resolution image");
    return pages;
  }

  void decode_page(const Page& page, float* dst) {
    TIFF* tif = tif_.get();
    const std::string where = "page " + std::to_string(page.directory + 1);
    if (!TIFFSetDirectory(tif, page.directory)) fail_libtiff("cannot reread " + where);
    const std::int64_t bytes = page.sample.bytes;
    std::vector<std::uint8_t> buffer;
    if (TIFFIsTiled(tif)) {
      const std::uint32_t tile_width = tag<std::uint32_t>(TIFFTAG_TILEWIDTH, 0);
      const std::uint32_t tile_height = tag<std::uint32_t>(TIFFTAG_TILELENGTH, 0);
      buffer.resize(static_cast<std::size_t>(std::uint64_t{tile_width} * tile_height * bytes));
      for (std::uint32_t y = 0; y < page.height; y += tile_height) {
        for (std::uint32_t x = 0; x < page.width; x += tile_width) {
          const ttile_t tile = TIFFComputeTile(tif, x, y, 0, 0);
          if (TIFFReadEncodedTile(tif, tile, buffer.data(), static_cast<tmsize_t>(buffer.size())) <
              static_cast<tmsize_t>(buffer.size())) {
            fail_libtiff("cannot decode " + where + "'s tile " + std::to_string(tile));
          }
          // Tiles on the right and bottom edges overhang the image; keep the part inside.
          const std::uint32_t rows = std::min(tile_height, page.height - y);
          const std::uint32_t cols = std::min(tile_width, page.width - x);
          for (std::uint32_t r = 0; r < rows; ++r) {
            decode_samples(buffer.data() + std::uint64_t{r} * tile_width * bytes, cols, page.sample,
                           dst + std::uint64_t{y + r} * page.width + x);
          }
        }
      }
      return;
    }
    const std::uint32_t rows_per_strip =
        std::min(tag<std::uint32_t>(TIFFTAG_ROWSPERSTRIP, page.height), page.height);
    const std::uint64_t row_bytes = std::uint64_t{page.width} * bytes;
    buffer.resize(static_cast<std::size_t>(rows_per_strip * row_bytes));
    for (std::uint32_t first_row = 0; first_row < page.height; first_row += rows_per_strip) {
      const std::uint32_t rows = std::min(rows_per_strip, page.height - first_row);
      const tstrip_t strip = TIFFComputeStrip(tif, first_row, 0);
      const tmsize_t wanted = static_cast<tmsize_t>(rows * row_bytes);
      if (TIFFReadEncodedStrip(tif, strip, buffer.data(), wanted) < wanted) {
        fail_libtiff("cannot decode " + where + "'s strip " + std::to_string(strip));
      }
      decode_samples(buffer.data(), static_cast<std::int64_t>(rows) * page.width, page.sample,
                     dst + std::uint64_t{first_row} * page.width);
    }
  }

  TiffStack decode(const std::vector<Page>& pages) {
    TiffStack stack;
    stack.pages = static_cast<std::int64_t>(pages.size());
    stack.height = pages.front().height;
    stack.width = pages.front().width;
    stack.sample_format = pages.front().sample;
    const std::uint64_t plane64 = std::uint64_t{pages.front().height} * pages.front().width;
    if (plane64 > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) /
                      static_cast<std::uint64_t>(stack.pages)) {
      fail("declares more voxels than can be addressed");
    }
    const auto plane = static_cast<std::int64_t>(plane64);
    stack.values.resize(static_cast<std::size_t>(plane * stack.pages));
    for (std::size_t p = 0; p < pages.size(); ++p) {
      decode_page(pages[p], stack.values.data() + static_cast<std::int64_t>(p) * plane);
    }
    return stack;
  }

  InputFile file_;
  Diagnostics diagnostics_;
  TiffHandle tif_;
};

}  // namespace

TiffStack read_tiff(const std::string& path) { return Reader(path).read(); }

}  // namespace fieldfuse::cli
