#include <cmath>
#include <set>
#include <sstream>

#include "quant/recover/technique.h"

namespace seqto::quant::recover {

using nlohmann::json;

const std::vector<Technique>& Techniques() {
  // One line per technique, in the order they run (float stage first).
  static const std::vector<Technique> techniques = {
      MakeEqualizeTechnique(),
      MakeSmoothQuantTechnique(),
      MakeAdaRoundTechnique(),  // before bias correction, which then corrects the learned rounding
      MakeBiasCorrectionTechnique(),
  };
  return techniques;
}

const Technique* FindTechnique(const std::string& name) {
  for (const auto& t : Techniques())
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

std::string KnownNames() {
  std::string known;
  for (const auto& t : Techniques()) known += (known.empty() ? "" : ", ") + t.name;
  return known;
}

Expected<const Technique*> Lookup(const std::string& name, const std::string& where) {
  if (const Technique* t = FindTechnique(name)) return t;
  return UserError(where + ": unknown recovery technique '" + name + "' (known: " + KnownNames() + ")");
}

const OptionSpec* FindOption(const Technique& t, const std::string& key) {
  for (const auto& o : t.options)
    if (o.key == key) return &o;
  return nullptr;
}

std::string KnownKeys(const Technique& t) {
  std::string known;
  for (const auto& o : t.options) known += (known.empty() ? "" : ", ") + o.key;
  return known.empty() ? "none" : known;
}

std::string Number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Checks one value against its option; `shown` is how the user wrote it.
Status CheckValue(const OptionSpec& o, double v, const std::string& shown, const std::string& where) {
  const std::string at = where + "." + o.key;
  switch (o.kind) {
    case OptionSpec::Kind::kBool:
      if (v != 0 && v != 1) return UserError(at + ": expected true or false, not " + shown);
      return Status::Ok();
    case OptionSpec::Kind::kInteger:
      if (!std::isfinite(v) || v != std::floor(v)) return UserError(at + ": expected an integer, not " + shown);
      break;
    case OptionSpec::Kind::kNumber:
      if (!std::isfinite(v)) return UserError(at + ": expected a number, not " + shown);
      break;
  }
  if (v < o.min || v > o.max)
    return UserError(at + ": " + shown + " is outside [" + Number(o.min) + ", " + Number(o.max) + "]");
  return Status::Ok();
}

Expected<double> ParseText(const OptionSpec& o, const std::string& text, const std::string& where) {
  if (o.kind == OptionSpec::Kind::kBool) {
    if (text == "true" || text == "1" || text == "on" || text == "yes") return 1.0;
    if (text == "false" || text == "0" || text == "off" || text == "no") return 0.0;
    return UserError(where + "." + o.key + ": expected true or false, not '" + text + "'");
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    return UserError(where + "." + o.key + ": expected a number, not '" + text + "'");
  SEQTO_RETURN_IF_ERROR(CheckValue(o, v, text, where));
  return v;
}

}  // namespace

double OptionValue(const RecoverySpec& spec, const std::string& key) {
  if (auto it = spec.options.find(key); it != spec.options.end()) return it->second;
  if (const Technique* t = FindTechnique(spec.name))
    if (const OptionSpec* o = FindOption(*t, key)) return o->default_value;
  return 0;
}

Expected<RecoverySpec> ParseRecoverySpec(const std::string& text, const std::string& where) {
  RecoverySpec spec;
  const size_t colon = text.find(':');
  spec.name = text.substr(0, colon);
  SEQTO_ASSIGN_OR_RETURN(const Technique* t, Lookup(spec.name, where));
  if (colon == std::string::npos) return spec;
  const std::string at = where + " " + spec.name;
  std::stringstream items(text.substr(colon + 1));
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return UserError(at + ": expected key=value, not '" + item + "'");
    const std::string key = item.substr(0, eq);
    const OptionSpec* o = FindOption(*t, key);
    if (!o) return UserError(at + ": unknown option '" + key + "' (known: " + KnownKeys(*t) + ")");
    SEQTO_ASSIGN_OR_RETURN(double v, ParseText(*o, item.substr(eq + 1), at));
    spec.options[key] = v;
  }
  return spec;
}

Expected<RecoverySpec> ParseRecoverySpecJson(const json& j, const std::string& where) {
  if (j.is_string()) return ParseRecoverySpec(j.get<std::string>(), where);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
    return UserError(where + ": expected a technique name or an object with a \"name\"");
  RecoverySpec spec;
  spec.name = j["name"].get<std::string>();
  SEQTO_ASSIGN_OR_RETURN(const Technique* t, Lookup(spec.name, where));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "name") continue;
    const OptionSpec* o = FindOption(*t, it.key());
    if (!o)
      return UserError(where + ": unknown option '" + it.key() + "' of " + spec.name + " (known: " + KnownKeys(*t) +
                       ")");
    double v = 0;
    if (o->kind == OptionSpec::Kind::kBool) {
      if (!it.value().is_boolean()) return UserError(where + "." + it.key() + ": expected true or false");
      v = it.value().get<bool>() ? 1 : 0;
    } else {
      if (!it.value().is_number()) return UserError(where + "." + it.key() + ": expected a number");
      v = it.value().get<double>();
      SEQTO_RETURN_IF_ERROR(CheckValue(*o, v, it.value().dump(), where));
    }
    spec.options[it.key()] = v;
  }
  return spec;
}

json RecoverySpecToJson(const RecoverySpec& spec) {
  json j;
  j["name"] = spec.name;
  const Technique* t = FindTechnique(spec.name);
  if (!t) return j;
  for (const auto& o : t->options) {
    const double v = OptionValue(spec, o.key);
    if (o.kind == OptionSpec::Kind::kBool)
      j[o.key] = v != 0;
    else if (o.kind == OptionSpec::Kind::kInteger)
      j[o.key] = static_cast<int64_t>(v);
    else
      j[o.key] = v;
  }
  return j;
}

Status CheckRecoverySpecs(const QuantOptions& options) {
  std::set<std::string> seen;
  for (const auto& spec : options.recovery) {
    SEQTO_ASSIGN_OR_RETURN(const Technique* t, Lookup(spec.name, "recovery"));
    if (!seen.insert(spec.name).second) return UserError("recovery: '" + spec.name + "' is given twice");
    if (t->static_only && options.mode != QuantMode::kStatic)
      return UserError("recovery: '" + spec.name + "' needs static quantization (" +
                       (t->refine_plan ? "it edits the quantized values" : "it reads the calibration samples") + ")");
  }
  return Status::Ok();
}

std::string TechniquesHelp() {
  std::string help;
  for (const auto& t : Techniques()) {
    help += "  " + t.name + ": " + t.description + "\n";
    for (const auto& o : t.options)
      help += "      " + o.key + " (default " + Number(o.default_value) + "): " + o.help + "\n";
  }
  return help;
}

}  // namespace seqto::quant::recover
