// MNIST idx files (http://yann.lecun.com/exdb/mnist/): a big-endian header
//   0x00 0x00 <type> <ndim>, then ndim 32-bit extents, then the data (big-endian)
// with type 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
// zlib's gzread reads gzipped and plain files alike.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "data/formats.h"
#include "data/open_dataset.h"

namespace seqto::data::internal {

namespace {

// Largest idx payload we read (a corrupt header must not allocate terabytes).
constexpr uint64_t kMaxIdxBytes = uint64_t{16} << 30;

DType IdxType(unsigned char code) {
  switch (code) {
    case 0x08:
      return DType::kUInt8;
    case 0x09:
      return DType::kInt8;
    case 0x0B:
      return DType::kInt16;
    case 0x0C:
      return DType::kInt32;
    case 0x0D:
      return DType::kFloat32;
    case 0x0E:
      return DType::kFloat64;
    default:
      return DType::kUndefined;
  }
}

class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  bool ok() const { return f_ != nullptr; }
  // Reads up to n bytes; returns the count, or -1 on a decompression error.
  int64_t Read(void* out, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, 1u << 30));
      const int r = gzread(f_, static_cast<char*>(out) + done, chunk);
      if (r < 0) return -1;
      if (r == 0) break;
      done += static_cast<uint64_t>(r);
    }
    return static_cast<int64_t>(done);
  }
  // Moves to an absolute (decompressed) offset; forward only in gzipped files is
  // cheap, zlib decompresses up to there.
  bool Seek(uint64_t offset) { return gzseek64(f_, static_cast<z_off64_t>(offset), SEEK_SET) >= 0; }
  std::string ErrorText() {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    return msg && *msg ? msg : "read error";
  }

 private:
  gzFile f_;
};

struct IdxHeader {
  DType dtype = DType::kUndefined;
  Shape shape;
  uint64_t data_start = 0;  // offset of the data in the (decompressed) file
  uint64_t nbytes = 0;      // size of the data
  bool gzipped = false;
  std::string Describe() const { return DTypeName(dtype) + "[" + ShapeToString(shape) + "]"; }
};

// Big-endian elements to host order, in place.
void SwapToHost(void* data, uint64_t nbytes, size_t element_size) {
  if (element_size < 2) return;
  auto* p = static_cast<unsigned char*>(data);
  for (uint64_t i = 0; i < nbytes; i += element_size)
    for (size_t a = 0, b = element_size - 1; a < b; ++a, --b) std::swap(p[i + a], p[i + b]);
}

// Reads `n` data bytes from data offset `offset` (into host order): a seek for a plain
// file, decompression up to there for a gzipped one.
Status ReadIdxBytes(const std::string& path, const IdxHeader& h, uint64_t offset, uint64_t n, void* out) {
  GzFile f(path);
  if (!f.ok()) return UserError(path + ": cannot open file");
  if (!f.Seek(h.data_start + offset)) return UserError(path + ": cannot seek to byte " + std::to_string(offset));
  const int64_t r = f.Read(out, n);
  if (r < 0) return UserError(path + ": " + f.ErrorText());
  if (static_cast<uint64_t>(r) < n) return UserError(path + ": truncated (the file changed while it was read?)");
  SwapToHost(out, n, DTypeSize(h.dtype));
  return Status::Ok();
}

// Samples are read when asked for, so asking for 8 samples of a million reads 8 rows
// (a plain file seeks to them). A gzipped file cannot seek: Prefetch reads the rows a
// run will use in one pass, keeping only those.
class IdxDataset : public Dataset {
 public:
  IdxDataset(std::string path, IdxHeader header, PreprocessSpec spec)
      : path_(std::move(path)), h_(std::move(header)), spec_(std::move(spec)) {
    row_bytes_ = h_.shape[0] == 0 ? 0 : h_.nbytes / static_cast<uint64_t>(h_.shape[0]);
  }

