// Placeholder until the subcommand lands; it says so rather than pretending.
#include "commands.hpp"
#include "moeforge/errors.hpp"

namespace moeforge::cli {
Registered register_doctor(CLI::App& root) {
  auto* cmd = root.add_subcommand("doctor", "(not yet implemented)");
  return {cmd, [] () -> int { throw Unsupported("'doctor' is not implemented yet"); }};
}
}  // namespace moeforge::cli
