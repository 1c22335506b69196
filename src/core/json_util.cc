#include "core/json_util.h"

#include <vector>

#include "core/file_util.h"

namespace seqto {

using nlohmann::json;

namespace {

// A SAX handler that builds nothing: it follows the key path and keeps the first
// error with its byte position, which json::parse throws away for errors that are
// not parse errors (out_of_range.406).
class ErrorLocator : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Push(false); }
  bool key(string_t& k) override {
    if (!frames_.empty()) frames_.back().key = k;
    return true;
  }
  bool end_object() override { return Pop(); }
  bool start_array(std::size_t) override { return Push(true); }
  bool end_array() override { return Pop(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    position_ = position;
    message_ = ex.what();
    path_ = Path();
    return false;
  }

  size_t position() const { return position_; }
  const std::string& message() const { return message_; }
  const std::string& path() const { return path_; }

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;
    std::string key;
  };
  bool Value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool Push(bool array) {
    frames_.push_back({array, 0, ""});
    return true;
  }
  bool Pop() {
    frames_.pop_back();
    return Value();
  }
  std::string Path() const {
    std::string p;
    for (const auto& f : frames_) {
      if (f.array)
        p += "[" + std::to_string(f.index) + "]";
      else if (!f.key.empty())
        p += (p.empty() ? "" : ".") + f.key;
    }
    return p;
  }
  std::vector<Frame> frames_;
  size_t position_ = 0;
  std::string message_, path_;
};

// nlohmann's "[json.exception.out_of_range.406] number overflow parsing '1e999'"
// without the bracketed id.
std::string WithoutId(const std::string& what) {
  const auto pos = what.find("] ");
  return pos == std::string::npos ? what : what.substr(pos + 2);
}

}  // namespace

Expected<json> ParseJson(const std::string& text, const std::string& file) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) return j;
  ErrorLocator locator;
  json::sax_parse(text, &locator);
  const std::string what = WithoutId(locator.message());
  // Parse errors carry their line and column already ("parse error at line 2, column
  // 15: ..."); other errors get them from the position (the byte after the token).
  if (what.rfind("parse error", 0) == 0) return UserError(file + ": invalid JSON: " + what);
  const size_t end = std::min(locator.position(), text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return UserError(file + ": line " + std::to_string(line) + ", column " + std::to_string(column) +
                   (locator.path().empty() ? "" : " (" + locator.path() + ")") + ": " + what);
}

Expected<json> ReadJsonFile(const std::string& path) {
  SEQTO_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  return ParseJson(text, path);
}

}  // namespace seqto
