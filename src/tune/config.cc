#include "tune/config.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/json_util.h"
#include "core/parallel.h"
#include "quant/calib/calibrate.h"
#include "quant/rank/ranker.h"
#include "quant/recover/technique.h"
#include "runners/runner.h"
#include "tune/search.h"

namespace seqto::tune {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Status CheckKnown(const std::string& key_path, const std::string& value, const std::vector<std::string>& known);

// Reads an object's keys strictly: each accessor names the key's path in errors, and
// Finish() rejects every key that was not read.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Status CheckObject() const {
    if (!j_.is_object()) return UserError(Where() + "expected an object");
    return Status::Ok();
  }
  bool has(const std::string& key) {
    seen_.insert(key);
    return j_.contains(key) && !j_.at(key).is_null();
  }
  std::string KeyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  Status String(const std::string& key, std::string& out) {
    if (!has(key)) return Status::Ok();
    if (!j_.at(key).is_string()) return UserError(KeyPath(key) + ": expected a string");
    out = j_.at(key).get<std::string>();
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool& out) {
    if (!has(key)) return Status::Ok();
    if (!j_.at(key).is_boolean()) return UserError(KeyPath(key) + ": expected true or false");
    out = j_.at(key).get<bool>();
    return Status::Ok();
  }
  Status Number(const std::string& key, double& out, double min, double max) {
    if (!has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_number()) return UserError(KeyPath(key) + ": expected a number");
    const double d = v.get<double>();
    if (!(d >= min && d <= max))
      return UserError(KeyPath(key) + ": " + v.dump() + " is outside [" + Fmt(min) + ", " + Fmt(max) + "]");
    out = d;
    return Status::Ok();
  }
  template <typename Int>
  Status Integer(const std::string& key, Int& out, int64_t min, int64_t max) {
    if (!has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return UserError(KeyPath(key) + ": expected an integer");
    const int64_t i = v.get<int64_t>();
    if (i < min || i > max)
      return UserError(KeyPath(key) + ": " + v.dump() + " is outside [" + std::to_string(min) + ", " +
                       std::to_string(max) + "]");
    out = static_cast<Int>(i);
    return Status::Ok();
  }
  Status Strings(const std::string& key, std::vector<std::string>& out) {
    if (!has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (v.is_string()) {  // "a,b" is accepted as a list, as on the command line
      out.clear();
      std::stringstream ss(v.get<std::string>());
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
      return Status::Ok();
    }
    if (!v.is_array()) return UserError(KeyPath(key) + ": expected a list of strings");
    out.clear();
    for (const auto& item : v) {
      if (!item.is_string()) return UserError(KeyPath(key) + ": expected a list of strings");
      out.push_back(item.get<std::string>());
    }
    return Status::Ok();
  }
  const json* Object(const std::string& key) {
    if (!has(key)) return nullptr;
    return &j_.at(key);
  }
  // A string that must be one of `known` (taken from the registry that resolves it).
  Status OneOf(const std::string& key, std::string& out, const std::vector<std::string>& known) {
    SEQTO_RETURN_IF_ERROR(String(key, out));
    if (!has(key)) return Status::Ok();
    return CheckKnown(KeyPath(key), out, known);
  }

  // Every key not read is an error naming it (with the known keys, to help typos).
  Status Finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (seen_.count(it.key())) continue;
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      return UserError(KeyPath(it.key()) + ": unknown key (known here: " + known + ")");
    }
    return Status::Ok();
  }

 private:
  std::string Where() const { return path_.empty() ? "" : path_ + ": "; }
  static std::string Fmt(double d) {
    std::ostringstream os;
    os << d;
    return os.str();
  }
  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// "<key path>: unknown value 'x' (known: a, b, c)".
Status CheckKnown(const std::string& key_path, const std::string& value, const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return Status::Ok();
  return UserError(key_path + ": unknown value '" + value + "' (known: " + JoinNames(known) + ")");
}

