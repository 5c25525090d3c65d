// Host encoding of the sm90 kernels' TMA descriptors (cuTensorMapEncodeTiled, a pure host
// call of the driver). Weights get theirs once at prepare; per-call workspace buffers get
// theirs when the call carves them. Either way the map travels by value as a
// __grid_constant__ kernel parameter: no descriptor is ever written on the device or shared
// between calls.
#include <fmt/format.h>

#include <cstring>
#include <initializer_list>

#include "backends/sm90/sm90.hpp"
#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"

namespace moeforge::sm90 {

namespace {
// cuTensorMapEncodeTiled with the checks every map here needs: 16-byte aligned base and
// strides, box extents 1..256, dims within the driver's range.
CUtensorMap encode(CUtensorMapDataType type, uint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box, CUtensorMapSwizzle swizzle, CUdeviceptr base, const char* what) {
  bool ok = base % 16 == 0;
  for (uint32_t i = 0; i + 1 < rank; ++i) ok = ok && strides[i] % 16 == 0;
  if (!ok)
    throw InvalidArgument(what, fmt::format("TMA needs a 16-byte aligned base and strides, got base 0x{:x}", base));
  for (uint32_t i = 0; i < rank; ++i)
    if (dims[i] == 0 || dims[i] > (uint64_t(1) << 31) || box[i] == 0 || box[i] > 256)
      throw InvalidArgument(what, fmt::format("TMA dimension {} of {} (box {}) is out of range", i, dims[i], box[i]));
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  cuuint32_t elem_strides[3] = {1, 1, 1};
  rt::check(rt::driver().cuTensorMapEncodeTiled(&map, type, rank, reinterpret_cast<void*>(base), dims, strides, box,
                                                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            fmt::format("cuTensorMapEncodeTiled({})", what).c_str());
  return map;
}
}  // namespace

CUtensorMap encode_bf16_2d(CUdeviceptr base, uint64_t cols, uint64_t rows, uint64_t row_stride_bytes,
                           uint32_t box_rows, const char* what) {
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {uint32_t(kBK), box_rows};  // 64 bf16 = one 128-byte swizzle row
  return encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, base, what);
}

namespace {
// Dense row-major dims (innermost first), element size `elem` bytes.
CUtensorMap encode_dense(CUtensorMapDataType type, uint64_t elem, CUdeviceptr base,
                         std::initializer_list<uint64_t> dims_in, std::initializer_list<uint32_t> box_in,
                         bool swizzle128, const char* what) {
  const uint32_t rank = uint32_t(dims_in.size());
  if (rank < 2 || rank > 3 || box_in.size() != rank) throw InternalError("encode_dense: rank 2 or 3");
  cuuint64_t dims[3], strides[2];
  cuuint32_t box[3];
  uint64_t stride = elem;
  for (uint32_t i = 0; i < rank; ++i) {
    dims[i] = dims_in.begin()[i];
    box[i] = box_in.begin()[i];
    if (i > 0) strides[i - 1] = stride;
    stride *= dims[i];
  }
  if (swizzle128 && box[0] * elem != 128)
    throw InternalError("encode_dense: the 128-byte swizzle needs 128-byte box rows");
  return encode(type, rank, dims, strides, box, swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                base, what);
}
}  // namespace

CUtensorMap encode_u8(CUdeviceptr base, std::initializer_list<uint64_t> dims_bytes,
                      std::initializer_list<uint32_t> box_bytes, bool swizzle128, const char* what) {
  return encode_dense(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, dims_bytes, box_bytes, swizzle128, what);
}

CUtensorMap encode_f32(CUdeviceptr base, std::initializer_list<uint64_t> dims, std::initializer_list<uint32_t> box,
                       const char* what) {
  return encode_dense(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, dims, box, false, what);
}

}  // namespace moeforge::sm90
