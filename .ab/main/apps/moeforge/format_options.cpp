// --weights / --activations of a preset layer: one definition for run, bench and stress.
#include "commands.hpp"
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

}  // namespace moeforge::cli
