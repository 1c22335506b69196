// Runs chains of 2-D convolutions channels-last (N x H x W x C) instead of ONNX's
// N x C x H x W, so that activations go from one convolution to the next without a
// layout conversion.
//
// Why: oneDNN's fast convolution kernels do not read NCHW (2.6 has only im2col +
// GEMM for it), so a conv on NCHW tensors converts its input to NHWC or nChw16c and
// its output back, every time. On a MobileNetV2 those conversions took more time
// than the convolutions themselves (57% of oneDNN's time in float, 70% in int8).
// ONNX Runtime avoids them the same way: its NCHWc and NHWC layout transformers.
//
// How: in one sweep over the (topologically sorted) graph,
//   - every 2-D conv with a constant weight (float FusedConv / Conv, the int8
//     com.seqto.QLinearConv, float ConvTranspose as com.seqto.ConvTranspose) gets
//     channels_last = 1: it reads the NHWC twin of its input (and of FusedConv's
//     Sum) and writes an NHWC twin of its output;
//   - an elementwise op whose data inputs all have NHWC twins (the others being
//     scalars, or per-channel constants [1, C, 1, 1], whose twin is [1, 1, 1, C])
//     runs on the twins too, as does com.seqto.QLinearGlobalAveragePool;
//     per-tensor QuantizeLinear and DequantizeLinear are elementwise, so the float
//     islands of a selectively quantized model (DQ -> float conv -> Q) stay inside
//     the region instead of cutting it with Transposes;
//   - an inference BatchNormalization of a twin becomes a channels-last depthwise
//     1x1 conv (its scale and shift as weight and bias; a Relu after it as the
//     conv's activation);
//   - pooling (MaxPool, AveragePool, their global forms) on a twin becomes the
//     com.seqto op with channels_last = 1, and a Concat of twins along channels
//     concatenates the twins along their last axis (fire modules, inception blocks);
//   - a Resize of a twin with constant scales or sizes that keep the channels is the
//     same Resize of the twin with them permuted (FPN upsamplings; fuse-qdq runs a
//     nearest one between a DequantizeLinear and a QuantizeLinear of the same
//     parameters on the 8-bit data, which stays in the region as well);
//   - a twin that does not exist yet is made by a Transpose to NHWC (once per value),
//     or, for the output of a per-tensor 8-bit QuantizeLinear of a float32 value (an
//     int8 model's input), by com.seqto.QuantizeLinear with to_channels_last = 1,
//     which quantizes and changes the layout in one pass, and for a per-tensor
//     DequantizeLinear of such a value by a copy on its input's twin (the originals
//     go when nothing else reads them),
//     and a converted node's original output is kept, as a Transpose back to NCHW,
//     only where something still reads it: a node that stayed channels-first, a graph
//     output, or a value hooks must see.
// So the graph keeps its meaning and every value keeps its name and NCHW shape; the
// transposes are left only at the borders of conv regions (in a CNN: after the
// input and before the classifier). A value in keep_values gets no twin: a hook may
// override it, and its readers must see the override.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

// A 2-D convolution whose weight is a constant of rank 4 (so X has rank 4).
bool IsConvertibleConv(const ir::Graph& g, const ir::Node& n) {
  if (n.outputs.size() != 1 || n.inputs.empty()) return false;
  int w_index = -1;
  if (n.domain.empty() && n.op_type == "Conv") w_index = 1;
  if (n.domain == "com.seqto" && n.op_type == "FusedConv") w_index = 1;
  // ONNX's QLinearConv (QOperator models) runs as com.seqto.QLinearConv: the same op
  // (plus an optional clamp it does not use), which has the channels_last form.
  if ((n.domain == "com.seqto" || n.domain.empty()) && n.op_type == "QLinearConv") w_index = 3;
  if (w_index < 0 || static_cast<int>(n.inputs.size()) <= w_index) return false;
  auto w = g.initializers.find(n.inputs[w_index]);
  if (w == g.initializers.end() || w->second.rank() != 4) return false;
  // Float convs run on oneDNN's float kernels, int8 ones on its int8 kernels.
  if (w_index == 1) return w->second.dtype() == DType::kFloat32;
  return w->second.dtype() == DType::kInt8 || w->second.dtype() == DType::kUInt8;
}

