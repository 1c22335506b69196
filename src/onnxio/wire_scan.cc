#include "onnxio/wire_scan.h"

#include <cstdint>

namespace seqto::onnxio {

namespace {

bool ReadVarint(std::string_view b, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= b.size()) return false;
    const uint8_t byte = static_cast<uint8_t>(b[pos++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// Scans the fields in b[begin, end); descends into `nested_field` once.
WireProblem Scan(std::string_view b, size_t begin, size_t end, int nested_field, const char* message) {
  size_t pos = begin;
  while (pos < end) {
    const size_t field_start = pos;
    uint64_t tag;
    if (!ReadVarint(b.substr(0, end), pos, tag))
      return {true, field_start, std::string("truncated field tag in ") + message};
    const uint64_t field = tag >> 3, wire = tag & 7;
    if (field == 0) return {true, field_start, std::string("invalid field number 0 in ") + message};
    uint64_t value;
    switch (wire) {
      case 0:
        if (!ReadVarint(b.substr(0, end), pos, value))
          return {true, field_start, "truncated integer (field " + std::to_string(field) + ") in " + message};
        break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2: {
        if (!ReadVarint(b.substr(0, end), pos, value))
          return {true, field_start, "truncated length (field " + std::to_string(field) + ") in " + message};
        if (value > end - pos)
          return {true, field_start,
                  "field " + std::to_string(field) + " in " + message + " declares " + std::to_string(value) +
                      " bytes but only " + std::to_string(end - pos) + " remain"};
        if (static_cast<int>(field) == nested_field) {
          WireProblem inner = Scan(b, pos, pos + value, /*nested_field=*/-1, "the graph");
          if (inner.found) return inner;
        }
        pos += value;
        break;
      }
      default:
        return {true, field_start, "invalid wire type " + std::to_string(wire) + " in " + message};
    }
    if (pos > end) return {true, field_start, std::string("truncated fixed-size field in ") + message};
  }
  return {};
}

}  // namespace

WireProblem FindWireProblem(std::string_view bytes) { return Scan(bytes, 0, bytes.size(), 7, "the model"); }

}  // namespace seqto::onnxio
