#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/file_util.h"

namespace seqto {

namespace {

const char* NpyDescr(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt16:
      return "<u2";
    case DType::kInt16:
      return "<i2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
    case DType::kBool:
      return "|b1";
    default:
      return nullptr;
  }
}

DType DTypeFromDescr(const std::string& d) {
  static const std::pair<const char*, DType> kTable[] = {
      {"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16}, {"u1", DType::kUInt8},
      {"i1", DType::kInt8},    {"u2", DType::kUInt16},  {"i2", DType::kInt16},   {"i4", DType::kInt32},
      {"i8", DType::kInt64},   {"u4", DType::kUInt32},  {"u8", DType::kUInt64},  {"b1", DType::kBool}};
  if (d.size() != 3 || d[0] == '>') return DType::kUndefined;
  for (const auto& [code, dtype] : kTable)
    if (d.substr(1) == code) return dtype;
  return DType::kUndefined;
}

// Value of `'key': value` in the header dict, as raw text.
std::string HeaderField(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  if (v >= header.size()) return "";
  if (header[v] == '(') return header.substr(v, header.find(')', v) - v + 1);
  if (header[v] == '\'') return header.substr(v + 1, header.find('\'', v + 1) - v - 1);
  const size_t end = header.find_first_of(",}", v);
  return header.substr(v, end - v);
}

// The header must be a dict literal with the three keys NumPy writes; names the
// first thing that is wrong (a missing key would otherwise read as an empty value).
Status CheckHeaderDict(const std::string& header) {
  const size_t open = header.find_first_not_of(" ");
  const size_t close = header.find_last_not_of(" \n");
  if (open == std::string::npos || header[open] != '{' || header[close] != '}') {
    std::string shown = header.substr(0, 40);
    for (char& c : shown)
      if (c < ' ' || c > '~') c = '?';
    return UserError("expected a dict literal {...}, found '" + shown + "'");
  }
  for (const char* key : {"descr", "fortran_order", "shape"})
    if (header.find(std::string("'") + key + "'") == std::string::npos)
      return UserError(std::string("no '") + key + "' key");
  return Status::Ok();
}

}  // namespace

Expected<Tensor> ReadNpy(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) return UserError(path + ": is a directory, expected a .npy file");
  if (!std::filesystem::exists(status)) return UserError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) return UserError(path + ": not a regular file");
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return UserError(path + ": " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file");
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return UserError(path + ": not a .npy file (bad magic at byte 0)");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) return UserError(path + ": truncated header at byte 8");
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return UserError(path + ": truncated header at byte 8");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    return UserError(path + ": unsupported .npy version " + std::to_string(major));
  }
  const uint64_t data_start = (major == 1 ? 10 : 12) + static_cast<uint64_t>(header_len);
  if (header_len > (1u << 20)) return UserError(path + ": header too long (" + std::to_string(header_len) + " bytes)");
  if (data_start > file_size)
    return UserError(path + ": truncated header: it declares " + std::to_string(header_len) +
                     " bytes, but the file ends at byte " + std::to_string(file_size));
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return UserError(path + ": truncated header");
  SEQTO_RETURN_IF_ERROR(CheckHeaderDict(header).WithContext(path + ": malformed header"));
  const std::string descr = HeaderField(header, "descr");
  const DType dtype = DTypeFromDescr(descr);
  if (dtype == DType::kUndefined) return UserError(path + ": unsupported dtype '" + descr + "'");
  const std::string fortran_order = HeaderField(header, "fortran_order");
  if (fortran_order == "True") return UserError(path + ": Fortran-order arrays are not supported");
  if (fortran_order != "False")
    return UserError(path + ": malformed header: 'fortran_order' is '" + fortran_order + "', expected True or False");
  const std::string shape_text = HeaderField(header, "shape");
  if (shape_text.empty() || shape_text[0] != '(') return UserError(path + ": missing shape in header");
  Shape shape;
  std::stringstream ss(shape_text.substr(1, shape_text.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    try {
      const long long d = std::stoll(item);
      if (d < 0) return UserError(path + ": negative dimension in shape");
      shape.push_back(d);
    } catch (...) {
      return UserError(path + ": bad shape " + shape_text);
    }
  }
  // Check the size against the file before allocating: the header may lie.
  uint64_t nbytes = DTypeSize(dtype);
  bool overflow = false;
  for (int64_t d : shape) overflow |= __builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes);
  if (NumElements(shape) == 0) nbytes = 0, overflow = false;
  const uint64_t available = file_size - data_start;
  const std::string describe = DTypeName(dtype) + "[" + ShapeToString(shape) + "]";
  if (overflow || nbytes > available)
    return UserError(path + ": truncated data: " + describe + " needs " +
                     (overflow ? "too many" : std::to_string(nbytes)) + " bytes from byte " +
                     std::to_string(data_start) + ", but the file ends at byte " + std::to_string(file_size));
  if (nbytes < available)
    return UserError(path + ": " + std::to_string(available - nbytes) + " unexpected bytes after the data of " +
                     describe + " (which ends at byte " + std::to_string(data_start + nbytes) + ")");
  Tensor t(dtype, shape, std::make_shared<Storage>(nbytes));
  if (nbytes && !in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(nbytes)))
    return UserError(path + ": cannot read " + std::to_string(nbytes) + " bytes of data from byte " +
                     std::to_string(data_start));
  return t;
}

Status WriteNpy(const std::string& path, const Tensor& tensor) {
  const char* descr = NpyDescr(tensor.dtype());
  if (!descr) return UserError(path + ": cannot write " + DTypeName(tensor.dtype()) + " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i) shape += std::to_string(tensor.shape()[i]) + ",";
  if (tensor.shape().size() > 1) shape.pop_back();
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  AtomicFileWriter out(path);
  SEQTO_RETURN_IF_ERROR(out.Open());
  const uint16_t len = static_cast<uint16_t>(header.size());
  const std::string preamble =
      std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(len & 0xff) + static_cast<char>(len >> 8) + header;
  SEQTO_RETURN_IF_ERROR(out.Write(preamble.data(), preamble.size()));
  SEQTO_RETURN_IF_ERROR(out.Write(tensor.raw(), tensor.nbytes()));
  return out.Commit();
}

}  // namespace seqto