std::vector<std::string> RankerNames() {
  std::vector<std::string> names;
  for (const auto& r : quant::Rankers()) names.push_back(r.name);
  return names;
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

Expected<data::PreprocessSpec> ParsePreprocess(const json& v, const std::string& key_path) {
  Expected<data::PreprocessSpec> spec =
      v.is_string()   ? data::ParsePreprocessSpec(v.get<std::string>())
      : v.is_object() ? data::ParsePreprocessJson(v)
                      : Expected<data::PreprocessSpec>(UserError("expected a spec string or an object"));
  if (!spec) return Status(spec.error()).WithContext(key_path);
  return spec;
}

Status ParseDataSet(ObjectReader& parent, const std::string& key, DataSetConfig& out, const std::string& base_dir) {
  const json* j = parent.Object(key);
  if (!j) return Status::Ok();
  const std::string path = parent.KeyPath(key);
  if (j->is_string()) {  // "eval": "path/to/data"
    out.path = Resolve(j->get<std::string>(), base_dir);
    return Status::Ok();
  }
  if (!j->is_object()) return UserError(path + ": expected a path string or an object");
  ObjectReader r(*j, path);
  SEQTO_RETURN_IF_ERROR(r.String("path", out.path));
  out.path = Resolve(out.path, base_dir);
  SEQTO_RETURN_IF_ERROR(r.String("labels", out.labels));
  out.labels = Resolve(out.labels, base_dir);
  SEQTO_RETURN_IF_ERROR(r.String("classes", out.classes));
  out.classes = Resolve(out.classes, base_dir);
  SEQTO_RETURN_IF_ERROR(r.Integer("samples", out.samples, 0, int64_t{1} << 40));
  if (const json* p = r.Object("preprocess")) {
    SEQTO_ASSIGN_OR_RETURN(out.preprocess, ParsePreprocess(*p, r.KeyPath("preprocess")));
    out.has_preprocess = true;
  }
  return r.Finish();
}

Expected<quant::QuantType> QuantTypeAt(const json& v, const std::string& key_path) {
  if (!v.is_string()) return UserError(key_path + ": expected a type name such as \"uint8\"");
  auto t = quant::ParseQuantType(v.get<std::string>());
  if (!t) return Status(t.error()).WithContext(key_path);
  return t;
}

Status ParseOverride(const json& v, const std::string& key_path, quant::TensorOverride& out) {
  // ORT's format is a list of dicts (one per channel for per-channel overrides);
  // seqto takes one dict, or a list holding one.
  const json* obj = &v;
  if (v.is_array()) {
    if (v.size() != 1) return UserError(key_path + ": expected one override (per-channel lists are not supported)");
    obj = &v[0];
  }
  ObjectReader r(*obj, key_path);
  SEQTO_RETURN_IF_ERROR(r.CheckObject());
  if (const json* t = r.Object("quant_type")) {
    SEQTO_ASSIGN_OR_RETURN(out.quant_type, QuantTypeAt(*t, r.KeyPath("quant_type")));
  }
  if (r.has("scale")) {
    double s = 0;
    SEQTO_RETURN_IF_ERROR(r.Number("scale", s, FLT_MIN, FLT_MAX));  // a positive, normal float
    out.scale = static_cast<float>(s);
  }
  if (r.has("zero_point")) {
    int64_t zp = 0;
    SEQTO_RETURN_IF_ERROR(r.Integer("zero_point", zp, -65536, 65536));
    out.zero_point = zp;
  }
  if (r.has("axis")) {
    int64_t axis = 0;
    SEQTO_RETURN_IF_ERROR(r.Integer("axis", axis, -8, 8));
    out.axis = axis;
  }
  for (const char* key : {"symmetric", "reduce_range"}) {
    if (!r.has(key)) continue;
    bool b = false;
    SEQTO_RETURN_IF_ERROR(r.Bool(key, b));
    if (std::string(key) == "symmetric")
      out.symmetric = b;
    else
      out.reduce_range = b;
  }
  for (const char* key : {"rmin", "rmax"}) {
    if (!r.has(key)) continue;
    double d = 0;
    SEQTO_RETURN_IF_ERROR(r.Number(key, d, -1e38, 1e38));
    if (std::string(key) == "rmin")
      out.rmin = d;
    else
      out.rmax = d;
  }
  SEQTO_RETURN_IF_ERROR(r.Finish());
  // A zero point must fit the tensor's type; with quant_type given that is known here
  // (else the quantizer checks it against the type the tensor gets).
  if (out.zero_point && out.quant_type) {
    const quant::QRange q = quant::GetQRange(*out.quant_type, false, false);
    if (*out.zero_point < q.qmin || *out.zero_point > q.qmax)
      return UserError(r.KeyPath("zero_point") + ": " + std::to_string(*out.zero_point) + " is outside the range of " +
                       quant::QuantTypeName(*out.quant_type) + " [" + std::to_string(q.qmin) + ", " +
                       std::to_string(q.qmax) + "]");
  }
  return Status::Ok();
}

// ORT's SmoothQuant extra options, which seqto runs as the smooth_quant recovery
// technique: SmoothQuant (bool), SmoothQuantAlpha (a number in [0, 1], or "auto" as
// Neural Compressor spells the search: alpha_search), SmoothQuantFolding (bool).
// `enabled` stays unset when SmoothQuant is absent.
Status ParseSmoothQuant(ObjectReader& e, std::optional<bool>& enabled, quant::RecoverySpec& spec) {
  // Every option set, so the writer's keys read back to the same spec.
  spec.name = "smooth_quant";
  spec.options = {{"alpha", 0.5}, {"alpha_search", 0}, {"folding", 1}};
  if (e.has("SmoothQuant")) {
    bool b = false;
    SEQTO_RETURN_IF_ERROR(e.Bool("SmoothQuant", b));
    enabled = b;
  }
  for (const char* key : {"SmoothQuantAlpha", "SmoothQuantFolding"})
    if (e.has(key) && enabled != true) return UserError(e.KeyPath(key) + ": applies only with SmoothQuant: true");
  if (const json* a = e.Object("SmoothQuantAlpha")) {
    if (a->is_string() && a->get<std::string>() == "auto") {
      spec.options["alpha_search"] = 1;
      spec.options.erase("alpha");  // unused, and not written
    } else if (a->is_number() && a->get<double>() >= 0 && a->get<double>() <= 1) {
      spec.options["alpha"] = a->get<double>();
    } else {
      return UserError(e.KeyPath("SmoothQuantAlpha") + ": expected a number in [0, 1] or \"auto\", not " + a->dump());
    }
  }
  if (e.has("SmoothQuantFolding")) {
    bool b = true;
    SEQTO_RETURN_IF_ERROR(e.Bool("SmoothQuantFolding", b));
    spec.options["folding"] = b ? 1 : 0;
  }
  return Status::Ok();
}

}  // namespace

