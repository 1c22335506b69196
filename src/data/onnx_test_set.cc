// ONNX test data: a test_data_set_N folder holds input_0.pb, input_1.pb, ...
// (serialized TensorProtos, read by onnxio::LoadTensorFile) and output_*.pb (not
// used here). Each input's first dimension is its batch: a set with inputs
// [2, 3, 224, 224] gives 2 samples. A folder holding several test_data_set_*
// folders gives the samples of all of them, in set order. Sets are small, so they
// are read when opened.
#include <algorithm>
#include <charconv>
#include <filesystem>

#include "data/formats.h"
#include "onnxio/model_io.h"

namespace seqto::data::internal {

namespace {

namespace fs = std::filesystem;

// N of "<prefix>N<suffix>", or -1.
int64_t NumberedName(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const char* b = name.data() + prefix.size();
  const char* e = name.data() + name.size() - suffix.size();
  int64_t v = 0;
  const auto r = std::from_chars(b, e, v);
  return (r.ec == std::errc() && r.ptr == e && v >= 0) ? v : -1;
}

// Entries of `dir` named prefix<N>suffix, sorted by N.
std::vector<fs::path> Numbered(const fs::path& dir, const std::string& prefix, const std::string& suffix, bool dirs) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t n = NumberedName(it->path().filename().string(), prefix, suffix);
    if (n >= 0 && (dirs ? it->is_directory(ec) : it->is_regular_file(ec))) found.emplace_back(n, it->path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [n, p] : found) out.push_back(std::move(p));
  return out;
}

class OnnxTestSets : public Dataset {
 public:
  struct Set {
    std::string dir;
    std::vector<Tensor> inputs;  // each [n, ...]
    int64_t samples = 0;
  };
  OnnxTestSets(std::string path, std::vector<std::string> names, std::vector<Set> sets, PreprocessSpec spec)
      : path_(std::move(path)), names_(std::move(names)), sets_(std::move(sets)), spec_(std::move(spec)) {
    for (const auto& s : sets_) {
      starts_.push_back(total_);
      total_ += s.samples;
    }
  }

  int64_t size() const override { return total_; }
  std::vector<std::string> input_names() const override { return names_; }
  Expected<std::vector<Tensor>> Get(int64_t index) const override {
    const auto [set, row] = Locate(index);
    std::vector<Tensor> out;
    for (const auto& t : sets_[set].inputs) {
      auto p = PreprocessTensor(SliceRow(t, row), spec_, spec_.layout == Layout::kNhwc ? t.rank() - 2 : 0);
      if (!p) return std::move(p).WithContext(SampleName(index)).error();
      out.push_back(std::move(*p));
    }
    return out;
  }
  std::string SampleName(int64_t index) const override {
    const auto [set, row] = Locate(index);
    return sets_[set].dir + "[" + std::to_string(row) + "]";
  }
  std::string description() const override {
    return "ONNX test data '" + path_ + "' (" + std::to_string(sets_.size()) + " set" + (sets_.size() == 1 ? "" : "s") +
           ", " + std::to_string(total_) + " samples)";
  }

 private:
  std::pair<size_t, int64_t> Locate(int64_t index) const {
    const size_t set =
        static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
    return {set, index - starts_[set]};
  }

  std::string path_;
  std::vector<std::string> names_;
  std::vector<Set> sets_;
  PreprocessSpec spec_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

}  // namespace

Expected<std::shared_ptr<Dataset>> OpenOnnxTestSets(const std::string& path, const PreprocessSpec& spec) {
  SEQTO_RETURN_IF_ERROR(CheckKeysAllowed(spec, {"scale", "mean", "std", "layout"}, path + " is ONNX test data"));
  std::vector<fs::path> set_dirs;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path) / "input_0.pb", ec))
    set_dirs.push_back(path);
  else
    set_dirs = Numbered(path, "test_data_set_", "", /*dirs=*/true);
  if (set_dirs.empty()) return UserError(path + ": no input_0.pb and no test_data_set_* folders");
  std::vector<OnnxTestSets::Set> sets;
  std::vector<std::string> names;
  for (const auto& dir : set_dirs) {
    OnnxTestSets::Set set;
    set.dir = dir.string();
    std::vector<std::string> set_names;
    const auto files = Numbered(dir, "input_", ".pb", /*dirs=*/false);
    if (files.empty()) return UserError(dir.string() + ": no input_0.pb in the test data set");
    for (size_t i = 0; i < files.size(); ++i) {
      if (NumberedName(files[i].filename().string(), "input_", ".pb") != static_cast<int64_t>(i))
        return UserError(dir.string() + ": input_" + std::to_string(i) + ".pb is missing (found " +
                         files[i].filename().string() + ")");
      SEQTO_ASSIGN_OR_RETURN(auto named, onnxio::LoadTensorFile(files[i].string()));
      const Tensor& t = named.second;
      if (t.rank() == 0)
        return UserError(files[i].string() + ": a scalar input has no batch dimension to split into samples");
      if (!set.inputs.empty() && t.dim(0) != set.samples)
        return UserError(files[i].string() + ": first dimension " + std::to_string(t.dim(0)) +
                         " differs from input_0's " + std::to_string(set.samples) +
                         " (the first dimension is read as the batch)");
      set.samples = t.dim(0);
      set_names.push_back(named.first);
      set.inputs.push_back(t);
    }
    if (sets.empty())
      names = set_names;
    else if (set_names != names)
      return UserError(dir.string() + ": its inputs differ from those of " + sets[0].dir + " (names or count)");
    sets.push_back(std::move(set));
  }
  // Unnamed tensors feed by position.
  for (const auto& n : names)
    if (n.empty()) {
      for (auto& m : names) m.clear();
      break;
    }
  int64_t total = 0;
  for (const auto& s : sets) total += s.samples;
  if (total == 0) return UserError(path + ": the test data holds no samples (first dimension 0)");
  return std::shared_ptr<Dataset>(std::make_shared<OnnxTestSets>(path, std::move(names), std::move(sets), spec));
}

}  // namespace seqto::data::internal
