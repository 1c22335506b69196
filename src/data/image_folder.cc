// A folder of images, as torchvision's ImageFolder reads it: class sub-folders,
// each holding that class's images (searched recursively); or a flat folder of
// images without labels. Files are ordered by path; hidden entries (".x") and files
// that are not .png/.jpg/.jpeg are ignored. With a class list (one name per line),
// a folder's class index is its name's line, so a folder holding part of the classes
// (ImageNet synset folders for some of the 1000) gets the model's labels. Without
// one, folders all named by integers ("0", "1", ..., "10") get those integers, and
// other names their sorted position (said once on stderr: it is right only when
// every class has a folder). Images are decoded when a sample is asked for, never
// all at once.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>

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

// Labels of the class folders (in sorted name order) and the class names by label.
struct FolderLabels {
  std::vector<int64_t> labels;           // one per folder
  std::vector<std::string> class_names;  // indexed by label (gaps stay empty)
};

// With a class list: each folder's line in it.
Expected<FolderLabels> LabelsFromList(const std::vector<std::string>& folders, const ClassList& classes,
                                      const std::string& root) {
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < classes.names.size(); ++i) index.emplace(classes.names[i], static_cast<int64_t>(i));
  FolderLabels out;
  for (const auto& name : folders) {
    auto it = index.find(name);
    if (it == index.end()) {
      std::string hint;  // a list of "synset description" lines: the first word is not the name
      for (const auto& line : classes.names)
        if (line.rfind(name + " ", 0) == 0 || line.rfind(name + "\t", 0) == 0) {
          hint = " (its lines are whole class names, and a line reads '" + line + "')";
          break;
        }
      return UserError((fs::path(root) / name).string() + ": class folder '" + name + "' is not in the class list " +
                       classes.path + " (" + std::to_string(classes.names.size()) + " classes)" + hint);
    }
    out.labels.push_back(it->second);
  }
  out.class_names = classes.names;
  return out;
}

// Without one: the folder's number when every folder is a number, else its sorted
// position (with a note, since that is right only when every class has a folder).
Expected<FolderLabels> LabelsFromNames(const std::vector<std::string>& folders, const std::string& root) {
  FolderLabels out;
  bool numeric = true;
  for (const auto& n : folders) numeric &= FolderNumber(n).has_value();
  if (!numeric) {
    for (size_t c = 0; c < folders.size(); ++c) out.labels.push_back(static_cast<int64_t>(c));
    out.class_names = folders;
    const std::string last = folders.size() > 2
                                 ? ", ..., " + folders.back() + " = " + std::to_string(folders.size() - 1)
                             : folders.size() == 2 ? ", " + folders.back() + " = 1"
                                                   : "";
    NoteOnce("image folder '" + root + "': labels are the class folders' sorted positions (" + folders[0] + " = 0" +
             last +
             "); if the model's classes are not exactly these folders, give a class list (--classes FILE; \"classes\" "
             "in a tune config)");
    return out;
  }
  int64_t most = 0;
  for (const auto& n : folders) {
    out.labels.push_back(*FolderNumber(n));
    most = std::max(most, out.labels.back());
  }
  out.class_names.resize(static_cast<size_t>(most + 1));
  for (const auto& n : folders) out.class_names[static_cast<size_t>(*FolderNumber(n))] = n;
  return out;
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
  void SetClasses(std::vector<std::string> names, std::vector<int64_t> labels, std::string source) {
    class_names_ = std::move(names);
    SetLabels(std::move(labels), std::move(source));
  }

 private:
  std::string root_;
  std::vector<std::string> files_;
  PreprocessSpec spec_;
  bool single_file_;
};

}  // namespace

Expected<std::shared_ptr<Dataset>> OpenImageFolder(const std::string& path, const PreprocessSpec& spec,
                                                   const ClassList* classes) {
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
  std::vector<std::string> names;
  for (const auto& d : subdirs) names.push_back(d.filename().string());
  SEQTO_ASSIGN_OR_RETURN(FolderLabels fl,
                         classes ? LabelsFromList(names, *classes, path) : LabelsFromNames(names, path));
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  for (size_t c = 0; c < subdirs.size(); ++c) {
    for (auto& f : per_class[c]) {
      files.push_back(std::move(f));
      labels.push_back(fl.labels[c]);
    }
  }
  auto ds = std::make_shared<ImageFolder>(path, std::move(files), spec, false);
  ds->SetClasses(std::move(fl.class_names), std::move(labels),
                 classes ? "class folders, class list " + classes->path : "class folders");
  return std::shared_ptr<Dataset>(std::move(ds));
}

}  // namespace seqto::data::internal
