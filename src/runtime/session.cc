#include "runtime/session.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <new>
#include <stdexcept>

#include "core/parallel.h"
#include "ops/registry.h"
#include "rewrite/passes.h"

namespace seqto::runtime {

// Recycles storage between values whose lifetimes do not overlap. Output memory
// comes from here; a value's storage returns when its last consumer has run and
// nobody else (a hook, an alias) still holds it.
class Session::BufferPool {
 public:
  std::shared_ptr<Storage> Acquire(size_t bytes) {
    auto it = free_.lower_bound(bytes);
    // Best fit, but don't hand a huge block to a tiny value.
    if (it != free_.end() && it->first <= 2 * bytes + 4096) {
      auto storage = std::move(it->second);
      free_.erase(it);
      return storage;
    }
    return std::make_shared<Storage>(bytes);
  }
  void Release(std::shared_ptr<Storage> storage) {
    if (storage && storage.use_count() == 1) free_.emplace(storage->capacity, std::move(storage));
  }
  void Clear() { free_.clear(); }

 private:
  std::multimap<size_t, std::shared_ptr<Storage>> free_;
};

struct Session::Step {
  const ir::Node* node = nullptr;  // points into nodes_ (owned copy of the graph's nodes)
  int64_t opset = 0;
  // "node 'conv3' (Conv), opset 13": the prefix of this step's errors, naming the
  // user's node even when a pass rewrote it into an internal op.
  std::string where;
  std::unique_ptr<ops::Kernel> kernel;
  std::vector<int> inputs;   // value ids, -1 for omitted
  std::vector<int> outputs;  // value ids, -1 for omitted
  std::vector<int> release;  // values whose last use is this step
};

// Thrown by Context::Allocate for a request that cannot be a real tensor; RunKernel
// turns it into an error naming the node.
struct AllocationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Session::Context final : public ops::KernelContext {
 public:
  Context(BufferPool* pool, size_t max_bytes, std::vector<const Tensor*> inputs, const std::vector<int>& outputs,
          bool may_be_non_finite = true)
      : pool_(pool), max_bytes_(max_bytes) {
    may_be_non_finite_ = may_be_non_finite;
    inputs_ = std::move(inputs);
    outputs_.resize(outputs.size());
    output_wanted_.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) output_wanted_[i] = outputs[i] >= 0;
  }
  Tensor& Allocate(int i, DType dtype, Shape shape) override {
    if (i < 0 || i >= num_outputs())
      throw AllocationError("kernel allocated output " + std::to_string(i) + " but the node has " +
                            std::to_string(num_outputs()) + " outputs");
    uint64_t bytes = DTypeSize(dtype);
    if (bytes == 0)
      throw AllocationError("cannot allocate output " + std::to_string(i) + " of type " + DTypeName(dtype));
    bool overflow = false;
    for (int64_t d : shape) {
      if (d < 0)
        throw AllocationError("output " + std::to_string(i) + " would have negative shape " + ShapeToString(shape));
      overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
    }
    if (NumElements(shape) == 0) bytes = 0, overflow = false;
    if (overflow || bytes > max_bytes_)
      throw AllocationError("output " + std::to_string(i) + " (" + DTypeName(dtype) + "[" + ShapeToString(shape) +
                            "]) exceeds the " + std::to_string(max_bytes_) + "-byte tensor size limit");
    auto storage = pool_ ? pool_->Acquire(bytes) : std::make_shared<Storage>(bytes);
    outputs_[i] = Tensor(dtype, std::move(shape), std::move(storage));
    return outputs_[i];
  }
  std::vector<Tensor>& outputs() { return outputs_; }

 private:
  BufferPool* pool_;
  size_t max_bytes_;
};

Session::~Session() = default;

