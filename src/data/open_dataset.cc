#include "data/open_dataset.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "core/npy.h"
#include "data/formats.h"
#include "data/image_decode.h"

namespace seqto::data {

namespace {

namespace fs = std::filesystem;

bool HasIdxFiles(const fs::path& dir, std::string& example) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && name.find("-idx") != std::string::npos) {
      if (example.empty() || name.find("images") != std::string::npos) example = it->path().string();
    }
  }
  return !example.empty();
}

bool HasTestSets(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("test_data_set_", 0) == 0 && it->is_directory(ec)) return true;
  return false;
}

// color=auto from the model input: 1 channel -> gray, 3 -> RGB. Also the layout,
// when not given and the input is plainly channels-last (N x H x W x 1|3).
PreprocessSpec Resolve(PreprocessSpec spec, const std::optional<Shape>& input) {
  if (!input || input->size() != 4) return spec;
  const Shape& s = *input;
  auto is_channels = [](int64_t d) { return d == 1 || d == 3; };
  if (!spec.has("layout") && is_channels(s[3]) && !is_channels(s[1])) spec.layout = Layout::kNhwc;
  if (spec.color == ColorMode::kAuto) {
    const int64_t c = spec.layout == Layout::kNchw ? s[1] : s[3];
    if (c == 1) spec.color = ColorMode::kGray;
    if (c == 3) spec.color = ColorMode::kRgb;
  }
  return spec;
}

// With a fixed output size (crop, or resize=HxW), images that cannot fit the model
// input are refused before any is decoded or resized (a typo such as
// resize=32768x32768 would otherwise allocate gigabytes first).
Status CheckImageSize(const PreprocessSpec& spec, const std::optional<Shape>& input) {
  const int64_t h = spec.crop_h > 0 ? spec.crop_h : spec.resize_h;
  const int64_t w = spec.crop_h > 0 ? spec.crop_w : spec.resize_w;
  if (h <= 0 || !input || input->size() != 4) return Status::Ok();
  const bool nhwc = spec.layout == Layout::kNhwc;
  const int64_t ih = (*input)[nhwc ? 1 : 2], iw = (*input)[nhwc ? 2 : 3];
  if ((ih > 0 && ih != h) || (iw > 0 && iw != w))
    return UserError("preprocess " + std::string(spec.crop_h > 0 ? "crop" : "resize") + " gives " + std::to_string(h) +
                     "x" + std::to_string(w) + " images, but the model input is " + ShapeToString(*input) + " (" +
                     (ih > 0 ? std::to_string(ih) : "?") + "x" + (iw > 0 ? std::to_string(iw) : "?") + ")");
  return Status::Ok();
}

}  // namespace

namespace internal {

void NoteOnce(const std::string& text) {
  static std::mutex mu;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mu);
  if (printed.insert(text).second) std::fprintf(stderr, "seqto: note: %s\n", text.c_str());
}

}  // namespace internal

Expected<std::vector<std::string>> ReadClassList(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) return UserError(path + ": no such file (class list)");
  if (!fs::is_regular_file(status)) return UserError(path + ": not a regular file (class list)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file (class list)");
  std::vector<std::string> names;
  std::map<std::string, size_t> line_of;
  size_t blank = 0;  // first blank line not yet followed by a name (blank lines may only end the file)
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t\r");
    const size_t e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) {
      if (!blank) blank = n;
      continue;
    }
    if (blank)
      return UserError(path + ": line " + std::to_string(blank) +
                       " is empty (one class name per line, label = line index; empty lines only at the end)");
    const std::string name = line.substr(b, e - b + 1);
    if (auto [it, fresh] = line_of.emplace(name, n); !fresh)
      return UserError(path + ": line " + std::to_string(n) + ": class '" + name + "' is already on line " +
                       std::to_string(it->second));
    names.push_back(name);
  }
  if (in.bad()) return UserError(path + ": read failed (class list)");
  if (names.empty()) return UserError(path + ": no class names (class list: one name per line)");
  return names;
}

