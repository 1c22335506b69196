// The quantization flags `seqto quantize` and `seqto analyze` share: registered on a
// subcommand, then applied over the options from --config (ORT's names, the
// `quantization` section of a tune config), so a flag given on the command line wins.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "quant/quantize.h"

namespace CLI {
class App;
}

namespace seqto::cli {

struct QuantFlags {
  std::string mode = "static", calibration, activation_type, weight_type, config;
  std::vector<std::string> op_types, nodes, exclude, recover, int16_activations;
  bool per_channel = false, reduce_range = false, power_of_two = false;
};

// Adds --mode, --calibration, --per-channel, --reduce-range, --power-of-two,
// --activation-type, --weight-type, --op-types, --nodes, --exclude, --recover, --config.
void AddQuantFlags(CLI::App& cmd, QuantFlags& flags);

// The options: --config first (if given), then every flag given on the command line.
// Errors name the flag or the config file and key.
Expected<quant::QuantOptions> BuildQuantOptions(const QuantFlags& flags, const CLI::App& cmd);

}  // namespace seqto::cli