// A 2-D ConvTranspose with a constant float weight of rank 4 (com.seqto.ConvTranspose
// has the channels_last form).
bool IsConvertibleConvTranspose(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "ConvTranspose" || n.outputs.size() != 1 || n.inputs.size() < 2) return false;
  auto w = g.initializers.find(n.inputs[1]);
  return w != g.initializers.end() && w->second.rank() == 4 && w->second.dtype() == DType::kFloat32;
}

// Ops that compute the same in any layout when every input is either in that
// layout or a scalar: elementwise ops (numpy broadcasting of a scalar is layout-free).
bool IsElementwise(const ir::Node& n) {
  static const std::set<std::string> kOnnx = {"Relu",
                                              "LeakyRelu",
                                              "Clip",
                                              "Sigmoid",
                                              "Tanh",
                                              "HardSigmoid",
                                              "HardSwish",
                                              "Elu",
                                              "Selu",
                                              "Softplus",
                                              "Abs",
                                              "Neg",
                                              "Exp",
                                              "Log",
                                              "Sqrt",
                                              "Reciprocal",
                                              "Floor",
                                              "Ceil",
                                              "Round",
                                              "Erf",
                                              "Add",
                                              "Sub",
                                              "Mul",
                                              "Div",
                                              "Max",
                                              "Min",
                                              "QuantizeLinear",
                                              "DequantizeLinear",
                                              "Cast"};
  if (n.domain.empty()) return kOnnx.count(n.op_type) && !n.has_attr("broadcast");
  // ONNX Runtime's contrib Q/DQ (16-bit activations of int16 fallbacks).
  // QLinearAdd: seqto's, and ONNX Runtime's contrib op of QOperator models.
  if (n.domain == "com.microsoft")
    return n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "QLinearAdd" ||
           n.op_type == "QLinearMul";
  return n.domain == "com.seqto" && (n.op_type == "QLookup" || n.op_type == "QLinearAdd" || n.op_type == "QLinearMul");
}

class ChannelsLastPass {
 public:
  ChannelsLastPass(const ir::Graph& g, const OptimizeOptions& options) : g_(g), options_(options) {
    for (const auto& n : g.nodes) {
      node_names_.insert(n.name);
      for (const auto& v : n.inputs) value_names_.insert(v);
      for (const auto& v : n.outputs) value_names_.insert(v);
    }
    for (const auto& v : g.inputs) value_names_.insert(v.name);
    for (const auto& n : g.nodes) {
      for (const auto& v : n.outputs) producers_[v] = &n;
      for (const auto& v : n.inputs) consumers_[v].push_back(&n);
    }
    for (const auto& [name, t] : g.initializers) value_names_.insert(name);
    for (const auto& o : g.outputs) graph_outputs_.insert(o.name);
  }

  GraphPatch Run() {
    std::vector<ir::Node> converted;
    for (const ir::Node& n : g_.nodes) {
      if (absorbed_.count(n.name)) continue;
      if ((IsConvertibleConv(g_, n) || IsConvertibleConvTranspose(g_, n)) && RankMayBe4(n.inputs[0]) && SumFits(n) &&
          Gains(n)) {
        converted.push_back(ConvertConv(n));
      } else if (auto node = TryConvertElementwise(n)) {
        converted.push_back(std::move(*node));
      } else if (auto pool = TryConvertPool(n)) {
        converted.push_back(std::move(*pool));
      } else if (auto concat = TryConvertConcat(n)) {
        converted.push_back(std::move(*concat));
      } else if (auto resize = TryConvertResize(n)) {
        converted.push_back(std::move(*resize));
      } else if (auto bn = TryConvertBatchNorm(n)) {
        converted.push_back(std::move(*bn));
      }
    }
    GraphPatch patch;
    if (converted.empty()) return patch;
    // Which original outputs are still read: by a node that stayed as it was, by a
    // converted node through a non-data input, as graph outputs, or by hooks.
    std::set<std::string> converted_names, read;
    for (const auto& n : converted) converted_names.insert(n.name);
    converted_names.insert(absorbed_.begin(), absorbed_.end());
    for (const auto& name : absorbed_) patch.RemoveNode(name);
    for (const auto& n : g_.nodes)
      if (!converted_names.count(n.name))
        for (const auto& v : n.inputs) read.insert(v);
    for (const auto& n : converted)
      for (const auto& v : n.inputs) read.insert(v);
    for (const auto& n : to_nhwc_) read.insert(n.inputs[0]);
    for (auto& n : converted) patch.ReplaceNode(std::move(n));
    for (auto& n : to_nhwc_) patch.AddNode(std::move(n));
    for (auto& [name, t] : constant_twins_) patch.SetInitializer(name, std::move(t));
    RemoveBypassedProducers(converted_names, converted, patch);
    for (const auto& [original, twin] : produced_) {
      if (!read.count(original) && !graph_outputs_.count(original) && !options_.keep_values.count(original)) continue;
      patch.AddNode(MakeTranspose(twin, original, kToNchw, original + "/to_nchw"));
    }
    return patch;
  }

