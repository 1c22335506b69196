#include "quant/analysis/analyze.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/parallel.h"
#include "eval/metrics.h"
#include "quant/analysis/incremental.h"

namespace seqto::quant {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Where one quantized activation lives in the QDQ model: the value entering its
// QuantizeLinear and the value leaving its DequantizeLinear.
struct ActivationSite {
  std::string float_name;  // the value in the float (prepared) model
  std::string pre_q;       // QDQ model: input of QuantizeLinear
  std::string post_dq;     // QDQ model: output of DequantizeLinear
};

struct QdqIndex {
  std::map<std::string, const ir::Node*> producer;                // value -> node
  std::map<std::string, std::vector<const ir::Node*>> consumers;  // value -> nodes
  std::map<std::string, const ir::Node*> by_name;
};

QdqIndex IndexGraph(const ir::Graph& g) {
  QdqIndex index;
  for (const auto& n : g.nodes) {
    index.by_name[n.name] = &n;
    for (const auto& o : n.outputs)
      if (!o.empty()) index.producer[o] = &n;
    for (const auto& i : n.inputs)
      if (!i.empty()) index.consumers[i].push_back(&n);
  }
  return index;
}

bool IsOp(const ir::Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }

// Finds the Q/DQ pair of activation `t`: either Q reads t (t keeps its name before Q),
// or DQ writes t (a graph output keeps its name after DQ).
std::optional<ActivationSite> FindSite(const QdqIndex& index, const std::string& t) {
  auto consumers = index.consumers.find(t);
  if (consumers != index.consumers.end()) {
    for (const ir::Node* q : consumers->second) {
      if (!IsOp(q, "QuantizeLinear") || q->outputs.empty()) continue;
      auto dqs = index.consumers.find(q->outputs[0]);
      if (dqs == index.consumers.end()) continue;
      for (const ir::Node* dq : dqs->second)
        if (IsOp(dq, "DequantizeLinear")) return ActivationSite{t, t, dq->outputs[0]};
    }
  }
  auto producer = index.producer.find(t);
  if (producer != index.producer.end() && IsOp(producer->second, "DequantizeLinear")) {
    auto q = index.producer.find(producer->second->inputs[0]);
    if (q != index.producer.end() && IsOp(q->second, "QuantizeLinear"))
      return ActivationSite{t, q->second->inputs[0], t};
  }
  return std::nullopt;
}

// (q - zp) * scale along `axis` (DequantizeLinear's semantics, in double).
Expected<std::vector<double>> Dequantize(const Tensor& q, const Tensor& scale, const Tensor* zero_point, int64_t axis) {
  const std::vector<double> qv = q.ToDoubles(), sv = scale.ToDoubles();
  const std::vector<double> zv = zero_point ? zero_point->ToDoubles() : std::vector<double>(sv.size(), 0.0);
  if (zv.size() != sv.size()) return UserError("zero point and scale sizes differ");
  std::vector<double> out(qv.size());
  if (sv.size() == 1) {
    for (size_t i = 0; i < qv.size(); ++i) out[i] = (qv[i] - zv[0]) * sv[0];
    return out;
  }
  if (axis < 0) axis += q.rank();
  if (axis < 0 || axis >= q.rank() || q.dim(axis) != static_cast<int64_t>(sv.size()))
    return UserError("per-axis scale does not match the weight's shape");
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < q.rank(); ++d) inner *= q.dim(d);
  const int64_t channels = q.dim(axis);
  for (size_t i = 0; i < qv.size(); ++i) {
    const size_t c = (i / inner) % channels;
    out[i] = (qv[i] - zv[c]) * sv[c];
  }
  return out;
}