Expected<quant::QuantOptions> ParseQuantOptionsJson(const json& j, const std::string& where) {
  quant::QuantOptions o;
  ObjectReader r(j, where);
  SEQTO_RETURN_IF_ERROR(r.CheckObject());
  std::string mode = "static";
  SEQTO_RETURN_IF_ERROR(r.OneOf("mode", mode, {"static", "dynamic"}));
  o.mode = mode == "dynamic" ? quant::QuantMode::kDynamic : quant::QuantMode::kStatic;
  SEQTO_RETURN_IF_ERROR(r.Bool("per_channel", o.per_channel));
  SEQTO_RETURN_IF_ERROR(r.Bool("reduce_range", o.reduce_range));
  if (const json* t = r.Object("activation_type")) {
    SEQTO_ASSIGN_OR_RETURN(o.activation_type, QuantTypeAt(*t, r.KeyPath("activation_type")));
  }
  if (const json* t = r.Object("weight_type")) {
    SEQTO_ASSIGN_OR_RETURN(o.weight_type, QuantTypeAt(*t, r.KeyPath("weight_type")));
  }
  SEQTO_RETURN_IF_ERROR(r.Strings("op_types_to_quantize", o.op_types_to_quantize));
  SEQTO_RETURN_IF_ERROR(r.Strings("nodes_to_quantize", o.nodes_to_quantize));
  SEQTO_RETURN_IF_ERROR(r.Strings("nodes_to_exclude", o.nodes_to_exclude));
  SEQTO_RETURN_IF_ERROR(r.Strings("int16_activation_nodes", o.int16_activation_nodes));
  SEQTO_RETURN_IF_ERROR(r.Bool("power_of_two", o.power_of_two));
  if (r.has("calibrate_method")) {
    std::string method;
    SEQTO_RETURN_IF_ERROR(r.String("calibrate_method", method));
    auto m = quant::ParseCalibrationMethod(method);
    if (!m) return Status(m.error()).WithContext(r.KeyPath("calibrate_method"));
    o.calibration = *m;
  }
  std::optional<bool> smooth_quant;
  quant::RecoverySpec smooth_spec;
  if (const json* extra = r.Object("extra_options")) {
    ObjectReader e(*extra, r.KeyPath("extra_options"));
    SEQTO_RETURN_IF_ERROR(e.CheckObject());
    SEQTO_RETURN_IF_ERROR(ParseSmoothQuant(e, smooth_quant, smooth_spec));
    SEQTO_RETURN_IF_ERROR(e.Bool("ActivationSymmetric", o.activation_symmetric));
    if (e.has("WeightSymmetric")) {
      bool b = true;
      SEQTO_RETURN_IF_ERROR(e.Bool("WeightSymmetric", b));
      o.weight_symmetric = b;
    }
    SEQTO_RETURN_IF_ERROR(e.Bool("QuantizeBias", o.quantize_bias));
    auto& c = o.calibration_options;
    SEQTO_RETURN_IF_ERROR(e.Bool("CalibMovingAverage", c.moving_average));
    SEQTO_RETURN_IF_ERROR(e.Number("CalibMovingAverageConstant", c.averaging_constant, 0, 1));
    SEQTO_RETURN_IF_ERROR(e.Number("CalibPercentile", c.percentile, 0, 100));
    SEQTO_RETURN_IF_ERROR(e.Integer("CalibNumBins", c.percentile_num_bins, 16, 1 << 20));
    if (const json* ov = e.Object("TensorQuantOverrides")) {
      if (!ov->is_object()) return UserError(e.KeyPath("TensorQuantOverrides") + ": expected an object");
      for (auto it = ov->begin(); it != ov->end(); ++it)
        SEQTO_RETURN_IF_ERROR(ParseOverride(it.value(), e.KeyPath("TensorQuantOverrides") + "." + it.key(),
                                            o.tensor_overrides[it.key()]));
    }
    SEQTO_RETURN_IF_ERROR(e.Finish());
  }
  if (const json* list = r.Object("recovery")) {
    if (!list->is_array()) return UserError(r.KeyPath("recovery") + ": expected a list of recovery techniques");
    for (size_t i = 0; i < list->size(); ++i) {
      SEQTO_ASSIGN_OR_RETURN(
          quant::RecoverySpec spec,
          quant::recover::ParseRecoverySpecJson((*list)[i], r.KeyPath("recovery") + "[" + std::to_string(i) + "]"));
      o.recovery.push_back(std::move(spec));
    }
  }
  if (smooth_quant) {
    const bool listed = std::any_of(o.recovery.begin(), o.recovery.end(),
                                    [](const quant::RecoverySpec& s) { return s.name == "smooth_quant"; });
    if (listed)
      return UserError(r.KeyPath("extra_options.SmoothQuant") + ": quantization.recovery also lists smooth_quant; " +
                       "give one of the two");
    if (*smooth_quant) o.recovery.push_back(std::move(smooth_spec));
  }
  SEQTO_RETURN_IF_ERROR(r.Finish());
  if (Status s = quant::recover::CheckRecoverySpecs(o); !s.ok())
    return Status(s).WithContext(where.empty() ? "quantization" : where);
  quant::SyncCalibrationOptions(o);
  return o;
}

