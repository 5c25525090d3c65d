// Subcommands of the moeforge CLI. Each file apps/moeforge/cmd_<name>.cpp
// defines one register function: it adds its subcommand and flags to the root
// app and returns the action main() runs when that subcommand was chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "moeforge/spec.hpp"

namespace moeforge {
class CheckpointWeights;
}

namespace moeforge::cli {

using Action = std::function<int()>;  // returns the process exit code

// --weights and --activations of a preset layer (run, bench, stress, precompile): the flags and
// their parsing (an unknown format is an InvalidArgument naming the flag). The object must
// outlive the parse (the flags write into it). (layer_options.cpp)
struct FormatOptions {
  std::string weights = "bf16";
  std::string activations = "bf16";
  bool given = false;  // either flag was on the command line
  void add_to(CLI::App* cmd);
  void apply(MoeSpec& spec) const;
};

// --checkpoint DIR --layer L (run, bench, precompile): that layer, opened. Its config.json gives
// the spec and its tensors the formats, so a preset flag given with it (preset_flag: "--model",
// "--all-presets"; "" when none was) or --weights / --activations are an InvalidArgument naming
// the flag, not silently ignored.
std::shared_ptr<const CheckpointWeights> open_checkpoint(const std::string& dir, int layer,
                                                         const std::string& preset_flag, const FormatOptions& formats);

struct Registered {
  CLI::App* command;
  Action action;
};

Registered register_run(CLI::App& root);
Registered register_doctor(CLI::App& root);
Registered register_precompile(CLI::App& root);
Registered register_bench(CLI::App& root);
Registered register_stress(CLI::App& root);

}  // namespace moeforge::cli
