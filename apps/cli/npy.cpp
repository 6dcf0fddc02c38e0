// SPDX-License-Identifier: Apache-2.0
// Reading NumPy .npy arrays (numeric dtypes, C or Fortran order) and writing float32 .npy files.
//
// The format: the magic "\x93NUMPY", a major and minor version byte, a little-endian header length
// (2 bytes in version 1, 4 bytes in versions 2 and 3), then a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (64, 64, 64), } padded with spaces to a
// multiple of 64 bytes and ended by '\n', then the raw data.
#include "npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include "cli_error.h"
#include "file_io.h"
#include "raw_samples.h"

namespace fieldfuse::cli {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6;
// numpy aligns the data start to 64 bytes so that memory-mapped arrays are aligned for SIMD.
constexpr std::size_t kHeaderAlignment = 64;
// numpy itself refuses headers over 10 000 bytes by default; a much larger cap still refuses a
// length field that would have us allocate gigabytes for a "header".
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{1} << 20;

// Reads the tiny subset of Python literal syntax that .npy headers use.
class HeaderParser {
 public:
  HeaderParser(std::string text, std::string source)
      : text_(std::move(text)), source_(std::move(source)) {}

  std::string string_value(const std::string& key) {
    seek_value(key);
    const char quote = peek();
    if (quote == '[') fail("structured dtypes (records) are not supported");
    if (quote != '\'' && quote != '"') fail("expected a quoted string for '" + key + "'");
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string for '" + key + "'");
    std::string value = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return value;
  }

  bool bool_value(const std::string& key) {
    seek_value(key);
    if (text_.compare(pos_, 4, "True") == 0) return true;
    if (text_.compare(pos_, 5, "False") == 0) return false;
    fail("expected True or False for '" + key + "'");
    return false;
  }

  std::vector<std::int64_t> tuple_value(const std::string& key) {
    seek_value(key);
    if (peek() != '(') fail("expected a tuple for '" + key + "'");
    ++pos_;
    std::vector<std::int64_t> items;
    for (;;) {
      skip_spaces();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad entry in '" + key + "'");
      std::int64_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (value > (std::numeric_limits<std::int64_t>::max() - 9) / 10)
          fail("'" + key + "' overflows");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 wrote long integers with a suffix.
      items.push_back(value);
      skip_spaces();
      if (peek() == ',')
        ++pos_;
      else if (peek() != ')')
        fail("bad separator in '" + key + "'");
    }
    ++pos_;
    return items;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_spaces() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void seek_value(const std::string& key) {
    std::size_t at = text_.find("'" + key + "'");
    if (at == std::string::npos) at = text_.find("\"" + key + "\"");
    if (at == std::string::npos) fail("the header has no '" + key + "' entry");
    pos_ = at + key.size() + 2;
    skip_spaces();
    if (peek() != ':') fail("expected ':' after '" + key + "'");
    ++pos_;
    skip_spaces();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error("'" + source_ + "' is not a valid .npy file: " + what);
  }

  std::string text_;
  std::string source_;
  std::size_t pos_ = 0;
};

SampleFormat parse_descr(const std::string& descr, const std::string& source) {
  const auto unsupported = [&](const std::string& why) {
    return input_error("'" + source + "' has dtype '" + descr + "', which is not supported (" +
                       why + "); accepted: bool, int8-int64, uint8-uint64, float16, float32, " +
                       "float64, either byte order");
  };
  if (descr.size() < 3) throw unsupported("unrecognised descriptor");
  const char order = descr[0];
  const char code = descr[1];
  int bytes = 0;
  for (std::size_t i = 2; i < descr.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(descr[i])))
      throw unsupported("unrecognised descriptor");
    bytes = bytes * 10 + (descr[i] - '0');
    if (bytes > 64) throw unsupported("unrecognised size");
  }
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    throw unsupported("unrecognised byte order '" + std::string(1, order) + "'");
  }
  SampleFormat format;
  format.bytes = bytes;
  // '=' is the writer's native order; numpy writes '<' or '>' explicitly, so '=' is rare.
  format.big_endian = order == '>' || (order == '=' && kHostBigEndian);
  switch (code) {
    case 'f':
      format.kind = SampleKind::Float;
      if (bytes > 8) throw unsupported("extended-precision floats are not read");
      break;
    case 'i':
      format.kind = SampleKind::SignedInt;
      break;
    case 'u':
    case 'b':  // numpy bools are one byte holding 0 or 1
      format.kind = SampleKind::UnsignedInt;
      break;
    case 'c':
      // Note [complex input]: denoising here means TV on real intensities; picking a part (real,
      // imaginary, magnitude, phase) silently would be a guess, so the user chooses.
      throw unsupported(
          "complex values: the denoiser works on real intensities; save np.abs(a), a.real or "
          "np.angle(a) as a real array and denoise that");
    default:
      throw unsupported("not a numeric dtype");
  }
  if (!is_supported(format)) throw unsupported("unsupported sample size");
  return format;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

