#include "quant/analysis/incremental.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "quant/analysis/analyze.h"

namespace seqto::quant {

runtime::TensorMap SelectRows(const runtime::TensorMap& batch, const std::vector<int64_t>& rows) {
  runtime::TensorMap out;
  for (const auto& [name, t] : batch) {
    if (t.rank() == 0) {
      out[name] = t;
      continue;
    }
    Shape shape = t.shape();
    shape[0] = static_cast<int64_t>(rows.size());
    Tensor sub(t.dtype(), shape);
    const size_t row_bytes = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
    for (size_t r = 0; r < rows.size(); ++r)
      std::memcpy(static_cast<std::byte*>(sub.raw()) + r * row_bytes,
                  static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(rows[r]) * row_bytes, row_bytes);
    out[name] = sub;
  }
  return out;
}

namespace {

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

bool SameAttribute(const ir::Attribute& a, const ir::Attribute& b) {
  if (a.type != b.type || a.f != b.f || a.i != b.i || a.s != b.s || a.ints != b.ints || a.strings != b.strings ||
      a.raw_proto != b.raw_proto || a.floats.size() != b.floats.size())
    return false;
  // Bitwise, so that NaN attributes compare equal to themselves.
  if (!a.floats.empty() && std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float)) != 0)
    return false;
  if (a.t.defined() != b.t.defined()) return false;
  return !a.t.defined() || SameTensor(a.t, b.t);
}

// Whether `n` (of `trial`) is in `base` as is: same op, attributes, inputs and
// outputs, and initializer inputs with the same contents.
bool SameNode(const ir::Node& n, const ir::Node& m, const ir::Graph& trial, const ir::Graph& base) {
  if (n.op_type != m.op_type || n.domain != m.domain || n.inputs != m.inputs || n.outputs != m.outputs ||
      n.attributes.size() != m.attributes.size())
    return false;
  for (const auto& [name, attr] : n.attributes) {
    auto it = m.attributes.find(name);
    if (it == m.attributes.end() || !SameAttribute(attr, it->second)) return false;
  }
  for (const auto& input : n.inputs) {
    auto a = trial.initializers.find(input), b = base.initializers.find(input);
    if ((a == trial.initializers.end()) != (b == base.initializers.end())) return false;
    if (a != trial.initializers.end() && !SameTensor(a->second, b->second)) return false;
  }
  return true;
}

// Rows [begin, end) of every tensor of a batch.
runtime::TensorMap Rows(const runtime::TensorMap& batch, int64_t begin, int64_t end) {
  std::vector<int64_t> rows(static_cast<size_t>(end - begin));
  std::iota(rows.begin(), rows.end(), begin);
  return SelectRows(batch, rows);
}

// Runs fn(i) for i in [0, n) on `workers` threads; the first error stops the rest.
Status ParallelFor(size_t n, int workers, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status first_error;
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Status s = fn(i);
      if (s.ok()) continue;
      std::lock_guard<std::mutex> lock(mutex);
      if (first_error.ok()) first_error = std::move(s);
      failed = true;
    }
  };
  std::vector<std::thread> threads;
  const size_t count = std::min<size_t>(std::max(1, workers), n);
  for (size_t w = 1; w < count; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return first_error;
}

}  // namespace

