// Placeholder until the subcommand lands; it says so rather than pretending.
#include "commands.hpp"
#include "moeforge/errors.hpp"

namespace moeforge::cli {
Registered register_precompile(CLI::App& root) {
  auto* cmd = root.add_subcommand("precompile", "(not yet implemented)");
  return {cmd, [] () -> int { throw Unsupported("'precompile' is not implemented yet"); }};
}
}  // namespace moeforge::cli
