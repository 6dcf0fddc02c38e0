// SPDX-License-Identifier: Apache-2.0
// Writing a float32 volume as a multi-page TIFF (one page per slice) through libtiff.
#include "tiff_writer.h"

#include <tiffio.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cli_error.h"

namespace fieldfuse::cli {
namespace {

// libtiff's client I/O on a growable byte buffer with a position.
struct MemoryFile {
  std::vector<std::uint8_t> bytes;
  std::uint64_t position = 0;
};

tmsize_t memory_read(thandle_t handle, void* data, tmsize_t size) {
  auto* file = static_cast<MemoryFile*>(handle);
  const std::uint64_t available =
      file->position < file->bytes.size() ? file->bytes.size() - file->position : 0;
  const auto n = std::min<std::uint64_t>(available, static_cast<std::uint64_t>(size));
  std::memcpy(data, file->bytes.data() + file->position, n);
  file->position += n;
  return static_cast<tmsize_t>(n);
}

tmsize_t memory_write(thandle_t handle, void* data, tmsize_t size) {
  auto* file = static_cast<MemoryFile*>(handle);
  const std::uint64_t end = file->position + static_cast<std::uint64_t>(size);
  if (end > file->bytes.size()) file->bytes.resize(end);
  std::memcpy(file->bytes.data() + file->position, data, static_cast<std::size_t>(size));
  file->position = end;
  return size;
}

toff_t memory_seek(thandle_t handle, toff_t offset, int whence) {
  auto* file = static_cast<MemoryFile*>(handle);
  const std::uint64_t base = whence == SEEK_CUR   ? file->position
                             : whence == SEEK_END ? file->bytes.size()
                                                  : 0;
  file->position = base + offset;
  return file->position;
}

int memory_close(thandle_t) { return 0; }
toff_t memory_size(thandle_t handle) { return static_cast<MemoryFile*>(handle)->bytes.size(); }
int no_map(thandle_t, void**, toff_t*) { return 0; }
void no_unmap(thandle_t, void*, toff_t) {}

}  // namespace

std::vector<std::uint8_t> encode_tiff_float32(std::int64_t depth, std::int64_t height,
                                              std::int64_t width, const float* values) {
  MemoryFile file;
  const std::uint64_t data_bytes = static_cast<std::uint64_t>(depth * height * width) * 4;
  // Classic TIFF offsets are 32-bit; leave room for the directories.
  const char* mode = data_bytes > (std::uint64_t{1} << 31) ? "w8l" : "wl";
  TIFF* tif = TIFFClientOpen("volume.tif", mode, &file, memory_read, memory_write, memory_seek,
                             memory_close, memory_size, no_map, no_unmap);
  if (tif == nullptr) throw runtime_error("cannot encode a TIFF file (libtiff refused to open)");
  const auto fail = [tif](const std::string& what) {
    TIFFClose(tif);
    throw runtime_error("cannot encode a TIFF file: " + what);
  };
  const tmsize_t page_bytes = static_cast<tmsize_t>(height * width * 4);
  for (std::int64_t page = 0; page < depth; ++page) {
    const bool tags_ok =
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, static_cast<std::uint32_t>(width)) &&
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, static_cast<std::uint32_t>(height)) &&
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 32) &&
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1) &&
        TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP) &&
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
        TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
        TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE) &&
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, static_cast<std::uint32_t>(height)) &&
        TIFFSetField(tif, TIFFTAG_SUBFILETYPE, FILETYPE_PAGE) &&
        TIFFSetField(tif, TIFFTAG_PAGENUMBER, static_cast<std::uint16_t>(page),
                     static_cast<std::uint16_t>(depth));
    if (!tags_ok) fail("setting the tags of page " + std::to_string(page));
    // libtiff swaps to the file's byte order itself; it may scribble on the buffer, so copy.
    std::vector<float> slice(values + page * height * width, values + (page + 1) * height * width);
    if (TIFFWriteEncodedStrip(tif, 0, slice.data(), page_bytes) != page_bytes) {
      fail("writing page " + std::to_string(page));
    }
    if (!TIFFWriteDirectory(tif)) fail("finishing page " + std::to_string(page));
  }
  TIFFClose(tif);
  return std::move(file.bytes);
}

}  // namespace fieldfuse::cli
