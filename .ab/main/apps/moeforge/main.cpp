// moeforge — command-line entry point: parse, dispatch, map errors to exit codes.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "commands.hpp"
#include "moeforge/errors.hpp"

int main(int argc, char** argv) {
  using namespace moeforge;
  CLI::App app{"moeforge: the Mixture-of-Experts layer, with kernels compiled for the exact GPU it runs on"};
  app.set_version_flag("--version", MOEFORGE_VERSION);
  app.require_subcommand(1);
  std::vector<cli::Registered> commands = {
      cli::register_run(app),
      cli::register_doctor(app),
      cli::register_precompile(app),
      cli::register_bench(app),
      cli::register_stress(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& c : commands)
      if (c.command->parsed()) return c.action();
  } catch (const Error& e) {
    std::fprintf(stderr, "moeforge: %s: %s\n", to_string(e.kind()), e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moeforge: internal error: %s\n", e.what());
    return int(ErrorKind::Internal);
  }
  return 0;
}