Expected<std::vector<int64_t>> ReadLabelsFile(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) return UserError(path + ": no such file (labels)");
  if (fs::is_directory(status)) return UserError(path + ": is a directory, expected a labels file (.npy or idx)");
  const std::string head = internal::PeekDecompressed(path, 8);
  Tensor t;
  if (head.size() >= 6 && std::memcmp(head.data(), "\x93NUMPY", 6) == 0) {
    SEQTO_ASSIGN_OR_RETURN(t, ReadNpy(path));
  } else if (internal::IsIdxHeader(head)) {
    SEQTO_ASSIGN_OR_RETURN(t, internal::ReadIdx(path));
  } else {
    return UserError(path +
                     (head.empty() ? ": empty file (labels)" : ": not a labels file (expected .npy or MNIST idx)"));
  }
  const DType d = t.dtype();
  const bool integer = d == DType::kUInt8 || d == DType::kInt8 || d == DType::kUInt16 || d == DType::kInt16 ||
                       d == DType::kInt32 || d == DType::kInt64 || d == DType::kUInt32 || d == DType::kUInt64;
  if (!integer) return UserError(path + ": labels must be integer class indices, got " + DTypeName(d));
  if (!(t.rank() == 1 || (t.rank() == 2 && t.dim(1) == 1)))
    return UserError(path + ": labels must have shape [N] or [N, 1], got " + t.Describe());
  std::vector<int64_t> labels = t.ToInt64s();
  if (d == DType::kUInt64) {
    const uint64_t* raw = t.data<uint64_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (raw[i] > static_cast<uint64_t>(INT64_MAX)) labels[static_cast<size_t>(i)] = -1;
  }
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0)
      return UserError(path + ": label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) +
                       " is not a class index (negative)");
  return labels;
}

Expected<std::shared_ptr<Dataset>> OpenDataset(const std::string& path, const DataOptions& options) {
  const PreprocessSpec spec = Resolve(options.preprocess, options.input_shape);
  std::optional<internal::ClassList> classes;
  if (!options.classes_path.empty()) {
    if (!options.labels_path.empty())
      return UserError("class list " + options.classes_path + " and labels file " + options.labels_path +
                       " both given: the labels file replaces the class folders' labels (give one)");
    SEQTO_ASSIGN_OR_RETURN(auto names, ReadClassList(options.classes_path));
    classes = internal::ClassList{options.classes_path, std::move(names)};
  }
  const internal::ClassList* class_list = classes ? &*classes : nullptr;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (path.empty()) return UserError("no data path given");
  if (!fs::exists(status)) return UserError(path + ": no such file or directory");
  Expected<std::shared_ptr<Dataset>> ds = InternalError("no format matched");
  if (fs::is_directory(status)) {
    std::string idx_example;
    const fs::path p(path);
    const std::string base = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
    if (base.rfind("test_data_set_", 0) == 0 || fs::is_regular_file(p / "input_0.pb", ec) || HasTestSets(p)) {
      ds = internal::OpenOnnxTestSets(path, spec);
    } else if (HasIdxFiles(p, idx_example)) {
      return UserError(path + ": a folder of idx files; give the images file itself (e.g. " + idx_example + ")");
    } else {
      SEQTO_RETURN_IF_ERROR(CheckImageSize(spec, options.input_shape));
      ds = internal::OpenImageFolder(path, spec, class_list);
    }
  } else if (fs::is_regular_file(status)) {
    const std::string head = internal::PeekDecompressed(path, 8);
    std::string raw(8, '\0');
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      raw.resize(std::fread(raw.data(), 1, 8, f));
      std::fclose(f);
    } else {
      return UserError(path + ": cannot open file");
    }
    if (raw.empty()) return UserError(path + ": empty file");
    if (raw.size() >= 6 && std::memcmp(raw.data(), "\x93NUMPY", 6) == 0) {
      ds = internal::OpenNpyDataset(path, spec);
    } else if (LooksLikeImage(raw)) {
      SEQTO_RETURN_IF_ERROR(CheckImageSize(spec, options.input_shape));
      ds = internal::OpenImageFolder(path, spec, class_list);
    } else if (internal::IsIdxHeader(head)) {
      ds = internal::OpenIdxDataset(path, spec, /*find_labels=*/options.labels_path.empty());
    } else {
      return UserError(path +
                       ": unknown data format (expected a .npy file, an MNIST idx file, a PNG/JPEG image, "
                       "an image folder or an ONNX test_data_set folder)");
    }
  } else {
    return UserError(path + ": not a regular file or directory");
  }
  if (!ds) return ds;
  if (classes && (*ds)->class_names().empty())
    return UserError("class list " + classes->path + ": maps class folder names to labels, but " + path +
                     " is not an image folder with class sub-folders (" + (*ds)->description() + ")");
  if (!options.labels_path.empty()) {
    SEQTO_ASSIGN_OR_RETURN(auto labels, ReadLabelsFile(options.labels_path));
    if (static_cast<int64_t>(labels.size()) != (*ds)->size())
      return UserError(options.labels_path + ": has " + std::to_string(labels.size()) + " labels, but the data (" +
                       path + ") has " + std::to_string((*ds)->size()) + " samples");
    (*ds)->SetLabels(std::move(labels), options.labels_path);
  }
  return ds;
}

}  // namespace seqto::data
