// Host encoding of the sm90 kernels' TMA descriptors (cuTensorMapEncodeTiled, a pure host
// call of the driver). Weights get theirs once at prepare; per-call workspace buffers get
// theirs when the call carves them. Either way the map travels by value as a
// __grid_constant__ kernel parameter: no descriptor is ever written on the device or shared
// between calls.
#include <fmt/format.h>

#include <cstring>

#include "backends/sm90/sm90.hpp"
#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"

namespace moeforge::sm90 {

CUtensorMap encode_bf16_2d(CUdeviceptr base, uint64_t cols, uint64_t rows, uint64_t row_stride_bytes,
                           uint32_t box_rows, const char* what) {
  if (base % 16 != 0 || row_stride_bytes % 16 != 0)
    throw InvalidArgument(what, fmt::format("TMA needs a 16-byte aligned base and row stride, got base 0x{:x}, "
                                            "stride {} bytes",
                                            base, row_stride_bytes));
  if (cols == 0 || rows == 0 || rows > (uint64_t(1) << 31) || box_rows == 0 || box_rows > 256)
    throw InvalidArgument(what, fmt::format("TMA shape [{}, {}] with box rows {} is out of range", rows, cols, box_rows));
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {row_stride_bytes};
  cuuint32_t box[2] = {uint32_t(kBK), box_rows};  // 64 bf16 = one 128-byte swizzle row
  cuuint32_t elem_strides[2] = {1, 1};
  rt::check(rt::driver().cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                                reinterpret_cast<void*>(base), dims, strides, box, elem_strides,
                                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            fmt::format("cuTensorMapEncodeTiled({})", what).c_str());
  return map;
}

}  // namespace moeforge::sm90
