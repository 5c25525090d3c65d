// Subcommands of the moeforge CLI. Each file apps/moeforge/cmd_<name>.cpp
// defines one register function: it adds its subcommand and flags to the root
// app and returns the action main() runs when that subcommand was chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace moeforge::cli {

using Action = std::function<int()>;  // returns the process exit code

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
