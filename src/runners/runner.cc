#include "runners/runner.h"

#include <cstring>
#include <new>

#include "runners/engine_runner.h"
#include "runners/ort_runner.h"

namespace seqto::runners {

Runner::~Runner() = default;

Expected<Measurement> Runner::Measure(const std::string& model_path, const std::vector<runtime::TensorMap>& batches,
                                      const runtime::TensorMap& latency_batch, const LatencyOptions& options) {
  Measurement m;
  SEQTO_ASSIGN_OR_RETURN(m.outputs, Run(model_path, batches));
  SEQTO_ASSIGN_OR_RETURN(m.latency, Latency(model_path, latency_batch, options));
  return m;
}

std::vector<std::string> RunnerNames() { return {"engine", "ort"}; }

Expected<std::unique_ptr<Runner>> MakeRunner(const std::string& name, const RunnerOptions& options) {
  if (options.threads < 0) return UserError("runner '" + name + "': threads must be >= 0");
  if (!(options.timeout_s > 0)) return UserError("runner '" + name + "': timeout must be > 0 seconds");
  if (name == "engine") return std::unique_ptr<Runner>(std::make_unique<EngineRunner>(options));
  if (name == "ort") {
    SEQTO_RETURN_IF_ERROR(OrtAvailable());
    return std::unique_ptr<Runner>(std::make_unique<OrtRunner>(options));
  }
  std::string known;
  for (const auto& n : RunnerNames()) known += (known.empty() ? "" : ", ") + n;
  return UserError("unknown runner '" + name + "' (known runners: " + known + ")");
}

Expected<Tensor> ConcatDim0(const std::vector<Tensor>& parts) {
  if (parts.empty()) return UserError("nothing to concatenate");
  if (parts.size() == 1) return parts[0];
  const Tensor& first = parts[0];
  if (first.rank() == 0)
    return UserError("a scalar cannot be concatenated over " + std::to_string(parts.size()) + " batches");
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    bool same = p.dtype() == first.dtype() && p.rank() == first.rank();
    for (int64_t d = 1; same && d < p.rank(); ++d) same = p.dim(d) == first.dim(d);
    if (!same)
      return UserError("batch " + std::to_string(i) + " gives " + p.Describe() + ", batch 0 gives " + first.Describe() +
                       ": cannot concatenate along dimension 0");
    rows += p.dim(0);
  }
  Shape shape = first.shape();
  shape[0] = rows;
  Tensor out;
  try {
    out = Tensor(first.dtype(), shape);
  } catch (const std::bad_alloc&) {
    return UserError("out of memory concatenating " + std::to_string(parts.size()) + " batches into " +
                     DTypeName(first.dtype()) + "[" + ShapeToString(shape) + "]");
  }
  auto* dst = static_cast<std::byte*>(out.raw());
  for (const Tensor& p : parts) {
    if (p.nbytes() == 0) continue;
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

Expected<Tensor> SliceDim0(const Tensor& t, int64_t begin, int64_t end) {
  if (t.rank() == 0) return UserError("cannot slice a scalar along dimension 0");
  if (begin < 0 || end < begin || end > t.dim(0))
    return UserError("rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") are outside " + t.Describe());
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor out(t.dtype(), shape);
  const size_t row_bytes = t.dim(0) == 0 ? 0 : t.nbytes() / static_cast<size_t>(t.dim(0));
  if (out.nbytes() > 0)
    std::memcpy(out.raw(), static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(begin) * row_bytes,
                out.nbytes());
  return out;
}

Status CheckBatches(const std::vector<runtime::TensorMap>& batches) {
  if (batches.empty()) return UserError("no batches to run");
  auto names = [](const runtime::TensorMap& m) {
    std::string s;
    for (const auto& [name, t] : m) s += (s.empty() ? "'" : ", '") + name + "'";
    return "{" + s + "}";
  };
  for (size_t i = 1; i < batches.size(); ++i) {
    bool same = batches[i].size() == batches[0].size();
    for (auto a = batches[i].begin(), b = batches[0].begin(); same && a != batches[i].end(); ++a, ++b)
      same = a->first == b->first;
    if (!same)
      return UserError("batch " + std::to_string(i) + " has inputs " + names(batches[i]) + ", batch 0 has " +
                       names(batches[0]));
  }
  return Status::Ok();
}

Expected<runtime::TensorMap> ConcatOutputs(const std::vector<runtime::TensorMap>& per_batch) {
  runtime::TensorMap out;
  if (per_batch.empty()) return out;
  for (const auto& [name, first] : per_batch[0]) {
    std::vector<Tensor> parts;
    parts.reserve(per_batch.size());
    for (size_t i = 0; i < per_batch.size(); ++i) {
      auto it = per_batch[i].find(name);
      if (it == per_batch[i].end())
        return InternalError("output '" + name + "' is missing from batch " + std::to_string(i));
      parts.push_back(it->second);
    }
    auto joined = ConcatDim0(parts);
    if (!joined) return std::move(joined).WithContext("output '" + name + "'").error();
    out[name] = std::move(*joined);
  }
  return out;
}

}  // namespace seqto::runners
