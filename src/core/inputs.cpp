#include "core/inputs.hpp"

#include <openssl/evp.h>

#include <cmath>
#include <fmt/format.h>
#include <string>

#include "core/parallel.hpp"
#include "moeforge/formats.hpp"

namespace moeforge {
namespace {

// splitmix64: a counter-based generator, so element i of a batch does not
// depend on how (or on how many threads) the batch is generated.
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double unit(uint64_t bits) { return (double(bits >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
// Standard normal from two counter draws (Box-Muller).
double normal(uint64_t stream, uint64_t i) {
  const double u1 = unit(mix(stream ^ mix(2 * i))), u2 = unit(mix(stream ^ mix(2 * i + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

HostInputs make_inputs(const MoeSpec& spec, int64_t tokens, uint64_t seed) {
  HostInputs in;
  in.tokens = tokens;
  in.x.resize(size_t(tokens * spec.hidden));
  in.logits.resize(size_t(tokens * spec.num_experts));
  const uint64_t sx = mix(seed * 2 + 1), sl = mix(seed * 2 + 2);
  // Threaded: one thread took 7 / 13 s at T = 36308 (Mistral-Small-4 / DeepSeek-V3) of a
  // bench's GPU call, for values that depend only on their index.
  parallel_ranges(int64_t(in.x.size()), int64_t(1) << 18, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) in.x[size_t(i)] = formats::float_to_bf16(float(normal(sx, uint64_t(i))));
  });
  parallel_ranges(int64_t(in.logits.size()), int64_t(1) << 18, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) in.logits[size_t(i)] = float(2.0 * normal(sl, uint64_t(i)));
  });
  return in;
}

std::string checksum_hex(const void* data, std::size_t bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, bytes, digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < 8; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace moeforge