// Weight SQNR of every weight of a group: the float initializer against the
// dequantized initializer that replaces it in the QDQ model (matched by node name and
// input position, so no naming convention of the rewriter is assumed).
Expected<double> WeightSqnr(const QuantGroup& group, const ir::Graph& float_graph, const ir::Graph& qdq_graph,
                            const QdqIndex& qdq_index) {
  if (group.weights.empty()) return kNaN;
  SqnrAccumulator acc;
  std::set<std::string> weights(group.weights.begin(), group.weights.end());
  for (const auto& node_name : group.nodes) {
    const ir::Node* float_node = nullptr;
    for (const auto& n : float_graph.nodes)
      if (n.name == node_name) float_node = &n;
    auto qdq_node = qdq_index.by_name.find(node_name);
    if (!float_node || qdq_node == qdq_index.by_name.end()) continue;
    for (size_t j = 0; j < float_node->inputs.size() && j < qdq_node->second->inputs.size(); ++j) {
      const std::string& w = float_node->inputs[j];
      if (!weights.count(w)) continue;
      auto producer = qdq_index.producer.find(qdq_node->second->inputs[j]);
      if (producer == qdq_index.producer.end() || !IsOp(producer->second, "DequantizeLinear")) continue;
      const ir::Node& dq = *producer->second;
      auto get = [&](size_t k) -> const Tensor* {
        if (k >= dq.inputs.size() || dq.inputs[k].empty()) return nullptr;
        auto it = qdq_graph.initializers.find(dq.inputs[k]);
        return it == qdq_graph.initializers.end() ? nullptr : &it->second;
      };
      const Tensor *q = get(0), *scale = get(1), *zp = get(2);
      auto fw = float_graph.initializers.find(w);
      if (!q || !scale || fw == float_graph.initializers.end()) continue;
      // A bias (int32, scale s_x * s_w) is quantized almost losslessly; weight SQNR is
      // about the weight itself (docs/design.md, Error metrics and rankers).
      if (q->dtype() == DType::kInt32) continue;
      SEQTO_ASSIGN_OR_RETURN(const int64_t axis, dq.attr_int("axis", 1));
      auto deq = Dequantize(*q, *scale, zp, axis);
      if (!deq) return Status(deq.error()).WithContext("weight '" + w + "'");
      const std::vector<double> x = fw->second.ToDoubles();
      if (x.size() != deq->size()) return InternalError("weight '" + w + "': dequantized size differs");
      acc.Add(x.data(), deq->data(), x.size());
    }
  }
  return acc.count() ? acc.Db() : kNaN;
}

// Per-sample loss of the candidate's outputs against the reference's.
std::vector<double> PerSampleLoss(const runtime::TensorMap& ref, const runtime::TensorMap& cand) {
  std::vector<double> signal, noise;
  for (const auto& [name, r] : ref) {
    auto it = cand.find(name);
    if (it == cand.end() || r.dtype() != DType::kFloat32 || r.rank() == 0 || it->second.numel() != r.numel()) continue;
    const int64_t n = r.dim(0), per = n ? r.numel() / n : 0;
    signal.resize(n, 0.0);
    noise.resize(n, 0.0);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < per; ++i) {
        const double x = r.data<float>()[s * per + i], y = it->second.data<float>()[s * per + i];
        signal[s] += x * x;
        noise[s] += (x - y) * (x - y);
      }
  }
  std::vector<double> loss(signal.size());
  for (size_t s = 0; s < loss.size(); ++s) loss[s] = OutputLoss(signal[s], noise[s]);
  return loss;
}

// Min-max normalization to [0, 1] over the finite values; NaN stays NaN; a constant
// set normalizes to 0.
std::vector<double> Normalize(const std::vector<double>& v) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  std::vector<double> out(v.size(), kNaN);
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isfinite(v[i])) out[i] = hi > lo ? (v[i] - lo) / (hi - lo) : 0.0;
  return out;
}

// Restores the intra-op thread count when the analysis (which runs single-threaded
// sessions on several threads) ends.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(NumThreads()) {}
  ~ThreadCountGuard() { SetNumThreads(saved_); }

 private:
  int saved_;
};