 private:
  // The rank of a value when the graph says (initializers, inputs, shape inference).
  std::optional<size_t> KnownRank(const std::string& v) const {
    if (twins_.count(v)) return 4;
    if (auto it = g_.initializers.find(v); it != g_.initializers.end()) return it->second.shape().size();
    for (const auto* infos : {&g_.inputs, &g_.value_infos})
      for (const auto& info : *infos)
        if (info.name == v && info.shape) return info.shape->size();
    return std::nullopt;
  }
  // A conv whose X is known not to have rank 4 is malformed: it stays as it is, so
  // that its own kernel reports the error.
  bool RankMayBe4(const std::string& x) const {
    const auto rank = KnownRank(x);
    return !rank || *rank == 4;
  }
  // A conv whose input has no twin and whose output hooks must see (calibration and
  // analysis keep every activation) would only trade oneDNN's reorders for two
  // Transposes: it stays as it is.
  bool Gains(const ir::Node& conv) const {
    return twins_.count(conv.inputs[0]) || !options_.keep_values.count(conv.outputs[0]);
  }
  // FusedConv's Sum must have rank 4 for its twin to exist; unknown ranks stay NCHW.
  bool SumFits(const ir::Node& n) const {
    if (n.op_type != "FusedConv" || n.inputs.size() <= 3 || n.inputs[3].empty()) return true;
    return KnownRank(n.inputs[3]) == std::optional<size_t>(4);
  }

  ir::Node ConvertConv(const ir::Node& conv) {
    ir::Node n = conv;
    if (n.domain.empty() && n.op_type == "Conv") {  // a Conv nothing was fused into: a FusedConv without post-ops
      n.domain = "com.seqto";
      n.op_type = "FusedConv";
    }
    n.domain = "com.seqto";
    SetChannelsLast(n);
    n.inputs[0] = Twin(n.inputs[0], conv.name);
    if (n.op_type == "FusedConv" && n.inputs.size() > 3 && !n.inputs[3].empty())
      n.inputs[3] = Twin(n.inputs[3], conv.name);
    RedirectOutput(n);
    return n;
  }

