// A .npy array N x ... : sample i is row i. The file is read whole when opened
// (core/npy.h checks it against its size first).
#include "core/npy.h"
#include "data/formats.h"

namespace seqto::data::internal {

namespace {

class NpyDataset : public Dataset {
 public:
  NpyDataset(std::string path, Tensor data, PreprocessSpec spec)
      : path_(std::move(path)), data_(std::move(data)), spec_(std::move(spec)) {}

  int64_t size() const override { return data_.dim(0); }
  Expected<std::vector<Tensor>> Get(int64_t index) const override {
    Tensor row = SliceRow(data_, index);
    auto out = PreprocessTensor(row, spec_, spec_.layout == Layout::kNhwc ? row.rank() - 1 : 0);
    if (!out) return std::move(out).WithContext(SampleName(index)).error();
    return std::vector<Tensor>{std::move(*out)};
  }
  std::string SampleName(int64_t index) const override { return path_ + "[" + std::to_string(index) + "]"; }
  std::string description() const override {
    return ".npy file '" + path_ + "' (" + DTypeName(data_.dtype()) + "[" + ShapeToString(data_.shape()) + "])";
  }

 private:
  std::string path_;
  Tensor data_;
  PreprocessSpec spec_;
};

}  // namespace

Expected<std::shared_ptr<Dataset>> OpenNpyDataset(const std::string& path, const PreprocessSpec& spec) {
  SEQTO_ASSIGN_OR_RETURN(Tensor data, ReadNpy(path));
  if (data.rank() == 0) return UserError(path + ": holds a scalar; expected an array N x ... (one row per sample)");
  if (data.dim(0) == 0) return UserError(path + ": holds no samples (shape " + ShapeToString(data.shape()) + ")");
  if (data.dtype() == DType::kBool && ChangesValues(spec))
    return UserError(path + ": holds booleans, which scale/mean/std do not apply to");
  SEQTO_RETURN_IF_ERROR(CheckKeysAllowed(spec, {"scale", "mean", "std", "layout"}, path + " is a .npy file"));
  return std::shared_ptr<Dataset>(std::make_shared<NpyDataset>(path, std::move(data), spec));
}

}  // namespace seqto::data::internal
