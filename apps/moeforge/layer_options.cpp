// Which layer a command works on: a preset with --weights / --activations (run, bench, stress,
// precompile), or one layer of a checkpoint (run, bench, precompile). One definition of the
// flags' parsing and of what may not be combined.
#include "commands.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"

namespace moeforge::cli {

void FormatOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--weights", weights, "Weight format: bf16, fp8, nvfp4, mxfp4")
      ->capture_default_str()
      ->each([this](const std::string&) { given = true; });
  cmd->add_option("--activations", activations, "Activation format: bf16, fp16, fp8 (1 x 128 groups)")
      ->capture_default_str()
      ->each([this](const std::string&) { given = true; });
}

void FormatOptions::apply(MoeSpec& spec) const {
  spec.weight_format = parse_weight_format(weights, "--weights");
  spec.activation_format = parse_activation_format(activations, "--activations");
}

std::shared_ptr<const CheckpointWeights> open_checkpoint(const std::string& dir, int layer,
                                                         const std::string& preset_flag, const FormatOptions& formats) {
  if (!preset_flag.empty())
    throw InvalidArgument(preset_flag, "cannot be combined with --checkpoint (the spec comes from its config.json)");
  if (formats.given)
    throw InvalidArgument("--weights/--activations",
                          "cannot be combined with --checkpoint (the formats come from its tensors)");
  return CheckpointWeights::open(dir, layer);
}

}  // namespace moeforge::cli
