// The sm90 backend's NVFP4 layout: the portable prepared layout with every 32-bit word of e2m1
// codes bit-permuted by w4::pack_word and every e4m3 scale replaced by its w4::scale_byte (the
// sign and zero it cannot hold moved into its 16 codes), so the kernels' dequantization is a
// few integer operations (kernels/sm90/w4_format.cuh says why); applied to each expert's
// matrices on the host before upload (portable::PrepareHook).
#include <cstring>

#include "backends/portable/portable.hpp"
#include "backends/sm90/sm90.hpp"
#include "kernels/sm90/w4_format.cuh"
#include "moeforge/errors.hpp"

namespace moeforge::sm90 {

void pack_w4(portable::PreparedMatrix& m) {
  if (m.format != WeightFormat::NVFP4) throw InternalError("pack_w4: not an NVFP4 matrix");
  const int64_t row_bytes = m.kp / 2, groups = m.kp / 16;  // a 16-group is 8 bytes of a row
  if (m.kp % 32 != 0 || int64_t(m.data.size()) != m.rows * row_bytes || int64_t(m.scales.size()) != m.rows * groups)
    throw InternalError("pack_w4: codes and scales do not match [rows][kp] with kp % 32 == 0");
  // Scales [kp / 32][rows][2]: scale (kt, n, g) covers bytes kt * 16 + g * 8 .. + 7 of row n.
  for (int64_t kt = 0; kt < m.kp / 32; ++kt)
    for (int64_t n = 0; n < m.rows; ++n)
      for (int64_t g = 0; g < 2; ++g) {
        uint8_t& s = m.scales[size_t((kt * m.rows + n) * 2 + g)];
        const w4::ScaleByte b = w4::scale_byte(s);
        s = b.byte;
        uint8_t* codes = m.data.data() + n * row_bytes + kt * 16 + g * 8;
        for (int i = 0; i < 8; ++i) {
          if (b.negate) codes[i] ^= 0x88;  // both codes' sign bits
          if (b.zero) codes[i] &= 0x88;    // both codes' magnitudes
        }
      }
  for (size_t i = 0; i < m.data.size(); i += 4) {
    uint32_t w;
    std::memcpy(&w, m.data.data() + i, 4);  // little endian: code 2k in the low nibble of byte k
    w = w4::pack_word(w);
    std::memcpy(m.data.data() + i, &w, 4);
  }
}

}  // namespace moeforge::sm90