json QuantOptionsToJson(const quant::QuantOptions& o) {
  json j;
  j["mode"] = o.mode == quant::QuantMode::kStatic ? "static" : "dynamic";
  j["per_channel"] = o.per_channel;
  j["reduce_range"] = o.reduce_range;
  j["activation_type"] = quant::QuantTypeName(o.activation_type);
  j["weight_type"] = quant::QuantTypeName(o.weight_type);
  j["calibrate_method"] = quant::CalibrationMethodName(o.calibration);
  j["op_types_to_quantize"] = o.op_types_to_quantize;
  j["nodes_to_quantize"] = o.nodes_to_quantize;
  j["nodes_to_exclude"] = o.nodes_to_exclude;
  j["power_of_two"] = o.power_of_two;
  json extra;
  extra["ActivationSymmetric"] = o.activation_symmetric;
  if (o.weight_symmetric) extra["WeightSymmetric"] = *o.weight_symmetric;  // unset: by the weight type, as ORT
  extra["QuantizeBias"] = o.quantize_bias;
  // smooth_quant is written as ORT's keys (all its options have one), not in recovery;
  // only when used, so run directories written before these existed still resume.
  auto smooth = std::find_if(o.recovery.begin(), o.recovery.end(),
                             [](const quant::RecoverySpec& s) { return s.name == "smooth_quant"; });
  if (smooth != o.recovery.end()) {
    extra["SmoothQuant"] = true;
    if (quant::recover::OptionValue(*smooth, "alpha_search") != 0)
      extra["SmoothQuantAlpha"] = "auto";
    else
      extra["SmoothQuantAlpha"] = quant::recover::OptionValue(*smooth, "alpha");
    extra["SmoothQuantFolding"] = quant::recover::OptionValue(*smooth, "folding") != 0;
  }
  const auto& c = o.calibration_options;
  extra["CalibMovingAverage"] = c.moving_average;
  extra["CalibMovingAverageConstant"] = c.averaging_constant;
  extra["CalibPercentile"] = c.percentile;
  extra["CalibNumBins"] = c.percentile_num_bins;
  json overrides = json::object();
  for (const auto& [name, ov] : o.tensor_overrides) {
    json e = json::object();
    if (ov.quant_type) e["quant_type"] = quant::QuantTypeName(*ov.quant_type);
    if (ov.scale) e["scale"] = *ov.scale;
    if (ov.zero_point) e["zero_point"] = *ov.zero_point;
    if (ov.axis) e["axis"] = *ov.axis;
    if (ov.symmetric) e["symmetric"] = *ov.symmetric;
    if (ov.reduce_range) e["reduce_range"] = *ov.reduce_range;
    if (ov.rmin) e["rmin"] = *ov.rmin;
    if (ov.rmax) e["rmax"] = *ov.rmax;
    overrides[name] = json::array({e});  // ORT's shape: a list of dicts
  }
  extra["TensorQuantOverrides"] = overrides;
  j["extra_options"] = extra;
  // Only when used, so run directories written before these existed still resume.
  if (!o.int16_activation_nodes.empty()) j["int16_activation_nodes"] = o.int16_activation_nodes;
  json list = json::array();
  for (const auto& spec : o.recovery)
    if (spec.name != "smooth_quant") list.push_back(quant::recover::RecoverySpecToJson(spec));
  if (!list.empty()) j["recovery"] = list;
  return j;
}