namespace {
int64_t OpsetFor(const ir::Model& model, const std::string& domain) {
  auto it = model.opsets.find(domain);
  if (it != model.opsets.end()) return it->second;
  return domain.empty() ? model.onnx_opset() : 1;
}

// Runs a pass's small graph (rewrite/fuse_unary_lookups.cc: a region on its 256
// input codes) unoptimized, with the model's opsets and the kernels `options` choose
// (reference or default), so that a table holds what the unfused graph computes.
rewrite::Evaluate MakeEvaluator(const ir::Model& model, const SessionOptions& options) {
  return [opsets = model.opsets, reference = options.reference_only, registry = options.registry](
             const ir::Graph& graph, const TensorMap& inputs) -> Expected<TensorMap> {
    ir::Model m;
    m.opsets = opsets;
    m.graph = graph;
    SessionOptions o;
    o.optimize = false;
    o.reference_only = reference;
    o.registry = registry;
    SEQTO_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(m, o));
    return s->Run(inputs);
  };
}
}  // namespace

Expected<std::unique_ptr<Session>> Session::Create(const ir::Model& model, const SessionOptions& options) {
  std::unique_ptr<Session> s(new Session());
  s->options_ = options;
  s->pool_ = std::make_unique<BufferPool>();
  if (options.threads > 0) SetNumThreads(options.threads);
  bool unnamed = false;
  for (const auto& n : model.graph.nodes) unnamed |= n.name.empty();
  if (!unnamed && !options.optimize) {
    SEQTO_RETURN_IF_ERROR(model.graph.Verify());
    SEQTO_RETURN_IF_ERROR(s->Plan(model));
    return s;
  }
  ir::Model prepared = model;               // cheap: tensors share their storage
  if (unnamed) prepared.graph.NameNodes();  // a model built in code may leave names out
  SEQTO_RETURN_IF_ERROR(prepared.graph.Verify());
  if (options.optimize) {
    // A fused node keeps the name of the node it replaces (the Conv of a FusedConv,
    // the anchor of a QDQ island): errors in it name that node and op.
    for (const ir::Node& n : prepared.graph.nodes) s->origins_[n.name] = {n.domain, n.op_type};
    rewrite::OptimizeOptions opt;
    opt.keep_values = options.keep_values;
    opt.channels_last = options.channels_last;
    opt.evaluate = MakeEvaluator(prepared, options);
    SEQTO_RETURN_IF_ERROR(rewrite::Optimize(prepared.graph, opt));
  }
  SEQTO_RETURN_IF_ERROR(s->Plan(prepared));
  return s;
}

Status Session::RunKernel(ops::Kernel& kernel, Context& ctx) {
  try {
    return kernel.Run(ctx);
  } catch (const AllocationError& e) {
    return UserError(e.what());
  } catch (const std::bad_alloc&) {
    return UserError("out of memory");
  } catch (const std::exception& e) {
    return InternalError(std::string("kernel failed: ") + e.what());
  }
}