  // An elementwise op (or the int8 global pooling) whose inputs all have NHWC twins
  // or are scalars, at least one a twin: it joins the channels-last region.
  std::optional<ir::Node> TryConvertElementwise(const ir::Node& node) {
    const bool pool =
        (node.domain == "com.seqto" || node.domain == "com.microsoft") && node.op_type == "QLinearGlobalAveragePool";
    if (!(pool && !node.has_attr("channels_last")) && !IsElementwise(node)) return std::nullopt;
    if (node.outputs.size() != 1) return std::nullopt;
    bool any_twin = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& v = node.inputs[i];
      if (v.empty()) continue;
      if (twins_.count(v) && (!pool || i == 0)) {
        any_twin = true;
        continue;
      }
      // A scalar broadcasts the same in any layout (unless its rank would raise the output's).
      auto it = g_.initializers.find(v);
      if (it == g_.initializers.end() || it->second.rank() > 4) return std::nullopt;
      if (it->second.numel() != 1 && !IsPerChannel(it->second)) return std::nullopt;
    }
    if (!any_twin) return std::nullopt;  // only extend existing channels-last regions
    ir::Node n = node;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty() || (pool && i > 0)) continue;
      if (twins_.count(n.inputs[i])) {
        n.inputs[i] = twins_.at(n.inputs[i]);
      } else if (auto it = g_.initializers.find(n.inputs[i]); it != g_.initializers.end() && IsPerChannel(it->second)) {
        n.inputs[i] = ConstantTwin(n.inputs[i], it->second);
      }
    }
    if (pool) SetChannelsLast(n);
    RedirectOutput(n);
    return n;
  }

  // A 2-D pooling of a twin (without MaxPool's Indices): the com.seqto op with
  // channels_last = 1 on the twin.
  std::optional<ir::Node> TryConvertPool(const ir::Node& node) {
    static const std::set<std::string> kPools = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"};
    if (!node.domain.empty() || !kPools.count(node.op_type) || node.inputs.size() != 1) return std::nullopt;
    if (node.outputs.empty() || (node.outputs.size() > 1 && !node.outputs[1].empty())) return std::nullopt;
    if (!twins_.count(node.inputs[0])) return std::nullopt;
    ir::Node n = node;
    n.domain = "com.seqto";
    n.outputs.resize(1);
    n.inputs[0] = twins_.at(node.inputs[0]);
    SetChannelsLast(n);
    RedirectOutput(n);
    return n;
  }

  // A Concat of twins along the channels (axis 1 of NCHW) is a Concat of the twins
  // along their last axis.
  std::optional<ir::Node> TryConvertConcat(const ir::Node& node) {
    if (!node.domain.empty() || node.op_type != "Concat" || node.outputs.size() != 1 || node.inputs.empty())
      return std::nullopt;
    auto axis = node.attr_int("axis", 0);
    if (!axis || !node.has_attr("axis") || (*axis != 1 && *axis != -3)) return std::nullopt;
    for (const auto& v : node.inputs)
      if (v.empty() || !twins_.count(v)) return std::nullopt;
    ir::Node n = node;
    for (auto& v : n.inputs) v = twins_.at(v);
    n.attributes["axis"].i = 3;
    RedirectOutput(n);
    return n;
  }

  // A Resize of a twin (opset 11+ form, 4-D constant scales or sizes that keep the
  // channels, no roi, no axes): the same Resize of the twin with the scales or sizes
  // permuted to NHWC. Every mode resizes each axis on its own, and an axis of scale 1
  // maps each output index to itself, so the twin's output is the output's twin
  // (the FPN upsamplings of detectors such as PP-OCR, float or on 8-bit data).
  std::optional<ir::Node> TryConvertResize(const ir::Node& node) {
    if (!node.domain.empty() || node.op_type != "Resize" || node.outputs.size() != 1 || node.inputs.size() < 3 ||
        node.inputs.size() > 4)
      return std::nullopt;
    if (!twins_.count(node.inputs[0]) || node.has_attr("axes") || node.has_attr("keep_aspect_ratio_policy"))
      return std::nullopt;
    auto coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
    if (!coord || *coord == "tf_crop_and_resize") return std::nullopt;
    ir::Node n = node;
    int given = 0;
    for (size_t i = 2; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      auto it = g_.initializers.find(n.inputs[i]);
      if (it == g_.initializers.end()) return std::nullopt;
      const Tensor& t = it->second;
      if (t.numel() == 0) continue;  // an empty scales next to sizes
      if (t.rank() != 1 || t.numel() != 4) return std::nullopt;
      const bool scales = i == 2;
      if (scales && t.dtype() != DType::kFloat32) return std::nullopt;
      if (!scales && t.dtype() != DType::kInt64) return std::nullopt;
      Tensor twin = t.Clone();  // tensors share storage: the original stays as it is
      if (scales) {
        if (t.data<float>()[1] != 1.f) return std::nullopt;
        const float* v = t.data<float>();
        float* o = twin.data<float>();
        for (int k = 0; k < 4; ++k) o[k] = v[kToNhwc[k]];
      } else {
        const int64_t* v = t.data<int64_t>();
        int64_t* o = twin.data<int64_t>();
        for (int k = 0; k < 4; ++k) o[k] = v[kToNhwc[k]];
      }
      n.inputs[i] = FreshValue(n.inputs[i] + "/nhwc");
      constant_twins_[n.inputs[i]] = std::move(twin);
      ++given;
    }
    if (given != 1) return std::nullopt;  // the kernel reports it
    // sizes must keep the channels: the graph's shapes say how many there are.
    if (n.inputs.size() == 4 && !n.inputs[3].empty() && g_.initializers.at(node.inputs[3]).numel() == 4) {
      const int64_t c = g_.initializers.at(node.inputs[3]).data<int64_t>()[1];
      if (!ChannelsAre(node.inputs[0], c)) return std::nullopt;
    }
    n.inputs[0] = twins_.at(node.inputs[0]);
    RedirectOutput(n);
    return n;
  }

  // An inference BatchNormalization of a twin (constant float parameters, C > 1):
  //   y = (x - mean) * scale / sqrt(var + eps) + B = x * s + t
  // as a channels-last depthwise 1x1 com.seqto.FusedConv (W = s as [C, 1, 1, 1],
  // bias t; s and t formed in double, rounded once: the result differs from the op
  // by float rounding): one pass over the twin. The BatchNormalization that a
  // PP-OCR detector head has between its ConvTransposes (after a bias Add, so no
  // conv absorbs it) stays in the region.
  std::optional<ir::Node> TryConvertBatchNorm(const ir::Node& node) {
    if (!node.domain.empty() || node.op_type != "BatchNormalization" || node.inputs.size() != 5) return std::nullopt;
    for (size_t i = 1; i < node.outputs.size(); ++i)
      if (!node.outputs[i].empty()) return std::nullopt;  // training-mode outputs
    if (node.outputs.empty() || !twins_.count(node.inputs[0])) return std::nullopt;
    auto training = node.attr_int("training_mode", 0);
    auto eps = node.attr_float("epsilon", 1e-5f);
    if (!training || *training != 0 || !eps) return std::nullopt;
    std::vector<const Tensor*> p;
    for (size_t i = 1; i < 5; ++i) {
      auto it = g_.initializers.find(node.inputs[i]);
      if (it == g_.initializers.end() || it->second.dtype() != DType::kFloat32 || it->second.rank() != 1)
        return std::nullopt;
      p.push_back(&it->second);
    }
    const int64_t c = p[0]->numel();
    if (c < 2) return std::nullopt;
    for (const Tensor* t : p)
      if (t->numel() != c) return std::nullopt;
    if (KnownRank(node.inputs[0]) != std::optional<size_t>(4)) return std::nullopt;
    Tensor scale(DType::kFloat32, {c, 1, 1, 1}), shift(DType::kFloat32, {c});
    for (int64_t k = 0; k < c; ++k) {
      const double sk = static_cast<double>(p[0]->data<float>()[k]) /
                        std::sqrt(static_cast<double>(p[3]->data<float>()[k]) + static_cast<double>(*eps));
      scale.data<float>()[k] = static_cast<float>(sk);
      shift.data<float>()[k] =
          static_cast<float>(static_cast<double>(p[1]->data<float>()[k]) - p[2]->data<float>()[k] * sk);
    }
    const std::string s_name = FreshValue(node.name + "/scale"), t_name = FreshValue(node.name + "/shift");
    constant_twins_[s_name] = std::move(scale);
    constant_twins_[t_name] = std::move(shift);
    ir::Node n;
    n.name = node.name;
    n.domain = "com.seqto";
    n.op_type = "FusedConv";
    n.inputs = {twins_.at(node.inputs[0]), s_name, t_name};
    n.outputs = {node.outputs[0]};
    ir::Attribute& group = n.attributes["group"];
    group.type = ir::Attribute::Type::kInt;
    group.i = c;
    SetChannelsLast(n);
    // A Relu that alone reads the output becomes the conv's activation (a float
    // PP-OCR head's BatchNormalization -> Relu; the conv keeps Relu's NaN).
    const std::string& out = node.outputs[0];
    auto readers = consumers_.find(out);
    if (readers != consumers_.end() && readers->second.size() == 1 && !graph_outputs_.count(out) &&
        !options_.keep_values.count(out)) {
      const ir::Node& relu = *readers->second[0];
      if (relu.domain.empty() && relu.op_type == "Relu" && relu.inputs.size() == 1 && relu.outputs.size() == 1) {
        ir::Attribute& act = n.attributes["activation"];
        act.type = ir::Attribute::Type::kString;
        act.s = "Relu";
        n.outputs = {relu.outputs[0]};
        absorbed_.insert(relu.name);
      }
    }
    RedirectOutput(n);
    return n;
  }

  // True when the graph declares `value` with `c` channels (dim 1).
  bool ChannelsAre(const std::string& value, int64_t c) const {
    for (const auto* infos : {&g_.inputs, &g_.value_infos})
      for (const auto& info : *infos)
        if (info.name == value && info.shape && info.shape->size() == 4) {
          const ir::Dim& d = (*info.shape)[1];
          return d.known() && d.value == c;
        }
    return false;
  }

  // Producers whose twin is written by a rewritten copy go when nothing reads their
  // output any more. Latest first: a DequantizeLinear that goes may leave the
  // QuantizeLinear before it unread.
  void RemoveBypassedProducers(const std::set<std::string>& converted_names, const std::vector<ir::Node>& converted,
                               GraphPatch& patch) const {
    std::map<std::string, int> readers;
    for (const auto& n : g_.nodes)
      if (!converted_names.count(n.name))
        for (const auto& v : n.inputs) ++readers[v];
    for (const auto* nodes : {&converted, &to_nhwc_})
      for (const auto& n : *nodes)
        for (const auto& v : n.inputs) ++readers[v];
    for (auto it = bypassed_producers_.rbegin(); it != bypassed_producers_.rend(); ++it) {
      const ir::Node& p = **it;
      const std::string& out = p.outputs[0];
      if (readers[out] > 0 || graph_outputs_.count(out) || options_.keep_values.count(out)) continue;
      patch.RemoveNode(p.name);
      for (const auto& v : p.inputs) --readers[v];
    }
  }

  // A constant of shape [1, C, 1, 1] (a per-channel bias or scale, C > 1): its NHWC
  // twin is the same data as [1, 1, 1, C].
  static bool IsPerChannel(const Tensor& t) {
    return t.rank() == 4 && t.dim(0) == 1 && t.dim(1) > 1 && t.dim(2) == 1 && t.dim(3) == 1;
  }
  std::string ConstantTwin(const std::string& name, const Tensor& t) {
    auto it = twins_.find(name);
    if (it != twins_.end()) return it->second;
    const std::string twin = FreshValue(name + "/nhwc");
    constant_twins_[twin] = t.Reshaped({1, 1, 1, t.dim(1)});
    twins_[name] = twin;
    return twin;
  }

  static void SetChannelsLast(ir::Node& n) {
    ir::Attribute& a = n.attributes["channels_last"];
    a.type = ir::Attribute::Type::kInt;
    a.i = 1;
  }

  // The converted node writes a new NHWC value; its original output becomes that
  // value's twin (unless hooks may override it).
  void RedirectOutput(ir::Node& n) {
    const std::string original = n.outputs[0];
    const std::string twin = FreshValue(original + "/nhwc");
    n.outputs[0] = twin;
    produced_.emplace_back(original, twin);
    if (!options_.keep_values.count(original)) twins_[original] = twin;
  }

  // The NHWC twin of an NCHW value, made by a Transpose the first time it is needed
  // (named after the node that needed it: an error in it is about that node's input).
  std::string Twin(const std::string& value, const std::string& reader) {
    auto it = twins_.find(value);
    if (it != twins_.end()) return it->second;
    if (CanRewriteProducer(value)) return RewriteProducer(value, reader);
    const std::string twin = FreshValue(value + "/nhwc");
    to_nhwc_.push_back(MakeTranspose(value, twin, kToNhwc, reader + "/input_to_nhwc"));
    twins_[value] = twin;
    return twin;
  }

  // True when the twin of `value` is cheaper to compute from its producer's input
  // than by a Transpose: `value` is written by a per-tensor 8-bit QuantizeLinear of a
  // float32 NCHW value (the quantizer writes NHWC itself), or by a per-tensor
  // DequantizeLinear whose input has (or can cheaply get) a twin. Values hooks may
  // override are never bypassed.
  bool CanRewriteProducer(const std::string& value) const {
    if (options_.keep_values.count(value)) return false;
    if (QuantizerOfFloat(value)) return true;
    const ir::Node* dq = PerTensorDequantizer(value);
    return dq && (twins_.count(dq->inputs[0]) || CanRewriteProducer(dq->inputs[0]));
  }

  // Makes the twin of `value` (CanRewriteProducer) by a copy of its producer that
  // writes NHWC; the original goes later if nothing else reads its output.
  std::string RewriteProducer(const std::string& value, const std::string& reader) {
    const ir::Node& producer = *producers_.at(value);
    ir::Node n = producer;
    n.name = FreshNode(reader + "/input_to_nhwc");
    const std::string twin = FreshValue(value + "/nhwc");
    n.outputs = {twin};
    if (n.op_type == "QuantizeLinear") {
      n.domain = "com.seqto";
      ir::Attribute& a = n.attributes["to_channels_last"];
      a.type = ir::Attribute::Type::kInt;
      a.i = 1;
    } else {  // DequantizeLinear: elementwise on its input's twin
      n.inputs[0] = Twin(producer.inputs[0], reader);
    }
    to_nhwc_.push_back(std::move(n));
    bypassed_producers_.push_back(&producer);
    twins_[value] = twin;
    return twin;
  }

  // The per-tensor DequantizeLinear (constant scalar scale and zero point) writing
  // `value`.
  const ir::Node* PerTensorDequantizer(const std::string& value) const {
    auto p = producers_.find(value);
    if (p == producers_.end()) return nullptr;
    const ir::Node& dq = *p->second;
    if (!(dq.domain.empty() || dq.domain == "com.microsoft") || dq.op_type != "DequantizeLinear" ||
        dq.outputs.size() != 1 || dq.inputs.size() < 2 || dq.has_attr("block_size"))
      return nullptr;
    for (size_t i = 1; i < dq.inputs.size(); ++i) {
      if (dq.inputs[i].empty()) continue;
      auto t = g_.initializers.find(dq.inputs[i]);
      if (t == g_.initializers.end() || t->second.numel() != 1) return nullptr;
    }
    return &dq;
  }

  // The QuantizeLinear producing `value` when it can write the twin itself: per
  // tensor (constant scalar scale, 8-bit zero point or none), from a float32 value of
  // rank 4 the graph declares.
  const ir::Node* QuantizerOfFloat(const std::string& value) const {
    auto p = producers_.find(value);
    if (p == producers_.end()) return nullptr;
    const ir::Node& q = *p->second;
    if (!(q.domain.empty() || q.domain == "com.microsoft") || q.op_type != "QuantizeLinear" || q.outputs.size() != 1 ||
        q.inputs.size() < 2)
      return nullptr;
    if (q.has_attr("output_dtype") || q.has_attr("block_size")) return nullptr;
    auto scale = g_.initializers.find(q.inputs[1]);
    if (scale == g_.initializers.end() || scale->second.numel() != 1 || scale->second.dtype() != DType::kFloat32)
      return nullptr;
    if (q.inputs.size() > 2 && !q.inputs[2].empty()) {
      auto zp = g_.initializers.find(q.inputs[2]);
      if (zp == g_.initializers.end() || zp->second.numel() != 1 ||
          (zp->second.dtype() != DType::kUInt8 && zp->second.dtype() != DType::kInt8))
        return nullptr;
    }
    const ir::ValueInfo* x = nullptr;
    for (const auto* infos : {&g_.inputs, &g_.value_infos})
      for (const auto& info : *infos)
        if (info.name == q.inputs[0]) x = &info;
    if (!x || x->dtype != DType::kFloat32 || !x->shape || x->shape->size() != 4) return nullptr;
    return &q;
  }

  ir::Node MakeTranspose(const std::string& from, const std::string& to, const std::vector<int64_t>& perm,
                         const std::string& name) {
    ir::Node t;
    t.op_type = "Transpose";
    t.name = FreshNode(name);
    t.inputs = {from};
    t.outputs = {to};
    ir::Attribute& a = t.attributes["perm"];
    a.type = ir::Attribute::Type::kInts;
    a.ints = perm;
    return t;
  }

  std::string FreshValue(std::string name) { return Fresh(std::move(name), value_names_); }
  std::string FreshNode(std::string name) { return Fresh(std::move(name), node_names_); }
  static std::string Fresh(std::string name, std::set<std::string>& used) {
    const std::string base = name;
    for (int k = 1; used.count(name); ++k) name = base + "_" + std::to_string(k);
    used.insert(name);
    return name;
  }

  const ir::Graph& g_;
  const OptimizeOptions& options_;
  std::set<std::string> node_names_, value_names_, graph_outputs_;
  std::map<std::string, std::string> twins_;                       // NCHW value -> its NHWC twin
  std::vector<std::pair<std::string, std::string>> produced_;      // (original output, twin) of converted nodes
  std::vector<ir::Node> to_nhwc_;                                  // Transposes (or quantizers) that make twins
  std::map<std::string, const ir::Node*> producers_;               // value -> the node writing it
  std::map<std::string, std::vector<const ir::Node*>> consumers_;  // value -> the nodes reading it
  std::set<std::string> absorbed_;                                 // nodes fused into a converted one (a Relu)
  std::map<std::string, Tensor> constant_twins_;                   // NHWC twins of per-channel constants
  std::vector<const ir::Node*> bypassed_producers_;                // Q/DQ whose twin a rewritten copy writes
};

}  // namespace

GraphPatch ChannelsLast(const ir::Graph& graph, const OptimizeOptions& options) {
  return ChannelsLastPass(graph, options).Run();
}

}  // namespace seqto::rewrite