const std::vector<std::string>& ObjectiveNames() {
  static const std::vector<std::string> names = {"accuracy_loss", "size_bytes", "latency_ms"};
  return names;
}

namespace {

// search.fallback's values, in FallbackNames() order.
const std::vector<std::pair<std::string, quant::Fallback>>& Fallbacks() {
  static const std::vector<std::pair<std::string, quant::Fallback>> table = {
      {"float", quant::Fallback::kFloat},
      {"int16", quant::Fallback::kInt16},
      {"float16", quant::Fallback::kFloat16},
      {"int16_activations", quant::Fallback::kInt16Activations}};
  return table;
}

std::string FallbackName(quant::Fallback f) {
  for (const auto& [name, value] : Fallbacks())
    if (value == f) return name;
  return "float";
}

}  // namespace

const std::vector<std::string>& FallbackNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, value] : Fallbacks()) v.push_back(name);
    return v;
  }();
  return names;
}

namespace {

// `recipes`: "auto" | "none" | a list of recipes, each a technique list as in
// quantization.recovery, or one string "cle+bias_correction" ("none": no technique).
Status ParseRecipes(ObjectReader& r, TuneConfig& c) {
  const bool forced = !c.quantization.recovery.empty();
  if (!r.has("recipes")) {
    if (forced) c.recipes = "forced";
    return Status::Ok();
  }
  const json& v = *r.Object("recipes");
  const std::string where = r.KeyPath("recipes");
  if (forced) return UserError(where + ": quantization.recovery already fixes the techniques; give one of the two");
  if (v.is_string()) {
    c.recipes = v.get<std::string>();
    return CheckKnown(where, c.recipes, {"auto", "none"});
  }
  if (!v.is_array() || v.empty())
    return UserError(where + ": expected \"auto\", \"none\" or a non-empty list of recipes");
  c.recipes = "list";
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    std::vector<quant::RecoverySpec> recipe;
    if (v[i].is_string()) {
      std::stringstream names(v[i].get<std::string>());
      std::string name;
      while (std::getline(names, name, '+')) {
        if (name == "none") continue;
        SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec, quant::recover::ParseRecoverySpec(name, at));
        recipe.push_back(std::move(spec));
      }
    } else if (v[i].is_array()) {
      for (size_t k = 0; k < v[i].size(); ++k) {
        SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec,
                               quant::recover::ParseRecoverySpecJson(v[i][k], at + "[" + std::to_string(k) + "]"));
        recipe.push_back(std::move(spec));
      }
    } else {
      return UserError(at + ": expected \"name+name\" or a list of techniques");
    }
    quant::QuantOptions check = c.quantization;
    check.recovery = recipe;
    if (Status s = quant::recover::CheckRecoverySpecs(check); !s.ok()) return Status(s).WithContext(at);
    c.recipe_list.push_back(std::move(recipe));
  }
  return Status::Ok();
}

}  // namespace

