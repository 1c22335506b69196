// Internals of the QDQ rewriter (quantize.cc, qdq_static.cc, qdq_dynamic.cc). Not a
// public interface: QuantPlan (quantize.h) is.
//
// A quantized model is built in three steps, each a pure function of its inputs so
// that Materialize is deterministic:
//   1. Mark (static): which tensors need Q/DQ, given the set of quantized nodes. This
//      follows ONNX Runtime's QDQ op quantizers (qdq_quantizer.py, operators/*.py).
//   2. Plan: resolve every marked tensor to its type and scale/zero point, and name
//      the nodes and initializers to insert. Two plans are equal iff the models are
//      (StaticPlan::Signature), which is how groups are checked and owned Q/DQ found.
//   3. Emit: one GraphPatch on a copy of the prepared model.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/quantize.h"
#include "quant/scheme.h"

namespace seqto::quant::detail {

// How ORT's QDQ quantizer treats an op type (its registry.py).
enum class OpKind {
  kConv,                 // Conv, ConvTranspose (QDQConv)
  kGemm,                 // QDQGemm
  kMatMul,               // QDQMatMul
  kRemovableActivation,  // Relu, Clip (QDQRemovableActivation)
  kPassThrough,          // QDQDirect8BitOp, QDQMaxPool, QDQResize: output shares the input's params
  kGather,               // QDQGather
  kGeneric,              // QDQOperatorBase: every float input and output
};
const std::map<std::string, OpKind>& StaticOpKinds();
const std::set<std::string>& StaticOpTypes();
const std::set<std::string>& DynamicOpTypes();

// Facts about the prepared graph, computed once.
struct GraphInfo {
  GraphInfo(const ir::Model& model, const TensorRanges* ranges);
  const ir::Model& model;
  const ir::Graph& graph;
  int64_t opset = 0;
  std::map<std::string, size_t> producer;                // value -> node index
  std::map<std::string, std::vector<size_t>> consumers;  // value -> node indices (in order, repeated per use)
  std::set<std::string> graph_inputs, graph_outputs;
  std::set<std::string> float_values;  // non-initializer values known to be float32
  std::map<std::string, size_t> node_index;

  bool IsInitializer(const std::string& name) const { return graph.initializers.count(name) != 0; }
  bool IsFloatInitializer(const std::string& name) const;
  // A float32 activation or initializer (ORT's _is_tensor_quantizable).
  bool IsQuantizable(const std::string& name) const;
  const Tensor* Initializer(const std::string& name) const;
  size_t NumConsumers(const std::string& name) const;
};

// Step 1: what needs Q/DQ.
struct TensorMark {
  bool weight = false;             // quantized with the weight type (else the activation type)
  std::optional<int64_t> axis;     // per-channel axis (weights)
  std::string provider;            // pass-through: shares this tensor's parameters
  std::vector<size_t> requesters;  // quantized nodes that need this tensor quantized
};
struct BiasMark {
  std::string input, weight;
  float beta = 1.0f;
  size_t node = 0;
};
struct Marking {
  std::map<std::string, TensorMark> tensors;
  std::vector<std::string> order;  // tensors in the order they were first marked
  std::map<std::string, BiasMark> biases;
  std::vector<std::string> bias_order;
  std::map<size_t, size_t> folded;  // removable activation -> producer of its input (no Q/DQ between)
  std::set<size_t> active;          // quantized nodes that needed anything
};

// `quantized[i]`: node i is quantized.
Marking MarkStatic(const GraphInfo& info, const QuantOptions& options, const TensorRanges& ranges,
                   const std::vector<bool>& quantized);

// ORT's adjust_tensor_ranges: a quantized Relu/Clip's input takes its output's range
// when it is the input's only consumer; a quantized Softmax's output is [0, 1].
void AdjustRanges(const GraphInfo& info, const std::vector<bool>& quantized, TensorRanges& ranges);

// Weight parameters are the only expensive part of a plan (a pass over the weight);
// they are cached per plan, keyed by tensor and range options.
class ParamCache {
 public:
  Expected<QuantParams> WeightParams(const GraphInfo& info, const std::string& name, const RangeOptions& options,
                                     std::optional<int64_t> axis);

