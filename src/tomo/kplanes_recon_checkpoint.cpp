// SPDX-License-Identifier: Apache-2.0
// KPlanesReconstruction checkpoints: a small binary file with the options, every parameter, its
// Adam moments and the step, written atomically.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "tomo/kplanes_recon_impl.h"

namespace fieldfuse {
namespace {

// Note [checkpoint format]
// All integers are 64-bit (u64/i64) in the writing machine's byte order, checked on load with
// the marker; floats are the reconstruction's dtype, raw.
//   "FFKPRCKP" (8 bytes), u32 version (1), u32 byte-order marker 0x01020304,
//   u64 option count, then per option: u64 length + name bytes, u64 length + value text
//     (describe(options): every option, so a mismatch names the option that differs),
//   i64 n, H, W, then n float64 angles (degrees),
//   i64 step (the optimiser's counter),
//   u64 tensor count, then per tensor: u64 length + name, i64 numel, then its values, exp_avg
//     and exp_avg_sq (numel elements each),
//   "FFKPEND\0" (8 bytes).
// Loading checks the magic, version, byte order, options, stack shape, angles, each tensor's
// name and size, and the end marker, and names what differs.
constexpr char kMagic[8] = {'F', 'F', 'K', 'P', 'R', 'C', 'K', 'P'};
constexpr char kEnd[8] = {'F', 'F', 'K', 'P', 'E', 'N', 'D', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304;

constexpr const char* kSaveOp = "kplanes_reconstruct.save_checkpoint";
constexpr const char* kLoadOp = "kplanes_reconstruct.load_checkpoint";

// C stdio rather than fstreams: Note [no iostreams] in src/core/core.cpp.
struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

class Writer {
 public:
  explicit Writer(std::FILE* out) : out_(out) {}
  void bytes(const void* data, std::size_t n) { ok_ = ok_ && std::fwrite(data, 1, n, out_) == n; }
  bool ok() const { return ok_; }
  template <class V>
  void value(V v) {
    bytes(&v, sizeof(V));
  }
  void text(const std::string& s) {
    value<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }

 private:
  std::FILE* out_;
  bool ok_ = true;
};

class Reader {
 public:
  Reader(std::FILE* in, const std::string& path) : in_(in), path_(path) {}
  void bytes(void* data, std::size_t n) {
    if (std::fread(data, 1, n, in_) != n) fail("is truncated or unreadable");
  }
  template <class V>
  V value() {
    V v{};
    bytes(&v, sizeof(V));
    return v;
  }
  std::string text() {
    const uint64_t n = value<uint64_t>();
    if (n > (1u << 20)) fail("is corrupt (a name of " + std::to_string(n) + " bytes)");
    std::string s(n, '\0');
    bytes(s.data(), n);
    return s;
  }
  [[noreturn]] void fail(const std::string& what) const {
    detail::fail(ErrorKind::Value, kLoadOp, "checkpoint \"" + path_ + "\" " + what);
  }

 private:
  std::FILE* in_;
  std::string path_;
};

}  // namespace

void KPlanesReconstruction::save_checkpoint(const std::string& path) const {
  const Impl& s = *impl_;
  const std::string temp = path + ".tmp";
  {
    File out(std::fopen(temp.c_str(), "wb"));
    if (!out) {
      detail::fail(ErrorKind::Value, kSaveOp, "cannot open \"" + temp + "\" for writing");
    }
    Writer w(out.get());
    w.bytes(kMagic, sizeof(kMagic));
    w.value<uint32_t>(kVersion);
    w.value<uint32_t>(kByteOrder);
    const auto described = describe(s.options);
    w.value<uint64_t>(described.size());
    for (const auto& [name, value] : described) {
      w.text(name);
      w.text(value);
    }
    w.value<int64_t>(s.projections);
    w.value<int64_t>(s.height);
    w.value<int64_t>(s.width);
    w.bytes(s.angles.data(), s.angles.size() * sizeof(double));
    w.value<int64_t>(steps_done());
    w.value<uint64_t>(s.params.size());
    std::vector<char> host;
    for (const ReconParam& p : s.params) {
      w.text(p.name);
      w.value<int64_t>(p.numel());
      for (const detail::tomo::Buffer* b : {&p.value, &p.exp_avg, &p.exp_avg_sq}) {
        host.resize(b->bytes());
        b->download(host.data(), s.stream);
        w.bytes(host.data(), host.size());
      }
    }
    w.bytes(kEnd, sizeof(kEnd));
    const bool flushed = std::fflush(out.get()) == 0;
    if (!w.ok() || !flushed || std::fclose(out.release()) != 0) {
      std::remove(temp.c_str());
      detail::fail(ErrorKind::Runtime, kSaveOp, "writing \"" + temp + "\" failed");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    detail::fail(ErrorKind::Runtime, kSaveOp,
                 "cannot rename \"" + temp + "\" to \"" + path + "\": " + std::strerror(errno));
  }
}

void KPlanesReconstruction::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  File in(std::fopen(path.c_str(), "rb"));
  if (!in) detail::fail(ErrorKind::Value, kLoadOp, "cannot open checkpoint \"" + path + "\"");
  Reader r(in.get(), path);
  char magic[8];
  r.bytes(magic, sizeof(magic));
  if (std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    r.fail("is not a K-Planes reconstruction checkpoint (bad magic)");
  }
  const uint32_t version = r.value<uint32_t>();
  if (version != kVersion) {
    r.fail("has version " + std::to_string(version) + ", expected " + std::to_string(kVersion));
  }
  if (r.value<uint32_t>() != kByteOrder) r.fail("was written with another byte order");
  const auto described = describe(s.options);
  const uint64_t count = r.value<uint64_t>();
  if (count != described.size()) {
    r.fail("holds " + std::to_string(count) + " options, expected " +
           std::to_string(described.size()));
  }
  for (const auto& [name, value] : described) {
    const std::string got_name = r.text(), got_value = r.text();
    if (got_name != name)
      r.fail("has option \"" + got_name + "\" where \"" + name + "\" was expected");
    if (got_value != value) {
      r.fail("was made with options." + name + " = " + got_value +
             ", but this reconstruction has " + value);
    }
  }
  const int64_t n = r.value<int64_t>(), height = r.value<int64_t>(), width = r.value<int64_t>();
  if (n != s.projections || height != s.height || width != s.width) {
    r.fail("is of a stack [" + std::to_string(n) + ", " + std::to_string(height) + ", " +
           std::to_string(width) + "], but this stack is [" + std::to_string(s.projections) + ", " +
           std::to_string(s.height) + ", " + std::to_string(s.width) + "]");
  }
  std::vector<double> angles(static_cast<std::size_t>(n));
  r.bytes(angles.data(), angles.size() * sizeof(double));
  for (int64_t m = 0; m < n; ++m) {
    if (angles[m] != s.angles[m]) {
      r.fail("has angles[" + std::to_string(m) + "] = " + detail::number_text(angles[m]) +
             ", but this reconstruction has " + detail::number_text(s.angles[m]));
    }
  }
  const int64_t step = r.value<int64_t>();
  if (r.value<uint64_t>() != s.params.size()) r.fail("holds another number of tensors");
  // Read everything before changing any state, so a bad file leaves the reconstruction intact.
  std::vector<std::vector<char>> contents;
  for (const ReconParam& p : s.params) {
    const std::string name = r.text();
    const int64_t numel = r.value<int64_t>();
    if (name != p.name || numel != p.numel()) {
      r.fail("holds tensor \"" + name + "\" of " + std::to_string(numel) + " elements where \"" +
             p.name + "\" of " + std::to_string(p.numel()) + " was expected");
    }
    for (int k = 0; k < 3; ++k) {
      contents.emplace_back(p.value.bytes());
      r.bytes(contents.back().data(), contents.back().size());
    }
  }
  char end[8];
  r.bytes(end, sizeof(end));
  if (std::memcmp(end, kEnd, sizeof(end)) != 0) r.fail("is corrupt (bad end marker)");
  std::size_t next = 0;
  for (ReconParam& p : s.params) {
    for (detail::tomo::Buffer* b : {&p.value, &p.exp_avg, &p.exp_avg_sq}) {
      b->upload(contents[next++].data(), s.stream);
    }
  }
  s.step_counter.upload(&step, s.stream);
  s.host_steps = step;
}

}  // namespace fieldfuse