Expected<TuneConfig> ParseTuneConfig(const json& j, const std::string& config_path) {
  TuneConfig c;
  c.config_path = config_path;
  const std::string base = config_path.empty() ? "" : fs::path(config_path).parent_path().string();
  ObjectReader r(j, "");
  if (!j.is_object()) return UserError("the config must be a JSON object");

  SEQTO_RETURN_IF_ERROR(r.String("model", c.model));
  if (c.model.empty()) return UserError("model: required (the path of the float ONNX model)");
  c.model = Resolve(c.model, base);
  SEQTO_RETURN_IF_ERROR(r.String("out", c.out));
  c.out = Resolve(c.out, base);

  const json* data = r.Object("data");
  if (!data) return UserError("data: required (at least data.eval)");
  {
    ObjectReader d(*data, "data");
    SEQTO_RETURN_IF_ERROR(d.CheckObject());
    SEQTO_RETURN_IF_ERROR(ParseDataSet(d, "eval", c.eval, base));
    SEQTO_RETURN_IF_ERROR(ParseDataSet(d, "calibration", c.calibration, base));
    SEQTO_RETURN_IF_ERROR(ParseDataSet(d, "ranking", c.ranking, base));
    data::PreprocessSpec preprocess;
    bool has_preprocess = false;
    if (const json* p = d.Object("preprocess")) {
      SEQTO_ASSIGN_OR_RETURN(preprocess, ParsePreprocess(*p, "data.preprocess"));
      has_preprocess = true;
    }
    std::string labels, classes;
    SEQTO_RETURN_IF_ERROR(d.String("labels", labels));
    SEQTO_RETURN_IF_ERROR(d.String("classes", classes));
    SEQTO_RETURN_IF_ERROR(d.Integer("seed", c.seed, 0, INT64_MAX));
    SEQTO_RETURN_IF_ERROR(d.Integer("batch_size", c.batch_size, 1, 1 << 20));
    SEQTO_RETURN_IF_ERROR(d.Finish());
    if (c.eval.path.empty()) return UserError("data.eval: required (the evaluation data)");
    if (c.eval.labels.empty()) c.eval.labels = Resolve(labels, base);
    if (c.eval.classes.empty()) c.eval.classes = Resolve(classes, base);
    // Calibration and ranking default to the evaluation data (their own sample counts).
    for (DataSetConfig* set : {&c.calibration, &c.ranking}) {
      if (set->path.empty()) {
        set->from_eval = true;
        set->path = c.eval.path;
        if (set->labels.empty()) set->labels = c.eval.labels;
        if (set->classes.empty()) set->classes = c.eval.classes;
        if (!set->has_preprocess && c.eval.has_preprocess) {
          set->preprocess = c.eval.preprocess;
          set->has_preprocess = true;
        }
      }
    }
    for (DataSetConfig* set : {&c.eval, &c.calibration, &c.ranking})
      if (!set->has_preprocess && has_preprocess) {
        set->preprocess = preprocess;
        set->has_preprocess = true;
      }
    if (c.calibration.samples == 0) c.calibration.samples = 256;
    if (c.ranking.samples == 0) c.ranking.samples = 256;
  }

  if (const json* q = r.Object("quantization")) {
    SEQTO_ASSIGN_OR_RETURN(c.quantization, ParseQuantOptionsJson(*q, "quantization"));
  }
  SEQTO_RETURN_IF_ERROR(ParseRecipes(r, c));
  SEQTO_RETURN_IF_ERROR(r.OneOf("ranker", c.ranker, RankerNames()));
  SEQTO_RETURN_IF_ERROR(r.Integer("worst_samples", c.worst_samples, 0, int64_t{1} << 40));

  bool has_cost = false;
  if (const json* s = r.Object("search")) {
    ObjectReader sr(*s, "search");
    SEQTO_RETURN_IF_ERROR(sr.CheckObject());
    SEQTO_RETURN_IF_ERROR(sr.OneOf("strategy", c.strategy, SearchStrategyNames()));
    SEQTO_RETURN_IF_ERROR(sr.Number("threshold", c.threshold, -100, 100));
    if (c.threshold < 0)
      c.warnings.push_back("search.threshold is negative (" + json(c.threshold).dump() +
                           "): a candidate meets it only by being more accurate than the float model, so the search "
                           "will likely run to its end (or to search.max_candidates)");
    SEQTO_RETURN_IF_ERROR(sr.OneOf("loss", c.loss, {"accuracy", "disagreement"}));
    SEQTO_RETURN_IF_ERROR(sr.Integer("max_candidates", c.max_candidates, 0, 1 << 20));
    std::string fallback = "float";
    SEQTO_RETURN_IF_ERROR(sr.OneOf("fallback", fallback, FallbackNames()));
    for (const auto& [name, value] : Fallbacks())
      if (name == fallback) c.fallback = value;
    if (const json* cost = sr.Object("cost")) {
      if (c.ranker != "pareto")
        return UserError("search.cost: only ranker 'pareto' weighs costs (the ranker is '" + c.ranker + "')");
      ObjectReader cr(*cost, "search.cost");
      SEQTO_RETURN_IF_ERROR(cr.CheckObject());
      has_cost = true;
      c.cost_latency = c.cost_size = 0;
      SEQTO_RETURN_IF_ERROR(cr.Number("latency", c.cost_latency, 0, 1e6));
      SEQTO_RETURN_IF_ERROR(cr.Number("size", c.cost_size, 0, 1e6));
      SEQTO_RETURN_IF_ERROR(cr.Integer("measure_groups", c.cost_groups, 0, 1 << 20));
      SEQTO_RETURN_IF_ERROR(cr.Integer("lookahead", c.cost_lookahead, 1, 1 << 20));
      SEQTO_RETURN_IF_ERROR(cr.Integer("rounds", c.cost_rounds, 1, 1000));
      SEQTO_RETURN_IF_ERROR(cr.Integer("runs", c.cost_runs, 1, 1000000));
      SEQTO_RETURN_IF_ERROR(cr.Finish());
      if (c.cost_latency + c.cost_size <= 0) return UserError("search.cost: give 'latency' or 'size' a weight above 0");
    }
    SEQTO_RETURN_IF_ERROR(sr.Finish());
  }
  if (r.has("objectives")) {
    SEQTO_RETURN_IF_ERROR(r.Strings("objectives", c.objectives));
    if (c.objectives.empty()) return UserError("objectives: name at least one of " + JoinNames(ObjectiveNames()));
    std::set<std::string> seen;
    for (size_t i = 0; i < c.objectives.size(); ++i) {
      const std::string& o = c.objectives[i];
      SEQTO_RETURN_IF_ERROR(CheckKnown("objectives[" + std::to_string(i) + "]", o, ObjectiveNames()));
      if (!seen.insert(o).second) return UserError("objectives: '" + o + "' is listed twice");
    }
  }
  if (!has_cost) {  // the costs of the objectives (both when neither is one)
    const auto has = [&](const char* o) {
      return std::find(c.objectives.begin(), c.objectives.end(), o) != c.objectives.end();
    };
    c.cost_latency = has("latency_ms") ? 1.0 : 0.0;
    c.cost_size = has("size_bytes") ? 1.0 : 0.0;
    if (c.cost_latency + c.cost_size == 0) c.cost_latency = c.cost_size = 1.0;
  }
  SEQTO_RETURN_IF_ERROR(r.OneOf("runner", c.runner, runners::RunnerNames()));
  {  // the bound every --threads flag has
    int64_t threads = c.threads;
    SEQTO_RETURN_IF_ERROR(r.Integer("threads", threads, INT64_MIN, INT64_MAX));
    SEQTO_RETURN_IF_ERROR(CheckThreads(threads, "threads"));
    c.threads = static_cast<int>(threads);
  }
  if (const json* l = r.Object("latency")) {
    ObjectReader lr(*l, "latency");
    SEQTO_RETURN_IF_ERROR(lr.CheckObject());
    SEQTO_RETURN_IF_ERROR(lr.Integer("batch", c.latency_batch, 1, 1 << 16));
    SEQTO_RETURN_IF_ERROR(lr.Integer("warmup", c.latency_warmup, 0, 1000));
    SEQTO_RETURN_IF_ERROR(lr.Integer("runs", c.latency_runs, 1, 100000));
    SEQTO_RETURN_IF_ERROR(lr.Finish());
  }
  SEQTO_RETURN_IF_ERROR(r.Finish());
  if (c.out.empty()) c.out = (fs::path("runs") / fs::path(c.model).stem()).string();
  return c;
}