 private:
  std::mutex mutex_;
  std::map<std::string, QuantParams> params_;
};

// Step 2: resolved types, parameters and names.
// kInt16Activations: 16-bit activations, the plan's weight type (Fallback::kInt16Activations).
enum class Precision { kBase, kInt16, kFloat16, kInt16Activations };
struct PlannedTensor {
  std::string name;
  bool initializer = false;
  bool graph_output = false;  // its producer's output is renamed; the DQ writes the name
  bool fp16 = false;          // float16 fallback: Cast pair / float16 initializer
  Precision precision = Precision::kBase;
  QuantParams params;  // type, scales, zero points, axis
  std::string key;     // identifies `params` (equal keys, equal parameters)
  std::string root;    // the tensor whose scale/zero point initializers it uses (itself unless shared)
  // Names of what is inserted.
  std::string q_node, dq_node;  // (Cast nodes for fp16)
  std::string q_input, q_output, dq_output;
  std::string quantized_name, scale_name, zp_name;  // initializers (scale/zp only when root == name)
};
struct PlannedBias {
  std::string name;
  size_t node = 0;
  float beta = 1.0f;
  bool fp16 = false;
  QuantParams params;  // int32, scale = s_in * s_w * beta
  std::string key;     // identifies `params`
  Tensor quantized;    // int32 data
  std::string dq_node, quantized_name, scale_name, zp_name, fp16_output;
};
struct StaticPlan {
  std::vector<PlannedTensor> tensors;
  std::vector<PlannedBias> biases;
  bool ms_domain = false;       // 16-bit Q/DQ before opset 21 live in com.microsoft
  int64_t target_opset = 0;     // the model's opset, raised if needed
  std::set<size_t> beta_reset;  // Gemm nodes whose quantized bias carries beta

  // Every inserted node with what defines it: equal signatures <=> equal models.
  std::map<std::string, std::string> Signature() const;
  std::set<std::string> InsertedNodes() const;
};

// `precision[i]` for every node: kBase for quantized nodes of the plan, kInt16/kFloat16
// for the nodes of excluded groups under that fallback (the tensors they need use it).
// `refinements` replace the values of biases quantized at kBase.
Expected<StaticPlan> PlanStatic(const GraphInfo& info, const QuantOptions& options, const TensorRanges& ranges,
                                const Marking& marking, const std::vector<Precision>& precision, ParamCache& cache,
                                const Refinements& refinements);
// Step 3. `refinements` replace the values (or the rounding) of initializers quantized
// at kBase.
Expected<ir::Model> EmitStatic(const GraphInfo& info, const StaticPlan& plan, const Refinements& refinements);

// Dynamic quantization (ORT's quantize_dynamic): per quantized node, the activation
// is quantized at run time (DynamicQuantizeLinear, shared by the node's of one
// tensor), the weight ahead of time, and the node becomes MatMulInteger/ConvInteger +
// Cast + Mul by the scales (+ Add of the bias).
struct DynamicActivation {
  std::string name, node, quantized, scale, zero_point;
};
struct DynamicUnit {
  size_t node = 0;
  std::string activation, weight, bias;
  // Inserted nodes.
  std::string op_node, cast_node, scales_mul_node, output_mul_node, bias_reshape_node, bias_add_node;
  // Inserted values and initializers.
  std::string op_output, cast_output, scales_output, scaled_output, reshape_shape, reshape_output;
  std::string w_quantized, w_scale, w_zero_point, scaled_bias;
};
struct DynamicPlan {
  std::vector<DynamicActivation> activations;
  std::vector<DynamicUnit> units;
  int64_t target_opset = 0;
  std::set<std::string> InsertedNodes() const;
};
// Whether node i can be quantized dynamically (a float initializer weight, ...).
bool DynamicCandidate(const GraphInfo& info, size_t i);
Expected<DynamicPlan> PlanDynamic(const GraphInfo& info, const std::vector<bool>& quantized);
Expected<ir::Model> EmitDynamic(const GraphInfo& info, const QuantOptions& options, const DynamicPlan& plan,
                                ParamCache& cache);

// Per-channel axis of a weight (nullopt: per tensor), from the options, the tensor's
// overrides and the op's default axis; ORT's is_tensor_per_channel.
std::optional<int64_t> PerChannelAxis(const GraphInfo& info, const QuantOptions& options, const std::string& weight,
                                      int64_t default_axis);
// ORT's is_weight_symmetric.
bool WeightSymmetric(const QuantOptions& options, QuantType type);

// Raises the model's opset to `target` when the ops allow it (their meaning does not
// change between the two opsets); else a user error naming the first op that blocks it.
Status CheckOpsetUpgrade(const ir::Graph& graph, int64_t from, int64_t target, const std::string& why);

// Unique names for inserted values and nodes: the base name if free in the prepared
// graph (and not yet taken by this plan), else base_1, base_2, ...
class NameAllocator {
 public:
  explicit NameAllocator(const ir::Graph& graph);
  std::string Value(const std::string& base);
  std::string Node(const std::string& base);

 private:
  std::set<std::string> values_, nodes_;
};

ir::Attribute IntAttr(int64_t v);
ir::Attribute FloatAttr(float v);
// The scale and zero-point initializers of quantization parameters: scalars per
// tensor, 1-D per channel; the zero point in the storage type of p.type.
Tensor ScaleTensor(const QuantParams& p);
Tensor ZeroPointTensor(const QuantParams& p);

}  // namespace seqto::quant::detail
