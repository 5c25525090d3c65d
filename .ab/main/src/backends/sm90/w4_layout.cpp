// The sm90 backend's NVFP4 code layout: the portable prepared layout with every 32-bit word of
// e2m1 codes bit-permuted by w4::pack_word (kernels/sm90/w4_format.cuh says why), applied to
// each expert's matrices on the host before upload (portable::PrepareHook).
#include <cstring>

#include "backends/portable/portable.hpp"
#include "backends/sm90/sm90.hpp"
#include "kernels/sm90/w4_format.cuh"
#include "moeforge/errors.hpp"

namespace moeforge::sm90 {

void pack_w4_codes(portable::PreparedMatrix& m) {
  if (m.format != WeightFormat::NVFP4) throw InternalError("pack_w4_codes: not an NVFP4 matrix");
  if (m.data.size() % 4 != 0) throw InternalError("pack_w4_codes: codes are not whole 32-bit words");
  for (size_t i = 0; i < m.data.size(); i += 4) {
    uint32_t w;
    std::memcpy(&w, m.data.data() + i, 4);  // little endian: code 2k in the low nibble of byte k
    w = w4::pack_word(w);
    std::memcpy(m.data.data() + i, &w, 4);
  }
}

}  // namespace moeforge::sm90