Expected<TuneConfig> LoadTuneConfig(const std::string& path) {
  SEQTO_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  auto config = ParseTuneConfig(j, path);
  if (!config) return Status(config.error()).WithContext(path);
  return config;
}

namespace {

std::string Absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  return (ec ? fs::path(path) : abs).lexically_normal().string();
}

}  // namespace

json TuneConfig::ToJson() const {
  json j;
  j["model"] = Absolute(model);
  j["out"] = out;
  auto set_json = [](const DataSetConfig& s) {
    json d = json::object();
    if (!s.from_eval) d["path"] = Absolute(s.path);
    if (!s.labels.empty() && !s.from_eval) d["labels"] = Absolute(s.labels);
    if (!s.classes.empty() && !s.from_eval) d["classes"] = Absolute(s.classes);
    d["samples"] = s.samples;
    if (s.has_preprocess) d["preprocess"] = s.preprocess.ToString();
    return d;
  };
  j["data"] = {{"eval", set_json(eval)},
               {"calibration", set_json(calibration)},
               {"ranking", set_json(ranking)},
               {"seed", seed},
               {"batch_size", batch_size}};
  j["quantization"] = QuantOptionsToJson(quantization);
  if (recipes == "list") {
    json list = json::array();
    for (const auto& recipe : recipe_list) {
      json specs = json::array();
      for (const auto& spec : recipe) specs.push_back(quant::recover::RecoverySpecToJson(spec));
      list.push_back(specs);
    }
    j["recipes"] = list;
  } else if (recipes != "forced") {  // forced: quantization.recovery says it
    j["recipes"] = recipes;
  }
  j["ranker"] = ranker;
  j["worst_samples"] = worst_samples;
  j["search"] = {{"strategy", strategy},
                 {"threshold", threshold},
                 {"loss", loss},
                 {"max_candidates", max_candidates},
                 {"fallback", FallbackName(fallback)}};
  if (ranker == "pareto")
    j["search"]["cost"] = {{"latency", cost_latency},     {"size", cost_size},     {"measure_groups", cost_groups},
                           {"lookahead", cost_lookahead}, {"rounds", cost_rounds}, {"runs", cost_runs}};
  j["objectives"] = objectives;
  j["runner"] = runner;
  j["threads"] = threads;
  j["latency"] = json{{"batch", latency_batch}, {"warmup", latency_warmup}, {"runs", latency_runs}};
  return j;
}