// Plan evaluations of the greedy forward selection among `pool` candidates: step s
// evaluates the pool - s candidates not yet reverted; the first step's plans are the
// revert-one plans when that pass ran.
size_t ForwardRuns(size_t pool, size_t steps, bool revert_one_ran) {
  size_t runs = 0;
  for (size_t s = revert_one_ran ? 1 : 0; s < steps; ++s) runs += pool - s;
  return runs;
}

// Groups backward elimination quantizes in a round with `left` groups still float:
// halves while more than `exact` are left, never going below `exact`, then one.
size_t BackwardTake(size_t left, size_t exact) { return left > exact ? std::min(left / 2, left - exact) : 1; }

// Plan evaluations of backward elimination over n groups, `pool` of them
// candidates: a round evaluates every group still float; the first round's plans
// are the isolated plans, and with pool < n it quantizes every other group at once.
size_t BackwardRuns(size_t n, size_t exact, size_t pool) {
  if (n < 2) return 0;
  size_t runs = 0;
  for (size_t left = pool < n ? pool : n - BackwardTake(n, exact); left > 1; left -= BackwardTake(left, exact))
    runs += left;
  return runs;
}

// Index in `candidates` of the lowest loss (NaN never wins over a number); equal
// losses go to the earlier candidate, so a search does not depend on thread timing.
size_t ArgMin(const std::vector<size_t>& candidates, const std::vector<double>& loss) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    const double l = loss[candidates[i]], b = loss[candidates[best]];
    if (l < b || (std::isnan(b) && !std::isnan(l))) best = i;
  }
  return best;
}

// Records the analysis's passes (AnalysisResult::stages): each Finish closes the
// span since the previous one.
class StageClock {
 public:
  explicit StageClock(AnalysisResult& result) : result_(result) { Mark(); }
  void Finish(const std::string& name, size_t samples) {
    const auto now = std::chrono::steady_clock::now();
    const double cpu = Cpu();
    result_.stages.push_back({name, std::chrono::duration<double>(now - wall_).count(), cpu - cpu_,
                              result_.plan_evaluations - plans_, samples});
    Mark();
  }
  // The SQNR pass measures two models, not edited plans.
  void FinishFixed(const std::string& name, size_t plans, size_t samples) {
    Finish(name, samples);
    result_.stages.back().plans = plans;
  }

 private:
  static double Cpu() {
    timespec ts{};
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  void Mark() {
    wall_ = std::chrono::steady_clock::now();
    cpu_ = Cpu();
    plans_ = result_.plan_evaluations;
  }
  AnalysisResult& result_;
  std::chrono::steady_clock::time_point wall_;
  double cpu_ = 0;
  size_t plans_ = 0;
};

}  // namespace

double OutputLoss(double signal_sumsq, double noise_sumsq) {
  if (signal_sumsq <= 0) return noise_sumsq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return noise_sumsq / signal_sumsq;
}