Status Session::Plan(const ir::Model& model) {
  const ir::Graph& g = model.graph;
  nodes_ = g.nodes;
  inputs_ = g.inputs;
  outputs_ = g.outputs;
  auto id_of = [&](const std::string& name) {
    auto [it, inserted] = value_ids_.emplace(name, static_cast<int>(value_names_.size()));
    if (inserted) {
      value_names_.push_back(name);
      constants_.emplace_back();
    }
    return it->second;
  };
  for (const auto& [name, t] : g.initializers) constants_[id_of(name)] = t;
  for (const auto& in : g.inputs) input_ids_.push_back(id_of(in.name));

  const auto& registry = options_.registry ? *options_.registry : ops::OpRegistry::Global();
  for (const ir::Node& node : nodes_) {
    Step step;
    step.node = &node;
    step.opset = OpsetFor(model, node.domain);
    for (const auto& in : node.inputs) step.inputs.push_back(in.empty() ? -1 : id_of(in));
    for (const auto& out : node.outputs) step.outputs.push_back(out.empty() ? -1 : id_of(out));
    step.where = node.Describe() + ", opset " + std::to_string(step.opset);
    if (auto origin = origins_.find(node.name);
        origin != origins_.end() && origin->second != std::make_pair(node.domain, node.op_type))
      step.where = "node '" + node.name + "' (" + origin->second.second + "), opset " +
                   std::to_string(OpsetFor(model, origin->second.first));
    const std::string& where = step.where;
    const ops::OpDef* def = registry.Find(node.domain, node.op_type, step.opset);
    if (!def) {
      const std::string domain = node.domain.empty() ? "ai.onnx" : node.domain;
      if (registry.Has(node.domain, node.op_type))
        return UserError(where + ": op " + node.op_type + " is not supported at opset " + std::to_string(step.opset));
      return UserError(where + ": unsupported op " + domain + "." + node.op_type);
    }
    ops::KernelInit init{node, step.opset, {}, options_.reference_only};
    bool all_constant = true;
    for (int id : step.inputs) {
      const Tensor* c = id >= 0 && constants_[id].defined() ? &constants_[id] : nullptr;
      init.constant_inputs.push_back(c);
      if (id >= 0 && !c) all_constant = false;
    }
    Expected<std::unique_ptr<ops::Kernel>> kernel = InternalError("no kernel");
    try {
      kernel = def->create(init);
    } catch (const std::bad_alloc&) {
      return UserError(where + ": out of memory");
    } catch (const std::exception& e) {
      return InternalError(where + ": kernel creation failed: " + e.what());
    }
    if (!kernel) return Status(kernel.error()).WithContext(where);
    if (!*kernel) return InternalError(where + ": the op's factory returned no kernel");
    step.kernel = std::move(*kernel);

    bool keep = false;  // values hooks may override are computed at run time
    for (const auto& out : node.outputs) keep |= !out.empty() && options_.keep_values.count(out);
    if (options_.fold_constants && all_constant && !keep && !step.outputs.empty()) {
      std::vector<const Tensor*> ins;
      for (int id : step.inputs) ins.push_back(id >= 0 ? &constants_[id] : nullptr);
      Context ctx(nullptr, options_.max_tensor_bytes, std::move(ins), step.outputs);
      if (Status st = RunKernel(*step.kernel, ctx); !st.ok()) return std::move(st).WithContext(where);
      for (size_t i = 0; i < step.outputs.size(); ++i) {
        const int id = step.outputs[i];
        if (id < 0) continue;
        if (!ctx.outputs()[i].defined())
          return InternalError(where + ": kernel did not produce output " + std::to_string(i));
        constants_[id] = std::move(ctx.outputs()[i]);
        folded_ids_.push_back(id);
      }
      continue;
    }
    steps_.push_back(std::move(step));
  }
  for (const auto& out : g.outputs) output_ids_.push_back(id_of(out.name));

  // Lifetimes: each value is released after the last step that reads it, unless it
  // is a graph output or a constant.
  std::vector<int> last_use(value_names_.size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int id : steps_[s].inputs)
      if (id >= 0) last_use[id] = static_cast<int>(s);
  for (int id : output_ids_) last_use[id] = -1;
  for (size_t id = 0; id < last_use.size(); ++id)
    if (last_use[id] >= 0 && !constants_[id].defined()) steps_[last_use[id]].release.push_back(static_cast<int>(id));
  for (const Tensor& c : constants_) constants_non_finite_ |= !AllFinite(c);
  return Status::Ok();
}

Status Session::CheckInput(const ir::ValueInfo& info, const Tensor& t) const {
  if (!info.is_tensor())
    return UserError("input '" + info.name + "' is a " + info.other_type + "; seqto only runs tensor inputs");
  if (!t.defined())
    return UserError("input '" + info.name + "': expected " + info.Describe() + ", got an empty tensor");
  auto mismatch = [&](const std::string& what) {
    return UserError("input '" + info.name + "': " + what + ": expected " + info.Describe() +
                     (info.shape && !info.shape->empty() ? " (any first dimension)" : "") + ", got " + t.Describe());
  };
  if (info.dtype != DType::kUndefined && info.dtype != t.dtype()) return mismatch("wrong element type");
  if (!info.shape) return Status::Ok();
  if (info.shape->size() != t.shape().size()) return mismatch("wrong rank");
  for (size_t d = 1; d < t.shape().size(); ++d)  // dimension 0 is the free batch dimension
    if ((*info.shape)[d].known() && (*info.shape)[d].value != t.shape()[d])
      return mismatch("wrong size of dimension " + std::to_string(d));
  return Status::Ok();
}

void Session::ReleaseBuffers() {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (pool_) pool_->Clear();
}