// Element count of `shape`, or an input error when it overflows what can be addressed.
std::int64_t checked_element_count(const std::vector<std::int64_t>& shape,
                                   std::int64_t sample_bytes, const std::string& source) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    if (extent != 0 && count > std::numeric_limits<std::int64_t>::max() / sample_bytes / extent) {
      throw input_error("'" + source + "' declares a shape too large to load");
    }
    count *= extent;
  }
  return count;
}

// Moves Fortran-ordered (first index fastest) values into C order (last index fastest).
std::vector<float> fortran_to_c_order(const std::vector<float>& fortran,
                                      const std::vector<std::int64_t>& shape) {
  const std::size_t ndim = shape.size();
  std::vector<float> c_order(fortran.size());
  std::vector<std::int64_t> index(ndim, 0);
  for (std::size_t c = 0; c < c_order.size(); ++c) {
    std::int64_t fortran_offset = 0;
    for (std::size_t d = ndim; d-- > 0;) fortran_offset = fortran_offset * shape[d] + index[d];
    c_order[c] = fortran[static_cast<std::size_t>(fortran_offset)];
    // Advance the C-order multi-index: the last axis moves fastest.
    for (std::size_t d = ndim; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return c_order;
}

std::uint32_t read_le(const std::uint8_t* p, int bytes) {
  std::uint32_t value = 0;
  for (int b = bytes - 1; b >= 0; --b) value = (value << 8) | p[b];
  return value;
}

// An in-memory .npy, read through the same interface as an InputFile.
class MemorySource {
 public:
  explicit MemorySource(const std::vector<std::uint8_t>& bytes) : bytes_(bytes) {}
  std::uint64_t size() const { return bytes_.size(); }
  void read_exact(void* destination, std::uint64_t bytes, const char* what,
                  const std::string& name) {
    if (bytes > bytes_.size() - position_) {
      throw input_error("'" + name + "' is truncated inside " + what);
    }
    std::memcpy(destination, bytes_.data() + position_, bytes);
    position_ += bytes;
  }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::uint64_t position_ = 0;
};

// Adapts InputFile to MemorySource's read_exact signature.
struct FileSource {
  InputFile& file;
  std::uint64_t size() const { return file.size(); }
  void read_exact(void* destination, std::uint64_t bytes, const char* what, const std::string&) {
    file.read_exact(destination, bytes, what);
  }
};

// Reads the header first and checks every promise it makes against the file's size, so nothing
// is allocated for data that is not there (a 10-byte file cannot claim a gigabyte).
template <class Source>
NpyArray read_npy_from(Source& source, const std::string& name) {
  std::uint8_t preamble[12] = {};
  if (source.size() < kMagicBytes + 4) {
    throw input_error("'" + name + "' is not a .npy file (missing the \\x93NUMPY magic)");
  }
  source.read_exact(preamble, kMagicBytes + 2, "its preamble", name);
  if (std::memcmp(preamble, kMagic, kMagicBytes) != 0) {
    throw input_error("'" + name + "' is not a .npy file (missing the \\x93NUMPY magic)");
  }
  const int major = preamble[6];
  if (major < 1 || major > 3) {
    throw input_error("'" + name + "' uses .npy format version " + std::to_string(major) +
                      ", expected 1, 2 or 3");
  }
  const int length_bytes = major == 1 ? 2 : 4;
  source.read_exact(preamble + 8, static_cast<std::uint64_t>(length_bytes), "its header", name);
  const std::uint64_t header_start = 8 + static_cast<std::uint64_t>(length_bytes);
  const std::uint64_t header_length = read_le(preamble + 8, length_bytes);
  if (header_length > kMaxHeaderBytes) {
    throw input_error("'" + name + "' claims a " + std::to_string(header_length) +
                      "-byte header; .npy headers are a short dict (at most " +
                      std::to_string(kMaxHeaderBytes) + " bytes are read)");
  }
  std::string header_text(static_cast<std::size_t>(header_length), '\0');
  source.read_exact(header_text.data(), header_length, "its header", name);
  HeaderParser header(std::move(header_text), name);
  const SampleFormat format = parse_descr(header.string_value("descr"), name);
  const bool fortran_order = header.bool_value("fortran_order");
  NpyArray array;
  array.shape = header.tuple_value("shape");

  const std::int64_t count = checked_element_count(array.shape, format.bytes, name);
  const std::uint64_t data_start = header_start + header_length;
  const std::uint64_t data_bytes = static_cast<std::uint64_t>(count) * format.bytes;
  const std::uint64_t held = source.size() - data_start;
  if (held < data_bytes) {
    throw input_error("'" + name + "' is truncated: its shape " + shape_text(array.shape) + " of " +
                      sample_type_name(format) + " needs " + std::to_string(data_bytes) +
                      " data bytes, but the file holds " + std::to_string(held));
  }
  if (held > data_bytes) {
    throw input_error("'" + name + "' has " + std::to_string(held - data_bytes) +
                      " bytes after the data its header describes (shape " +
                      shape_text(array.shape) + ", " + sample_type_name(format) +
                      "); its size does not match its header");
  }
  array.values.resize(static_cast<std::size_t>(count));
  // Decode in chunks so the raw bytes never need a second whole-volume buffer.
  constexpr std::int64_t kChunkSamples = std::int64_t{1} << 18;
  std::vector<std::uint8_t> chunk(
      static_cast<std::size_t>(std::min<std::int64_t>(count, kChunkSamples) * format.bytes));
  for (std::int64_t first = 0; first < count; first += kChunkSamples) {
    const std::int64_t samples = std::min(kChunkSamples, count - first);
    source.read_exact(chunk.data(), static_cast<std::uint64_t>(samples * format.bytes), "its data",
                      name);
    decode_samples(chunk.data(), samples, format, array.values.data() + first);
  }
  if (fortran_order && array.shape.size() > 1) {
    array.values = fortran_to_c_order(array.values, array.shape);
  }
  return array;
}

}  // namespace

NpyArray parse_npy(const std::vector<std::uint8_t>& bytes, const std::string& source_name) {
  MemorySource source(bytes);
  return read_npy_from(source, source_name);
}

NpyArray read_npy(const std::string& path) {
  InputFile file(path);
  FileSource source{file};
  return read_npy_from(source, path);
}

std::string npy_float32_header(const std::vector<std::int64_t>& shape) {
  std::string shape_text = "(";
  for (const std::int64_t extent : shape) shape_text += std::to_string(extent) + ", ";
  // A one-element Python tuple needs its trailing comma; others read better without.
  if (shape.size() > 1)
    shape_text.resize(shape_text.size() - 2);
  else if (shape.size() == 1)
    shape_text.resize(shape_text.size() - 1);
  shape_text += ")";

  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text + ", }";
  const std::size_t preamble = kMagicBytes + 2 + 2;
  const std::size_t padded =
      (preamble + header.size() + 1 + kHeaderAlignment - 1) / kHeaderAlignment * kHeaderAlignment;
  header.append(padded - preamble - header.size() - 1, ' ');
  header += '\n';

  std::string file(kMagic, kMagicBytes);
  file += '\x01';  // format version 1.0: the header fits in 65535 bytes
  file += '\x00';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  return file + header;
}

void write_npy_float32(OutputStream& out, const std::vector<std::int64_t>& shape,
                       const float* values) {
  const std::string header = npy_float32_header(shape);
  out.write(header.data(), header.size());
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) count *= extent;
  out.write_float32_le(values, count);
}

std::vector<std::uint8_t> encode_npy_float32(const std::vector<std::int64_t>& shape,
                                             const float* values) {
  const std::string header = npy_float32_header(shape);
  std::vector<std::uint8_t> bytes(header.begin(), header.end());
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) count *= extent;
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof(bits));
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<std::uint8_t>(bits >> (8 * b)));
  }
  return bytes;
}

}  // namespace fieldfuse::cli
