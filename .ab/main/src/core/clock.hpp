// Wall-clock timestamps for records and cache metadata.
#pragma once
#include <string>

namespace moeforge {

// Now, UTC, ISO 8601 to the second: "2026-11-30T01:09:14Z".
std::string iso8601_utc_now();

}  // namespace moeforge
