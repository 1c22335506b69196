#include "data/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/parallel.h"

namespace seqto::data {

namespace {

std::string ShapeText(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out;
}

Shape WithoutUnits(const Shape& s) {
  Shape out;
  for (int64_t d : s)
    if (d != 1) out.push_back(d);
  return out;
}

bool Matches(const Shape& sample, const Shape& target) {
  if (sample.size() != target.size()) return false;
  for (size_t i = 0; i < sample.size(); ++i)
    if (target[i] >= 0 && target[i] != sample[i]) return false;
  return true;
}

Tensor ToFloat32(const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t;
  Tensor out(DType::kFloat32, t.shape());
  float* o = out.data<float>();
  const bool done = VisitNumeric(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) o[i] = static_cast<float>(in[i]);
  });
  if (!done) {
    const std::vector<double> v = t.ToDoubles();
    for (int64_t i = 0; i < t.numel(); ++i) o[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<int64_t> SampleIndices(int64_t n, int64_t k, uint64_t seed) {
  if (n <= 0) return {};
  std::vector<int64_t> a(static_cast<size_t>(n));
  std::iota(a.begin(), a.end(), int64_t{0});
  if (k <= 0 || k >= n) return a;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < k; ++i) {
    const uint64_t m = static_cast<uint64_t>(n - i);
    const uint64_t threshold = (0 - m) % m;  // (2^64 - m) mod m
    uint64_t r;
    do r = rng();
    while (r < threshold);
    const int64_t j = i + static_cast<int64_t>(r % m);
    std::swap(a[static_cast<size_t>(i)], a[static_cast<size_t>(j)]);
  }
  a.resize(static_cast<size_t>(k));
  std::sort(a.begin(), a.end());
  return a;
}

std::optional<Shape> FitSampleShape(const Shape& sample, const Shape& target) {
  if (Matches(sample, target)) return sample;
  // Only unit dimensions may differ: compare the shapes without them (an unknown
  // target extent stays and matches any sample extent).
  const Shape s = WithoutUnits(sample), t = WithoutUnits(target);
  if (s.size() != t.size()) return std::nullopt;
  for (size_t i = 0; i < s.size(); ++i)
    if (t[i] >= 0 && t[i] != s[i]) return std::nullopt;
  Shape out = target;
  size_t next = 0;
  for (int64_t& d : out)
    if (d != 1) d = s[next++];
  return out;
}

Expected<std::unique_ptr<BatchIterator>> BatchIterator::Create(std::shared_ptr<const Dataset> dataset,
                                                               std::vector<int64_t> indices, int64_t batch_size,
                                                               std::vector<TargetInput> targets) {
  if (!dataset) return InternalError("BatchIterator: no dataset");
  if (batch_size < 1) return UserError("batch size must be at least 1, got " + std::to_string(batch_size));
  for (int64_t i : indices)
    if (i < 0 || i >= dataset->size())
      return InternalError("sample index " + std::to_string(i) + " is outside the dataset's " +
                           std::to_string(dataset->size()) + " samples");
  std::unique_ptr<BatchIterator> it(new BatchIterator());
  it->dataset_ = dataset;
  it->indices_ = std::move(indices);
  it->batch_size_ = batch_size;
  const std::vector<std::string> names = dataset->input_names();
  const bool named = !names.empty() && !names[0].empty();
  if (targets.empty()) {
    for (size_t i = 0; i < names.size(); ++i)
      it->feed_names_.push_back(named ? names[i] : "input_" + std::to_string(i));
    it->targets_.resize(names.size());
  } else if (named) {
    std::vector<std::string> target_names;
    for (const auto& t : targets) target_names.push_back(t.name);
    for (const auto& n : names) {
      auto t = std::find_if(targets.begin(), targets.end(), [&](const TargetInput& x) { return x.name == n; });
      if (t == targets.end())
        return UserError("the data has input '" + n +
                         "', which the model does not have (its inputs: " + Join(target_names) + ")");
      it->targets_.push_back(*t);
      it->feed_names_.push_back(n);
    }
    for (const auto& t : targets)
      if (std::find(names.begin(), names.end(), t.name) == names.end())
        return UserError("model input '" + t.name + "' is not in the data (it has: " + Join(names) + ")");
  } else {
    if (targets.size() != names.size()) {
      std::vector<std::string> target_names;
      for (const auto& t : targets) target_names.push_back("'" + t.name + "'");
      return UserError("the model has " + std::to_string(targets.size()) + " inputs (" + Join(target_names) +
                       "), the data gives " + std::to_string(names.size()) + " per sample");
    }
    it->targets_ = targets;
    for (const auto& t : targets) it->feed_names_.push_back(t.name);
  }
  SEQTO_RETURN_IF_ERROR(dataset->Prefetch(it->indices_));
  // Decode the first sample now: a mismatch should fail before a long run.
  if (!it->indices_.empty()) {
    auto first = it->Load(it->indices_[0]);
    if (!first) return first.error();
  }
  return it;
}

namespace {

// The first NaN or infinite element of a float tensor, or -1. Metrics, rankings and
// calibration ranges computed from such inputs look plausible but mean nothing.
template <typename T>
int64_t FirstNonFinite(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

Status CheckFinite(const Tensor& t, const std::string& sample) {
  int64_t at = -1;
  double value = 0;
  if (t.dtype() == DType::kFloat32) {
    at = FirstNonFinite<float>(t);
    if (at >= 0) value = t.data<float>()[at];
  } else if (t.dtype() == DType::kFloat64) {
    at = FirstNonFinite<double>(t);
    if (at >= 0) value = t.data<double>()[at];
  }
  if (at < 0) return Status::Ok();
  return UserError(sample + ": element " + std::to_string(at) + " is " +
                   (std::isnan(value) ? "NaN"
                    : value > 0       ? "+inf"
                                      : "-inf") +
                   " (evaluation, ranking and calibration data must be finite)");
}

}  // namespace

Expected<std::vector<Tensor>> BatchIterator::Load(int64_t index) const {
  SEQTO_ASSIGN_OR_RETURN(auto tensors, dataset_->Get(index));
  if (tensors.size() != feed_names_.size())
    return InternalError(dataset_->SampleName(index) + ": " + std::to_string(tensors.size()) + " tensors, expected " +
                         std::to_string(feed_names_.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TargetInput& target = targets_[i];
    Tensor& t = tensors[i];
    if (target.shape && !target.shape->empty()) {
      const Shape per_sample(target.shape->begin() + 1, target.shape->end());
      const auto fitted = FitSampleShape(t.shape(), per_sample);
      if (!fitted)
        return UserError(dataset_->SampleName(index) + ": sample shape " + ShapeText(t.shape()) +
                         " does not fit the model input '" + target.name + "' (" + ShapeText(*target.shape) +
                         ", i.e. " + ShapeText(per_sample) + " per sample)");
      if (*fitted != t.shape()) t = t.Reshaped(*fitted);
    } else if (target.shape && target.shape->empty()) {
      return UserError("model input '" + target.name + "' is a scalar, which cannot take a batch of samples");
    }
    if (target.dtype != DType::kUndefined && target.dtype != t.dtype()) {
      const bool convertible =
          target.dtype == DType::kFloat32 && IsSupportedDType(t.dtype()) && t.dtype() != DType::kBool;
      if (!convertible)
        return UserError(dataset_->SampleName(index) + ": the data is " + DTypeName(t.dtype()) + ", but model input '" +
                         target.name + "' is " + DTypeName(target.dtype));
      t = ToFloat32(t);
    }
    SEQTO_RETURN_IF_ERROR(CheckFinite(t, dataset_->SampleName(index)));
  }
  return tensors;
}

Expected<bool> BatchIterator::Next(Batch& batch) {
  batch.indices.clear();
  batch.feeds.clear();
  batch.labels.clear();
  if (position_ >= num_samples()) return false;
  const int64_t begin = position_, end = std::min(num_samples(), position_ + batch_size_);
  const int64_t n = end - begin;
  // Decode in parallel; keep the first error (in sample order).
  std::vector<std::optional<Expected<std::vector<Tensor>>>> loaded(static_cast<size_t>(n));
  ParallelFor(n, 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t index = indices_[static_cast<size_t>(begin + i)];
      try {  // an exception must not leave an OpenMP region
        loaded[static_cast<size_t>(i)].emplace(Load(index));
      } catch (const std::exception& ex) {
        loaded[static_cast<size_t>(i)].emplace(InternalError(dataset_->SampleName(index) + ": " + ex.what()));
      }
    }
  });
  for (int64_t i = 0; i < n; ++i)
    if (!loaded[static_cast<size_t>(i)]->ok()) return loaded[static_cast<size_t>(i)]->error();
  const auto& first = loaded[0]->value();
  for (size_t in = 0; in < feed_names_.size(); ++in) {
    const Tensor& f = first[in];
    Shape shape = f.shape();
    shape.insert(shape.begin(), n);
    Tensor stacked(f.dtype(), shape,
                   std::make_shared<Storage>(std::max<size_t>(f.nbytes() * static_cast<size_t>(n), 1)));
    for (int64_t i = 0; i < n; ++i) {
      const Tensor& t = loaded[static_cast<size_t>(i)]->value()[in];
      if (t.shape() != f.shape() || t.dtype() != f.dtype())
        return UserError(dataset_->SampleName(indices_[static_cast<size_t>(begin + i)]) + ": sample " + t.Describe() +
                         " differs from " + f.Describe() + " of " +
                         dataset_->SampleName(indices_[static_cast<size_t>(begin)]) +
                         " in the same batch (images of different sizes need --preprocess resize=...,crop=...)");
      if (f.nbytes())
        std::memcpy(static_cast<char*>(stacked.raw()) + f.nbytes() * static_cast<size_t>(i), t.raw(), f.nbytes());
    }
    batch.feeds[feed_names_[in]] = std::move(stacked);
  }
  for (int64_t i = begin; i < end; ++i) {
    const int64_t index = indices_[static_cast<size_t>(i)];
    batch.indices.push_back(index);
    if (dataset_->has_labels()) batch.labels.push_back(dataset_->label(index));
  }
  position_ = end;
  return true;
}

FeedSource AsFeedSource(std::shared_ptr<BatchIterator> iterator) {
  return [iterator](std::map<std::string, Tensor>& feeds) -> Expected<bool> {
    Batch batch;
    SEQTO_ASSIGN_OR_RETURN(bool more, iterator->Next(batch));
    feeds = std::move(batch.feeds);
    return more;
  };
}

}  // namespace seqto::data