Expected<AnalysisResult> Analyze(const QuantPlan& plan, const BatchList& data, const AnalysisOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (data.num_batches == 0) return UserError("analysis needs at least one batch of data");
  AnalysisResult result;
  StageClock clock(result);
  const ir::Model& float_model = plan.prepared_model();
  SEQTO_ASSIGN_OR_RETURN(ir::Model full, plan.Materialize({}));
  const QdqIndex index = IndexGraph(full.graph);
  const auto& groups = plan.groups();

  // Which activations each group is judged by: its quantized outputs, or its inputs
  // when no output is quantized.
  std::map<std::string, ActivationSite> sites;  // float name -> site
  std::vector<std::vector<std::string>> group_activations(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::set<std::string> outputs;
    for (const auto& node_name : groups[g].nodes) {
      auto node = index.by_name.find(node_name);
      if (node != index.by_name.end())
        for (const auto& o : node->second->outputs) outputs.insert(o);
    }
    std::vector<std::string> outs, ins;
    for (const auto& t : groups[g].activations) {
      auto site = FindSite(index, t);
      if (!site) continue;
      sites.emplace(t, *site);
      // A quantized output: the node writes t (before Q) or its DQ writes t.
      (outputs.count(t) || outputs.count(site->pre_q) ? outs : ins).push_back(t);
    }
    group_activations[g] = outs.empty() ? ins : outs;
  }

  // The float and the QDQ model must both expose these values (no fusion hides them).
  runtime::SessionOptions float_options, qdq_options;
  float_options.threads = qdq_options.threads = options.threads;
  std::map<std::string, std::string> post_to_float;
  std::set<std::string> pre_names;
  for (const auto& [t, site] : sites) {
    float_options.keep_values.insert(t);
    qdq_options.keep_values.insert(site.pre_q);
    qdq_options.keep_values.insert(site.post_dq);
    post_to_float[site.post_dq] = t;
    pre_names.insert(site.pre_q);
  }
  SEQTO_ASSIGN_OR_RETURN(auto float_session, runtime::Session::Create(float_model, float_options));
  SEQTO_ASSIGN_OR_RETURN(auto qdq_session, runtime::Session::Create(full, qdq_options));

  std::map<std::string, SqnrAccumulator> qdq_acc, xmodel_acc;
  std::vector<runtime::TensorMap> batches_kept;  // ranking batches, for the sensitivity passes
  std::vector<runtime::TensorMap> float_outputs;
  LossSums full_loss;
  std::vector<double> sample_loss;
  size_t samples = 0;
  const size_t passes = options.revert_one ? 2 : 1;  // isolated, and revert-one if asked
  const size_t sensitivity_units = options.sensitivity ? passes * groups.size() : 0;
  // The searches' candidates: the `search_candidates` groups with the largest
  // isolated loss (chosen after the isolated pass), or all.
  const size_t pool =
      options.search_candidates > 0 ? std::min(options.search_candidates, groups.size()) : groups.size();
  const size_t greedy_steps = options.sensitivity ? std::min(options.greedy_steps, pool) : 0;
  // Backward: one group per round once greedy_steps + 1 are left, so that its first
  // greedy_steps positions are measured (what damage compares with forward's).
  const size_t backward_exact = greedy_steps + 1;
  const bool backward = greedy_steps > 0 && options.backward;
  const size_t search_units = ForwardRuns(pool, greedy_steps, options.revert_one) +
                              (backward ? BackwardRuns(groups.size(), backward_exact, pool) : 0);
  const size_t total_units = data.num_batches + sensitivity_units + search_units;

  for (size_t b = 0; b < data.num_batches; ++b) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap batch, data.get(b));
    std::map<std::string, Tensor> float_values, pre_values;
    runtime::RunHooks float_hooks;
    float_hooks.observe = [&](const std::string& name, const Tensor& v) {
      if (sites.count(name)) float_values[name] = v;
    };
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap ref, float_session->Run(batch, &float_hooks));

    Status hook_status;
    runtime::RunHooks qdq_hooks;
    qdq_hooks.observe = [&](const std::string& name, const Tensor& v) {
      if (pre_names.count(name)) pre_values[name] = v;
      auto post = post_to_float.find(name);
      if (post == post_to_float.end() || !hook_status.ok()) return;
      const ActivationSite& site = sites.at(post->second);
      auto pre = pre_values.find(site.pre_q);
      auto fv = float_values.find(site.float_name);
      if (pre == pre_values.end() || fv == float_values.end()) return;
      Status s = qdq_acc[site.float_name].Add(pre->second, v);
      if (s.ok()) s = xmodel_acc[site.float_name].Add(fv->second, v);
      if (!s.ok()) hook_status = std::move(s).WithContext("value '" + site.float_name + "'");
    };
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap cand, qdq_session->Run(batch, &qdq_hooks));
    SEQTO_RETURN_IF_ERROR(hook_status);
    full_loss.Add(ref, cand);
    const std::vector<double> per_sample = PerSampleLoss(ref, cand);
    sample_loss.insert(sample_loss.end(), per_sample.begin(), per_sample.end());
    if (!batch.empty() && batch.begin()->second.rank() > 0) samples += batch.begin()->second.dim(0);
    if (options.sensitivity) {
      batches_kept.push_back(std::move(batch));
      float_outputs.push_back(std::move(ref));
    }
    if (options.progress) options.progress(b + 1, total_units);
  }

  result.samples = samples;
  result.full_output_loss = OutputLoss(full_loss.signal, full_loss.noise);
  result.full_output_sqnr_db = -10.0 * std::log10(std::max(result.full_output_loss, 1e-300));
  std::vector<double> xmodel(groups.size(), kNaN), qdq(groups.size(), kNaN);
  for (size_t g = 0; g < groups.size(); ++g) {
    GroupAnalysis a;
    a.name = groups[g].name;
    a.op_type = groups[g].op_type;
    a.nodes = groups[g].nodes;
    a.order = groups[g].order;
    a.weight_elements = groups[g].weight_elements;
    a.output_channels = groups[g].output_channels;
    a.macs = groups[g].macs;
    SEQTO_ASSIGN_OR_RETURN(a.weight_sqnr_db, WeightSqnr(groups[g], float_model.graph, full.graph, index));
    // A group judged by several activations takes the worst of them.
    for (const auto& t : group_activations[g]) {
      auto q = qdq_acc.find(t), x = xmodel_acc.find(t);
      if (q == qdq_acc.end() || x == xmodel_acc.end()) continue;
      qdq[g] = std::isnan(qdq[g]) ? q->second.Db() : std::min(qdq[g], q->second.Db());
      xmodel[g] = std::isnan(xmodel[g]) ? x->second.Db() : std::min(xmodel[g], x->second.Db());
    }
    a.qdq_sqnr_db = qdq[g];
    a.xmodel_sqnr_db = xmodel[g];
    a.sensitivity_isolated = a.sensitivity_revert_one = kNaN;
    result.groups.push_back(std::move(a));
  }
  const std::vector<double> nx = Normalize(xmodel), nq = Normalize(qdq);
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool has_x = std::isfinite(nx[g]), has_q = std::isfinite(nq[g]);
    result.groups[g].seqto_score = has_x && has_q ? 0.5 * nx[g] + 0.5 * nq[g] : has_x ? nx[g] : has_q ? nq[g] : kNaN;
  }

  clock.FinishFixed("sqnr", 2, samples);

  if (options.sensitivity) {
    // The sensitivity subset: every sample, or the worst ones of the full model.
    std::vector<runtime::TensorMap> sens_batches = std::move(batches_kept), sens_ref = std::move(float_outputs);
    if (options.worst_samples > 0 && options.worst_samples < sample_loss.size()) {
      std::vector<size_t> order(sample_loss.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sample_loss[a] > sample_loss[b]; });
      std::set<size_t> chosen(order.begin(), order.begin() + options.worst_samples);
      std::vector<runtime::TensorMap> kept_batches, kept_ref;
      size_t base = 0;
      for (size_t b = 0; b < sens_batches.size(); ++b) {
        const int64_t n = sens_batches[b].begin()->second.rank() ? sens_batches[b].begin()->second.dim(0) : 1;
        std::vector<int64_t> rows;
        for (int64_t r = 0; r < n; ++r)
          if (chosen.count(base + r)) rows.push_back(r);
        base += n;
        if (rows.empty()) continue;
        kept_batches.push_back(SelectRows(sens_batches[b], rows));
        kept_ref.push_back(SelectRows(sens_ref[b], rows));
      }
      sens_batches = std::move(kept_batches);
      sens_ref = std::move(kept_ref);
      result.sensitivity_samples = options.worst_samples;
    } else {
      result.sensitivity_samples = samples;
    }

    // Losses of edited plans on the subset, with the same session options as the
    // candidates (int8 fusion on), so differences come from the groups alone. The
    // fully quantized model's loss is what revert-one subtracts from.
    auto loss_of = [&](const std::set<std::string>& excluded, double& loss) -> Status {
      SEQTO_ASSIGN_OR_RETURN(ir::Model model, plan.Materialize(excluded));
      runtime::SessionOptions so;
      so.threads = 1;
      SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, so));
      LossSums sums;
      for (size_t b = 0; b < sens_batches.size(); ++b) {
        SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap out, session->Run(sens_batches[b]));
        sums.Add(sens_ref[b], out);
      }
      loss = OutputLoss(sums.signal, sums.noise);
      return Status::Ok();
    };

    ThreadCountGuard thread_guard;
    // Output losses of many edited plans, one single-threaded session per plan,
    // `workers` plans at a time (the plans are independent).
    const int hw = std::max(1u, std::thread::hardware_concurrency());
    std::atomic<size_t> done{data.num_batches};
    auto evaluate = [&](const std::vector<std::set<std::string>>& plans,
                        const std::function<std::string(size_t)>& what) -> Expected<std::vector<double>> {
      std::vector<double> losses(plans.size(), kNaN);
      const size_t workers = std::min<size_t>(options.threads > 0 ? options.threads : hw, plans.size());
      std::atomic<size_t> next{0};
      std::mutex mutex;
      Status first_error;
      auto work = [&] {
        for (size_t i = next++; i < plans.size(); i = next++) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            if (!first_error.ok()) return;
          }
          double loss = 0;
          Status s = loss_of(plans[i], loss);
          std::lock_guard<std::mutex> lock(mutex);
          if (!s.ok()) {
            if (first_error.ok()) first_error = std::move(s).WithContext(what(i));
            return;
          }
          losses[i] = loss;
          if (options.progress) options.progress(++done, total_units);
        }
      };
      std::vector<std::thread> threads;
      for (size_t w = 1; w < workers; ++w) threads.emplace_back(work);
      work();
      for (auto& t : threads) t.join();
      SEQTO_RETURN_IF_ERROR(first_error);
      return losses;
    };
    auto group_context = [&](size_t g) { return "group '" + groups[g].name + "'"; };

    std::set<std::string> all_names;
    for (const auto& g : groups) all_names.insert(g.name);

    // The incremental path's samples, in chunks (its memory is one chunk's kept
    // values); the isolated pass may stop early and leave fewer for the later ones.
    std::vector<runtime::TensorMap> chunks, chunk_refs;
    if (options.incremental) {
      const auto rows = static_cast<int64_t>(std::max<size_t>(1, options.chunk_samples));
      chunks = Rechunk(sens_batches, rows);
      chunk_refs = Rechunk(sens_ref, rows);
    }
    const int workers = options.threads > 0 ? options.threads : hw;
    // Losses of `trials`, all edits of the plan `base` by one group.
    auto round = [&](const std::set<std::string>& base, const std::vector<std::set<std::string>>& trials,
                     const std::string& what, const std::function<std::string(size_t)>& plan_context,
                     std::function<bool(size_t, const std::vector<double>&)> after_chunk =
                         nullptr) -> Expected<std::vector<double>> {
      if (!options.incremental) {
        result.plan_evaluations += trials.size();
        return evaluate(trials, plan_context);
      }
      // The fully quantized model's loss is measured by the other path too, uncounted.
      const bool counted = !(trials.size() == 1 && trials[0].empty() && base.empty());
      if (counted) result.plan_evaluations += trials.size();
      IncrementalOptions io;
      io.workers = workers;
      io.after_chunk = std::move(after_chunk);
      size_t used = chunks.size();
      auto losses = IncrementalLosses(plan, base, trials, chunks, chunk_refs, io, &used);
      if (!losses) return Status(losses.error()).WithContext(what);
      chunks.resize(used);
      chunk_refs.resize(used);
      for (size_t i = 0; counted && i < trials.size(); ++i)  // one call per plan, as the other path
        if (options.progress) options.progress(++done, total_units);
      return losses;
    };

    // Isolated (every other group excluded): an edit of the float model. With the
    // incremental path it also decides how many samples the passes need.
    std::vector<std::set<std::string>> plans;
    for (size_t g = 0; g < groups.size(); ++g) {
      plans.push_back(all_names);
      plans.back().erase(groups[g].name);
    }
    std::function<bool(size_t, const std::vector<double>&)> stable = nullptr;
    std::vector<std::string> last_top;
    size_t unchanged = 0;
    if (options.incremental && options.stable_chunks > 0) {
      stable = [&](size_t used, const std::vector<double>& losses) {
        std::vector<size_t> order(losses.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return losses[a] > losses[b]; });
        std::vector<std::string> top;
        for (size_t i = 0; i < order.size() && i < options.stable_top; ++i) top.push_back(groups[order[i]].name);
        unchanged = top == last_top ? unchanged + 1 : 0;
        last_top = top;
        result.stability_trace.push_back(top);
        return used >= options.min_chunks && unchanged >= options.stable_chunks;
      };
    }
    SEQTO_ASSIGN_OR_RETURN(const std::vector<double> isolated_loss,
                           round(all_names, plans, "isolated pass", group_context, stable));
    for (size_t g = 0; g < groups.size(); ++g) result.groups[g].sensitivity_isolated = isolated_loss[g];
    if (options.incremental) {
      result.sensitivity_samples = 0;
      for (const auto& c : chunks)
        result.sensitivity_samples += c.empty() || c.begin()->second.rank() == 0 ? 1 : c.begin()->second.dim(0);
    }
    clock.Finish("isolated", result.sensitivity_samples);

    double full_subset_loss = 0;
    if (options.incremental) {
      SEQTO_ASSIGN_OR_RETURN(const std::vector<double> l,
                             round({}, {{}}, "the fully quantized model", [](size_t) { return std::string(); }));
      full_subset_loss = l[0];
    } else {
      SEQTO_RETURN_IF_ERROR(loss_of({}, full_subset_loss));
    }
    result.sensitivity_full_loss = full_subset_loss;
    clock.Finish("fully quantized", result.sensitivity_samples);

    // Revert-one (only this group excluded): an edit of the full quantization.
    std::vector<double> revert_one_loss(groups.size(), kNaN);
    if (options.revert_one) {
      plans.clear();
      for (size_t g = 0; g < groups.size(); ++g) plans.push_back({groups[g].name});
      SEQTO_ASSIGN_OR_RETURN(revert_one_loss, round({}, plans, "revert-one pass", group_context));
      for (size_t g = 0; g < groups.size(); ++g)
        result.groups[g].sensitivity_revert_one = full_subset_loss - revert_one_loss[g];
      clock.Finish("revert-one", result.sensitivity_samples);
    }

    // The searches' candidates (in the plan's group order): the groups with the
    // largest isolated loss. A group whose damage alone is small rarely becomes the
    // best reversion once a few others are reverted (MobileNetV2-12: forward's 8
    // picks were all among the first 12 by isolated loss), and each search step
    // costs one plan per candidate.
    std::vector<size_t> candidates(groups.size());
    std::iota(candidates.begin(), candidates.end(), 0);
    if (pool < groups.size()) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
        const double la = std::isnan(isolated_loss[a]) ? -1 : isolated_loss[a];
        const double lb = std::isnan(isolated_loss[b]) ? -1 : isolated_loss[b];
        return la > lb;
      });
      candidates.resize(pool);
      std::sort(candidates.begin(), candidates.end());
    }

    // Greedy forward selection: revert the candidate that leaves the lowest output
    // loss given the groups reverted so far.
    {
      std::set<std::string> reverted;
      std::vector<size_t> remaining = candidates;
      for (size_t step = 0; step < greedy_steps; ++step) {
        std::vector<double> step_loss;
        if (step == 0 && options.revert_one) {
          step_loss = revert_one_loss;
        } else {
          std::vector<std::set<std::string>> trial;
          for (size_t g : remaining) {
            trial.push_back(reverted);
            trial.back().insert(groups[g].name);
          }
          const std::string what = "forward step " + std::to_string(step + 1);
          SEQTO_ASSIGN_OR_RETURN(std::vector<double> l, round(reverted, trial, what, [&](size_t i) {
                                   return what + ", " + group_context(remaining[i]);
                                 }));
          step_loss.assign(groups.size(), kNaN);
          for (size_t i = 0; i < remaining.size(); ++i) step_loss[remaining[i]] = l[i];
        }
        const size_t best = ArgMin(remaining, step_loss);
        const size_t g = remaining[best];
        reverted.insert(groups[g].name);
        result.greedy.push_back({groups[g].name, step_loss[g]});
        remaining.erase(remaining.begin() + static_cast<std::ptrdiff_t>(best));
      }
      if (greedy_steps > 0) clock.Finish("forward", result.sensitivity_samples);
    }

    // Backward elimination: from the float model, quantize the group that raises the
    // output loss least given the groups quantized so far; the group left float last
    // is the first to revert. Far from that end only the ranking's tail is being
    // decided, so while many groups are left the least damaging half goes at once.
    if (backward) {
      std::set<std::string> excluded = all_names;  // the groups still float
      std::vector<size_t> left(groups.size());
      std::iota(left.begin(), left.end(), 0);
      std::vector<SearchStep> eliminated;  // in elimination order, with the loss after it
      // With fewer candidates than groups, the first round (the isolated pass)
      // quantizes every other group at once, least damaging first.
      if (pool < groups.size()) {
        const std::set<size_t> keep(candidates.begin(), candidates.end());
        std::vector<size_t> others;
        for (size_t g : left)
          if (!keep.count(g)) others.push_back(g);
        while (!others.empty()) {
          const size_t best = ArgMin(others, isolated_loss);
          excluded.erase(groups[others[best]].name);
          eliminated.push_back({groups[others[best]].name, kNaN});
          others.erase(others.begin() + static_cast<std::ptrdiff_t>(best));
        }
        left = candidates;
      }
      for (size_t r = pool < groups.size() ? 1 : 0; left.size() > 1; ++r) {
        std::vector<double> round_loss;
        if (r == 0) {
          round_loss = isolated_loss;
        } else {
          std::vector<std::set<std::string>> trial;
          for (size_t g : left) {
            trial.push_back(excluded);
            trial.back().erase(groups[g].name);
          }
          const std::string what = "backward round " + std::to_string(r + 1);
          SEQTO_ASSIGN_OR_RETURN(std::vector<double> l, round(excluded, trial, what, [&](size_t i) {
                                   return what + ", " + group_context(left[i]);
                                 }));
          round_loss.assign(groups.size(), kNaN);
          for (size_t i = 0; i < left.size(); ++i) round_loss[left[i]] = l[i];
        }
        const size_t take = BackwardTake(left.size(), backward_exact);
        for (size_t t = 0; t < take; ++t) {
          const size_t best = ArgMin(left, round_loss);
          const size_t g = left[best];
          excluded.erase(groups[g].name);
          // A half taken at once leaves a plan that was not measured itself.
          eliminated.push_back({groups[g].name, take == 1 ? round_loss[g] : kNaN});
          left.erase(left.begin() + static_cast<std::ptrdiff_t>(best));
        }
      }
      // Position k (1-based) of the order: the loss with the first k groups float was
      // measured when the k-th group from the end was eliminated.
      const size_t n = groups.size(), e = eliminated.size();
      for (size_t k = 1; k <= n; ++k) {
        const std::string& name = k == 1 ? groups[left[0]].name : eliminated[e - k + 1].group;
        result.backward.push_back({name, k == n ? 0.0 : eliminated[e - k].loss});
      }
      clock.Finish("backward", result.sensitivity_samples);
    }
  } else {
    result.sensitivity_full_loss = kNaN;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace seqto::quant