const std::vector<std::string>& SettingsThatMayDiffer() {
  static const std::vector<std::string> keys = {"out"};
  return keys;
}

namespace {

std::optional<std::string> Difference(const json& run, const json& now, const std::string& path) {
  if (run == now) return std::nullopt;
  if (run.is_object() && now.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : run.items()) keys.insert(k);
    for (const auto& [k, v] : now.items()) keys.insert(k);
    for (const auto& k : keys) {
      const std::string p = path.empty() ? k : path + "." + k;
      if (path.empty() &&
          std::find(SettingsThatMayDiffer().begin(), SettingsThatMayDiffer().end(), k) != SettingsThatMayDiffer().end())
        continue;
      if (!run.contains(k)) return p + ": not set in the run, " + now.at(k).dump() + " now";
      if (!now.contains(k)) return p + ": " + run.at(k).dump() + " in the run, not set now";
      if (auto d = Difference(run.at(k), now.at(k), p)) return d;
    }
    return std::nullopt;
  }
  if (run.is_array() && now.is_array() && run.size() == now.size()) {
    for (size_t i = 0; i < run.size(); ++i)
      if (auto d = Difference(run[i], now[i], path + "[" + std::to_string(i) + "]")) return d;
    return std::nullopt;
  }
  return path + ": " + run.dump() + " in the run, " + now.dump() + " now";
}

}  // namespace

std::optional<std::string> FirstSettingsDifference(const json& run, const json& now) {
  return Difference(run, now, "");
}

}  // namespace seqto::tune