Expected<DownstreamPart> CutDownstream(const ir::Model& base, const ir::Model& trial,
                                       const std::function<bool(const std::string&)>& available) {
  const ir::Graph& tg = trial.graph;
  const ir::Graph& bg = base.graph;
  std::map<std::string, const ir::Node*> base_nodes;
  for (const auto& n : bg.nodes) base_nodes[n.name] = &n;

  // Values that are constant in the trial: initializers, and outputs of nodes that
  // read only constants (weights' DequantizeLinear). The part recomputes these
  // itself, so its kernels see constant weights (and may fold and pre-pack them).
  std::set<std::string> constant;
  for (const auto& [name, t] : tg.initializers) constant.insert(name);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < tg.nodes.size(); ++i) {
    const ir::Node& n = tg.nodes[i];
    bool all_constant = true;
    for (const auto& in : n.inputs)
      if (!in.empty() && !constant.count(in)) all_constant = false;
    for (const auto& o : n.outputs)
      if (!o.empty()) {
        producer[o] = i;
        if (all_constant) constant.insert(o);
      }
  }

  // Changed nodes and everything downstream of them (the nodes are topologically sorted).
  std::vector<bool> in_part(tg.nodes.size(), false);
  std::set<std::string> part_values;
  for (size_t i = 0; i < tg.nodes.size(); ++i) {
    const ir::Node& n = tg.nodes[i];
    auto m = base_nodes.find(n.name);
    bool changed = m == base_nodes.end() || !SameNode(n, *m->second, tg, bg);
    for (const auto& in : n.inputs)
      if (part_values.count(in)) changed = true;
    if (!changed) continue;
    in_part[i] = true;
    for (const auto& o : n.outputs)
      if (!o.empty()) part_values.insert(o);
  }
  // The constant nodes the part reads (weights' DequantizeLinear), and the producers
  // of values the base does not hand over (a fused kernel computed them inside),
  // transitively: the part starts where the base's values are available.
  std::vector<size_t> stack;
  for (size_t i = 0; i < tg.nodes.size(); ++i)
    if (in_part[i]) stack.push_back(i);
  while (!stack.empty()) {
    const ir::Node& n = tg.nodes[stack.back()];
    stack.pop_back();
    for (const auto& in : n.inputs) {
      if (in.empty() || tg.initializers.count(in)) continue;
      auto p = producer.find(in);
      if (p == producer.end() || in_part[p->second]) continue;  // a graph input, or computed in the part
      if (!constant.count(in) && (!available || available(in))) continue;
      in_part[p->second] = true;
      stack.push_back(p->second);
    }
  }

  DownstreamPart part;
  ir::Graph& g = part.model.graph;
  g.name = tg.name;
  part.model.opsets = trial.opsets;
  part.model.ir_version = trial.ir_version;
  std::set<std::string> produced, cut, used;
  for (size_t i = 0; i < tg.nodes.size(); ++i) {
    if (!in_part[i]) continue;
    const ir::Node& n = tg.nodes[i];
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      used.insert(in);
      if (produced.count(in)) continue;
      auto init = tg.initializers.find(in);
      if (init != tg.initializers.end()) {
        g.initializers.emplace(in, init->second);
      } else if (cut.insert(in).second) {
        part.cut.push_back(in);
      }
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) produced.insert(o);
    g.nodes.push_back(n);
  }
  part.nodes = g.nodes.size();
  for (const auto& name : part.cut) {
    ir::ValueInfo info;
    info.name = name;
    if (const ir::ValueInfo* known = tg.FindValueInfo(name)) info = *known;
    // Values the quantizer inserted have no recorded type; their producer tells it.
    auto p = producer.find(name);
    if (info.dtype == DType::kUndefined && p != producer.end()) {
      const ir::Node& n = tg.nodes[p->second];
      const bool dq = n.op_type == "DequantizeLinear", q = n.op_type == "QuantizeLinear";
      const std::string typed = dq && n.inputs.size() > 1 ? n.inputs[1] : q && n.inputs.size() > 2 ? n.inputs[2] : "";
      auto init = tg.initializers.find(typed);
      if (init != tg.initializers.end())
        info.dtype = init->second.dtype();
      else if (q)
        info.dtype = DType::kUInt8;  // QuantizeLinear's default output type
    }
    g.inputs.push_back(std::move(info));
  }
  for (const auto& out : tg.outputs) {
    if (produced.count(out.name))
      g.outputs.push_back(out);
    else
      part.outputs_from_base.push_back(out.name);
  }
  for (const auto& vi : tg.value_infos)
    if (produced.count(vi.name) && !cut.count(vi.name)) g.value_infos.push_back(vi);
  // A part without outputs (a change that reaches no output) computes nothing needed.
  if (g.outputs.empty()) {
    g.nodes.clear();
    g.initializers.clear();
    g.inputs.clear();
    g.value_infos.clear();
    part.cut.clear();
    part.nodes = 0;
  }
  return part;
}

std::vector<runtime::TensorMap> Rechunk(const std::vector<runtime::TensorMap>& batches, int64_t rows) {
  std::vector<runtime::TensorMap> out;
  for (const auto& b : batches) {
    const int64_t n = !b.empty() && b.begin()->second.rank() > 0 ? b.begin()->second.dim(0) : 0;
    if (n <= rows || rows <= 0) {
      out.push_back(b);
      continue;
    }
    for (int64_t begin = 0; begin < n; begin += rows) out.push_back(Rows(b, begin, std::min(n, begin + rows)));
  }
  return out;
}

