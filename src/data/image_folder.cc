// A folder of images, as torchvision's ImageFolder reads it: class sub-folders,
// each holding that class's images (searched recursively); or a flat folder of
// images without labels. Files are ordered by path; hidden entries (".x") and files
// that are not .png/.jpg/.jpeg are ignored. Class indices follow the sorted folder
// names, except that folders all named by integers ("0", "1", ..., "10") get those
// integers. Images are decoded when a sample is asked for, never all at once.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>

#include "data/formats.h"
#include "data/image_decode.h"

namespace seqto::data::internal {

namespace {

namespace fs = std::filesystem;

bool IsImageName(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool Hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Image files under `dir`, recursively, sorted by path.
Expected<std::vector<std::string>> ListImages(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return UserError(dir.string() + ": cannot list folder: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return UserError(dir.string() + ": cannot list folder: " + ec.message());
    if (Hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && IsImageName(it->path())) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::optional<int64_t> FolderNumber(const std::string& name) {
  int64_t v = 0;
  const auto r = std::from_chars(name.data(), name.data() + name.size(), v);
  if (name.empty() || name.size() > 9 || r.ec != std::errc() || r.ptr != name.data() + name.size() || v < 0)
    return std::nullopt;
  return v;
}

class ImageFolder : public Dataset {
 public:
  ImageFolder(std::string root, std::vector<std::string> files, PreprocessSpec spec, bool single_file)
      : root_(std::move(root)), files_(std::move(files)), spec_(std::move(spec)), single_file_(single_file) {}

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Expected<std::vector<Tensor>> Get(int64_t index) const override {
    const std::string& path = files_[static_cast<size_t>(index)];
    SEQTO_ASSIGN_OR_RETURN(Image image, ReadImageFile(path, ChannelsFor(spec_.color)));
    auto t = PreprocessImage(image, spec_);
    if (!t) return std::move(t).WithContext(path).error();
    return std::vector<Tensor>{std::move(*t)};
  }
  std::string SampleName(int64_t index) const override { return files_[static_cast<size_t>(index)]; }
  std::string description() const override {
    if (single_file_) return "image '" + root_ + "'";
    std::string d = "image folder '" + root_ + "' (" + std::to_string(files_.size()) + " images";
    if (!class_names_.empty()) d += ", " + std::to_string(class_names_.size()) + " classes";
    return d + ")";
  }
  void SetClasses(std::vector<std::string> names, std::vector<int64_t> labels) {
    class_names_ = std::move(names);
    SetLabels(std::move(labels), "class folders");
  }

 private:
  std::string root_;
  std::vector<std::string> files_;
  PreprocessSpec spec_;
  bool single_file_;
};

}  // namespace

Expected<std::shared_ptr<Dataset>> OpenImageFolder(const std::string& path, const PreprocessSpec& spec) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec))
    return std::shared_ptr<Dataset>(std::make_shared<ImageFolder>(path, std::vector<std::string>{path}, spec, true));
  // Top-level entries: sub-folders (classes) and loose images.
  std::vector<fs::path> subdirs, loose;
  fs::directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return UserError(path + ": cannot list folder: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return UserError(path + ": cannot list folder: " + ec.message());
    if (Hidden(it->path())) continue;
    if (it->is_directory(ec))
      subdirs.push_back(it->path());
    else if (it->is_regular_file(ec) && IsImageName(it->path()))
      loose.push_back(it->path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  std::sort(loose.begin(), loose.end());
  // Class folders: every sub-folder is a class (as in torchvision, an empty one too).
  std::vector<std::vector<std::string>> per_class;
  size_t in_classes = 0;
  for (const auto& d : subdirs) {
    SEQTO_ASSIGN_OR_RETURN(auto files, ListImages(d));
    in_classes += files.size();
    per_class.push_back(std::move(files));
  }
  if (in_classes > 0 && !loose.empty())
    return UserError(loose[0].string() + ": image outside the class folders of " + path +
                     " (with class sub-folders, every image must be in one)");
  if (in_classes == 0 && loose.empty())
    return UserError(path + ": no images (.png, .jpg, .jpeg) in the folder" +
                     std::string(subdirs.empty() ? "" : " or its sub-folders"));
  if (in_classes == 0) {
    std::vector<std::string> files;
    for (const auto& p : loose) files.push_back(p.string());
    return std::shared_ptr<Dataset>(std::make_shared<ImageFolder>(path, std::move(files), spec, false));
  }
  // Labels: the folder's number when every folder is a number, else its sorted position.
  std::vector<std::string> names;
  bool numeric = true;
  for (const auto& d : subdirs) {
    names.push_back(d.filename().string());
    numeric &= FolderNumber(names.back()).has_value();
  }
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  for (size_t c = 0; c < subdirs.size(); ++c) {
    const int64_t label = numeric ? *FolderNumber(names[c]) : static_cast<int64_t>(c);
    for (auto& f : per_class[c]) {
      files.push_back(std::move(f));
      labels.push_back(label);
    }
  }
  if (numeric) {
    // Class names indexed by label (gaps stay empty).
    int64_t most = 0;
    for (const auto& n : names) most = std::max(most, *FolderNumber(n));
    std::vector<std::string> by_label(static_cast<size_t>(most + 1));
    for (const auto& n : names) by_label[static_cast<size_t>(*FolderNumber(n))] = n;
    names = std::move(by_label);
  }
  auto ds = std::make_shared<ImageFolder>(path, std::move(files), spec, false);
  ds->SetClasses(std::move(names), std::move(labels));
  return std::shared_ptr<Dataset>(std::move(ds));
}

}  // namespace seqto::data::internal