Expected<TensorMap> Session::Run(const TensorMap& inputs, const RunHooks* hooks) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (options_.threads > 0) SetNumThreads(options_.threads);
  std::vector<Tensor> values(value_names_.size());
  for (size_t id = 0; id < constants_.size(); ++id)
    if (constants_[id].defined()) values[id] = constants_[id];

  for (const auto& [name, t] : inputs) {
    auto it = value_ids_.find(name);
    const bool is_input =
        it != value_ids_.end() && std::find(input_ids_.begin(), input_ids_.end(), it->second) != input_ids_.end();
    if (!is_input) {
      std::string expected;
      for (const auto& in : inputs_) expected += (expected.empty() ? "'" : ", '") + in.name + "'";
      return UserError("'" + name + "' is not an input of the model (inputs: " + expected + ")");
    }
  }
  // Whether any value this run starts from may be NaN or infinite (kernels then keep
  // NaN where a fused shortcut would lose it): an overridden value is not scanned.
  bool may_be_non_finite = constants_non_finite_ || (hooks && hooks->override_value);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto it = inputs.find(inputs_[i].name);
    if (it == inputs.end()) return UserError("input '" + inputs_[i].name + "' was not given a value");
    SEQTO_RETURN_IF_ERROR(CheckInput(inputs_[i], it->second));
    Tensor value = it->second;
    if (hooks && hooks->override_value)
      if (auto replaced = hooks->override_value(inputs_[i].name, value)) {
        if (!replaced->defined()) return UserError("override of input '" + inputs_[i].name + "' is an empty tensor");
        value = std::move(*replaced);
      }
    if (hooks && hooks->observe) hooks->observe(inputs_[i].name, value);
    may_be_non_finite = may_be_non_finite || !AllFinite(value);
    values[input_ids_[i]] = std::move(value);
  }
  if (hooks && (hooks->observe || hooks->override_value)) {
    for (int id : folded_ids_) {
      if (hooks->override_value && hooks->override_value(value_names_[id], values[id]))
        return UserError("value '" + value_names_[id] +
                         "' was computed once when the session was created (constant folding), so it cannot be "
                         "overridden: list it in SessionOptions::keep_values");
      if (hooks->observe) hooks->observe(value_names_[id], values[id]);
    }
  }

  std::vector<const Tensor*> ins;
  if (profiling_) ++profiled_runs_;
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& step = steps_[s];
    ins.clear();
    for (int id : step.inputs) ins.push_back(id >= 0 && values[id].defined() ? &values[id] : nullptr);
    Context ctx(pool_.get(), options_.max_tensor_bytes, ins, step.outputs, may_be_non_finite);
    const auto start = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (Status st = RunKernel(*step.kernel, ctx); !st.ok()) return std::move(st).WithContext(step.where);
    if (profiling_)
      step_ms_[s] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    auto where = [&] { return step.where; };
    for (size_t i = 0; i < step.outputs.size(); ++i) {
      const int id = step.outputs[i];
      if (id < 0) continue;
      Tensor& out = ctx.outputs()[i];
      if (!out.defined()) return InternalError(where() + ": kernel did not produce output " + std::to_string(i));
      if (hooks && hooks->override_value)
        if (auto replaced = hooks->override_value(value_names_[id], out)) {
          if (!replaced->defined())
            return UserError(where() + ": override of '" + value_names_[id] + "' is an empty tensor");
          out = std::move(*replaced);
        }
      if (hooks && hooks->observe) hooks->observe(value_names_[id], out);
      values[id] = std::move(out);
    }
    for (int id : step.release) {
      auto storage = values[id].storage();
      values[id] = Tensor();
      pool_->Release(std::move(storage));
    }
  }

  TensorMap result;
  for (size_t i = 0; i < outputs_.size(); ++i) result[outputs_[i].name] = values[output_ids_[i]];
  return result;
}

void Session::EnableProfiling(bool on) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  profiling_ = on;
  step_ms_.assign(steps_.size(), 0.0);
  profiled_runs_ = 0;
}

std::vector<Session::StepProfile> Session::Profile() const {
  std::vector<StepProfile> profile;
  for (size_t s = 0; s < steps_.size() && s < step_ms_.size(); ++s) {
    const ir::Node& n = *steps_[s].node;
    profile.push_back({n.name, n.domain, n.op_type, step_ms_[s], profiled_runs_});
  }
  return profile;
}

}  // namespace seqto::runtime