  int64_t size() const override { return h_.shape[0]; }
  Status Prefetch(const std::vector<int64_t>& indices) const override {
    if (!h_.gzipped || indices.empty() || row_bytes_ == 0) return Status::Ok();
    auto rows = std::make_shared<Rows>();
    rows->indices = indices;
    std::sort(rows->indices.begin(), rows->indices.end());
    rows->indices.erase(std::unique(rows->indices.begin(), rows->indices.end()), rows->indices.end());
    rows->bytes.resize(rows->indices.size() * row_bytes_);
    GzFile f(path_);
    if (!f.ok()) return UserError(path_ + ": cannot open file");
    for (size_t k = 0; k < rows->indices.size(); ++k) {
      const uint64_t at = static_cast<uint64_t>(rows->indices[k]) * row_bytes_;
      if (!f.Seek(h_.data_start + at) ||
          f.Read(&rows->bytes[k * row_bytes_], row_bytes_) != static_cast<int64_t>(row_bytes_))
        return UserError(SampleName(rows->indices[k]) + ": cannot read the sample (did the file change?)");
    }
    SwapToHost(rows->bytes.data(), rows->bytes.size(), DTypeSize(h_.dtype));
    std::lock_guard<std::mutex> lock(mu_);
    rows_ = std::move(rows);
    return Status::Ok();
  }
  Expected<std::vector<Tensor>> Get(int64_t index) const override {
    Shape row_shape(h_.shape.begin() + 1, h_.shape.end());
    Tensor row(h_.dtype, row_shape);
    SEQTO_RETURN_IF_ERROR(ReadRow(index, row.raw()));
    // An image set (N x H x W) gets a channel axis where a layout was asked for.
    if (h_.shape.size() == 3 && spec_.has("layout"))
      row = row.Reshaped(spec_.layout == Layout::kNchw ? Shape{1, h_.shape[1], h_.shape[2]}
                                                       : Shape{h_.shape[1], h_.shape[2], 1});
    auto out = PreprocessTensor(row, spec_, spec_.layout == Layout::kNhwc ? row.rank() - 1 : 0);
    if (!out) return std::move(out).WithContext(SampleName(index)).error();
    return std::vector<Tensor>{std::move(*out)};
  }
  std::string SampleName(int64_t index) const override { return path_ + "[" + std::to_string(index) + "]"; }
  std::string description() const override { return "idx file '" + path_ + "' (" + h_.Describe() + ")"; }

 private:
  struct Rows {
    std::vector<int64_t> indices;  // sorted
    std::vector<char> bytes;       // their rows, in that order, host byte order
  };

  Status ReadRow(int64_t index, void* out) const {
    std::shared_ptr<const Rows> rows;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rows = rows_;
    }
    if (rows) {
      auto it = std::lower_bound(rows->indices.begin(), rows->indices.end(), index);
      if (it != rows->indices.end() && *it == index) {
        std::memcpy(out, &rows->bytes[static_cast<size_t>(it - rows->indices.begin()) * row_bytes_], row_bytes_);
        return Status::Ok();
      }
    }
    return ReadIdxBytes(path_, h_, static_cast<uint64_t>(index) * row_bytes_, row_bytes_, out)
        .WithContext(SampleName(index));
  }

  std::string path_;
  IdxHeader h_;
  PreprocessSpec spec_;
  uint64_t row_bytes_ = 0;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Rows> rows_;
};

// "t10k-images-idx3-ubyte.gz" -> candidates "t10k-labels-idx1-ubyte.gz", "...-ubyte".
std::string FindLabelsFile(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::string name = p.filename().string();
  const size_t images = name.find("images");
  const size_t idx3 = name.find("idx3");
  if (images == std::string::npos || idx3 == std::string::npos) return "";
  name.replace(idx3, 4, "idx1");
  name.replace(name.find("images"), 6, "labels");
  std::string stem = name;
  if (stem.size() > 3 && stem.substr(stem.size() - 3) == ".gz") stem.resize(stem.size() - 3);
  for (const std::string& candidate : {name, stem, stem + ".gz"}) {
    std::error_code ec;
    const fs::path c = p.parent_path() / candidate;
    if (fs::is_regular_file(c, ec)) return c.string();
  }
  return "";
}

// The first n bytes of the file as stored.
std::string PeekRaw(const std::string& path, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string out(n, '\0');
  out.resize(std::fread(out.data(), 1, n, f));
  std::fclose(f);
  return out;
}

}  // namespace

std::string PeekDecompressed(const std::string& path, size_t n) {
  GzFile f(path);
  if (!f.ok()) return "";
  std::string out(n, '\0');
  const int64_t r = f.Read(out.data(), n);
  if (r < 0) return "";
  out.resize(static_cast<size_t>(r));
  return out;
}

bool IsIdxHeader(const std::string& head) {
  return head.size() >= 4 && head[0] == 0 && head[1] == 0 &&
         IdxType(static_cast<unsigned char>(head[2])) != DType::kUndefined && head[3] >= 1 && head[3] <= 8;
}