Expected<std::vector<double>> IncrementalLosses(const QuantPlan& plan, const std::set<std::string>& base,
                                                const std::vector<std::set<std::string>>& trials,
                                                const std::vector<runtime::TensorMap>& chunks,
                                                const std::vector<runtime::TensorMap>& refs,
                                                const IncrementalOptions& options, size_t* chunks_used) {
  if (chunks.size() != refs.size()) return InternalError("incremental evaluation: chunks and references differ");
  runtime::SessionOptions so = options.session;
  so.threads = 1;
  SEQTO_ASSIGN_OR_RETURN(ir::Model base_model, plan.Materialize(base, options.fallback));
  // The base runs as it would alone (no kept values, so no fusion is stopped); the
  // parts start from the values it hands over. The first chunk's run tells which.
  SEQTO_ASSIGN_OR_RETURN(auto base_session, runtime::Session::Create(base_model, so));
  std::set<std::string> wanted;  // empty until the parts are known: keep everything
  runtime::TensorMap kept, base_out;
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& v) {
    if (wanted.empty() || wanted.count(name)) kept[name] = v;
  };
  if (!chunks.empty()) {
    SEQTO_ASSIGN_OR_RETURN(base_out, base_session->Run(chunks[0], &hooks));
  }
  std::function<bool(const std::string&)> available = [&](const std::string& name) { return kept.count(name) > 0; };

  // Each trial's downstream part and its session.
  std::vector<DownstreamPart> parts(trials.size());
  std::vector<std::unique_ptr<runtime::Session>> sessions(trials.size());
  std::mutex tick_mutex;
  auto tick = [&] {
    if (!options.tick) return;
    std::lock_guard<std::mutex> lock(tick_mutex);
    options.tick();
  };
  SEQTO_RETURN_IF_ERROR(ParallelFor(trials.size(), options.workers, [&](size_t i) -> Status {
    SEQTO_ASSIGN_OR_RETURN(ir::Model trial, plan.Materialize(trials[i], options.fallback));
    SEQTO_ASSIGN_OR_RETURN(parts[i], CutDownstream(base_model, trial, available));
    if (parts[i].nodes > 0) {
      SEQTO_ASSIGN_OR_RETURN(sessions[i], runtime::Session::Create(parts[i].model, so));
    }
    parts[i].model = ir::Model();  // the session has what it needs
    tick();
    return Status::Ok();
  }));
  for (const auto& p : parts) wanted.insert(p.cut.begin(), p.cut.end());
  if (wanted.empty()) wanted.insert(std::string());  // no part needs a value: keep none

  std::vector<double> signal(trials.size(), 0.0), noise(trials.size(), 0.0), losses(trials.size(), 0.0);
  size_t used = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (c > 0) {
      kept.clear();
      SEQTO_ASSIGN_OR_RETURN(base_out, base_session->Run(chunks[c], &hooks));
    }
    const runtime::TensorMap& ref = refs[c];
    SEQTO_RETURN_IF_ERROR(ParallelFor(trials.size(), options.workers, [&](size_t i) -> Status {
      runtime::TensorMap out;
      if (sessions[i]) {
        runtime::TensorMap feeds;
        for (const auto& name : parts[i].cut) {
          auto it = kept.find(name);
          if (it == kept.end())
            return InternalError("incremental evaluation: the base did not compute value '" + name + "'");
          feeds[name] = it->second;
        }
        SEQTO_ASSIGN_OR_RETURN(out, sessions[i]->Run(feeds));
        // One session per plan stays alive for the round: none may keep a run's
        // buffers (MobileNetV2's 54 would hold about 10 GB).
        sessions[i]->ReleaseBuffers();
      }
      for (const auto& name : parts[i].outputs_from_base) {
        auto it = base_out.find(name);
        if (it != base_out.end()) out[name] = it->second;
      }
      LossSums sums;
      sums.Add(ref, out);
      signal[i] += sums.signal;
      noise[i] += sums.noise;
      return Status::Ok();
    }));
    used = c + 1;
    for (size_t i = 0; i < trials.size(); ++i) losses[i] = OutputLoss(signal[i], noise[i]);
    tick();
    if (options.after_chunk && options.after_chunk(used, losses)) break;
  }
  if (chunks_used) *chunks_used = used;
  return losses;
}

}  // namespace seqto::quant
