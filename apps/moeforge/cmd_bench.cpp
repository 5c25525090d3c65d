// Placeholder until the subcommand lands; it says so rather than pretending.
#include "commands.hpp"
#include "moeforge/errors.hpp"

namespace moeforge::cli {
Registered register_bench(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "(not yet implemented)");
  return {cmd, [] () -> int { throw Unsupported("'bench' is not implemented yet"); }};
}
}  // namespace moeforge::cli