namespace {

// The header, checked against the file: the data must be all there and end it.
Expected<IdxHeader> ReadIdxHeader(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return UserError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) return UserError(path + ": is a directory, expected an idx file");
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return UserError(path + ": " + ec.message());
  GzFile f(path);
  if (!f.ok()) return UserError(path + ": cannot open file");
  unsigned char head[4];
  const int64_t got = f.Read(head, 4);
  if (got < 0) return UserError(path + ": " + f.ErrorText());
  if (got < 4 || !IsIdxHeader(std::string(reinterpret_cast<char*>(head), 4)))
    return UserError(path + ": not an idx file (bad magic number)");
  IdxHeader h;
  h.dtype = IdxType(head[2]);
  const int ndim = head[3];
  h.nbytes = DTypeSize(h.dtype);
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    if (f.Read(b, 4) != 4) return UserError(path + ": truncated idx header (dimension " + std::to_string(d) + ")");
    const uint32_t v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    h.shape.push_back(v);
    overflow |= __builtin_mul_overflow(h.nbytes, static_cast<uint64_t>(v), &h.nbytes);
  }
  const std::string describe = h.Describe();
  if (overflow || h.nbytes > kMaxIdxBytes)
    return UserError(path + ": idx header declares " + describe + ", which is too large");
  h.data_start = 4 + 4 * static_cast<uint64_t>(ndim);
  const std::string magic = PeekRaw(path, 2);
  h.gzipped = magic == "\x1f\x8b";
  auto truncated = [&](const std::string& how) {
    return UserError(path + ": truncated: " + describe + " needs " + std::to_string(h.nbytes) +
                     " bytes of data from byte " + std::to_string(h.data_start) + how);
  };
  if (!h.gzipped) {
    const uint64_t available = file_size > h.data_start ? static_cast<uint64_t>(file_size) - h.data_start : 0;
    if (h.nbytes > available) return truncated(", but the file ends at byte " + std::to_string(file_size));
    if (h.nbytes < available) return UserError(path + ": unexpected bytes after the data of " + describe);
    return h;
  }
  // Deflate compresses at most about 1032:1, so a gzipped file cannot hold more than
  // that many times its size: a lying header fails before anything is read.
  if (h.nbytes > static_cast<uint64_t>(file_size) * 1032 + 4096)
    return truncated(" (decompressed), more than the file can hold");
  // The data must be all there and end the file: checked by streaming through it,
  // without keeping it (a small .gz may inflate to gigabytes).
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (true) {
    const int64_t r = f.Read(buf.data(), buf.size());
    if (r < 0) return UserError(path + ": " + f.ErrorText());
    if (r == 0) break;
    total += static_cast<uint64_t>(r);
    if (total > h.nbytes) return UserError(path + ": unexpected bytes after the data of " + describe);
  }
  if (total < h.nbytes) return truncated(" (decompressed), but the data ends after " + std::to_string(total));
  return h;
}

}  // namespace

Expected<Tensor> ReadIdx(const std::string& path) {
  SEQTO_ASSIGN_OR_RETURN(IdxHeader h, ReadIdxHeader(path));
  Tensor t(h.dtype, h.shape, std::make_shared<Storage>(std::max<uint64_t>(h.nbytes, 1)));
  SEQTO_RETURN_IF_ERROR(ReadIdxBytes(path, h, 0, h.nbytes, t.raw()));
  return t;
}

Tensor SliceRow(const Tensor& t, int64_t index) {
  Shape row_shape(t.shape().begin() + 1, t.shape().end());
  Tensor row(t.dtype(), row_shape);
  const size_t bytes = row.nbytes();
  if (bytes) std::memcpy(row.raw(), static_cast<const char*>(t.raw()) + bytes * static_cast<size_t>(index), bytes);
  return row;
}

Expected<std::shared_ptr<Dataset>> OpenIdxDataset(const std::string& path, const PreprocessSpec& spec,
                                                  bool find_labels) {
  SEQTO_ASSIGN_OR_RETURN(IdxHeader header, ReadIdxHeader(path));
  if (header.shape.size() < 2)
    return UserError(
        path + ": a 1-D idx file holds labels, not samples (give the images file as data and this one as --labels)");
  if (header.shape[0] == 0) return UserError(path + ": the idx file holds no samples");
  SEQTO_RETURN_IF_ERROR(CheckKeysAllowed(spec, {"scale", "mean", "std", "color", "layout"}, path + " is an idx file"));
  if (spec.has("color") && (spec.color == ColorMode::kRgb || spec.color == ColorMode::kBgr))
    return UserError("preprocess key 'color': " + path + " holds gray images (use color=gray or leave it out)");
  auto ds = std::make_shared<IdxDataset>(path, std::move(header), spec);
  if (find_labels) {
    const std::string labels_path = FindLabelsFile(path);
    if (!labels_path.empty()) {
      SEQTO_ASSIGN_OR_RETURN(auto labels, ReadLabelsFile(labels_path));
      if (static_cast<int64_t>(labels.size()) != ds->size())
        return UserError(labels_path + ": has " + std::to_string(labels.size()) + " labels, but " + path + " has " +
                         std::to_string(ds->size()) + " samples");
      ds->SetLabels(std::move(labels), labels_path);
    }
  }
  return std::shared_ptr<Dataset>(std::move(ds));
}

}  // namespace seqto::data::internal
