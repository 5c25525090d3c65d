// validate.hpp: one test per rule, checking the argument named and the message.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "moeforge/errors.hpp"
#include "moeforge/validate.hpp"

using namespace moeforge;

namespace {

MoeSpec spec() {
  MoeSpec s;
  s.num_experts = 8;
  s.hidden = 64;
  s.intermediate = 32;
  s.topk = 2;
  return s;
}

const Device kCuda{DeviceKind::CUDA, 0};

// Buffers for a valid call with T tokens on `dev` (host memory; only addresses matter).
struct Call {
  int64_t T;
  std::vector<uint64_t> xb, outb, lb, ib, wb;  // uint64_t storage: 8-byte aligned, and 16 via new[]
  TensorView x, out, logits, ids, weights;
  explicit Call(int64_t t, Device dev = kCuda) : T(t) {
    xb.resize(size_t(T * 64 / 4 + 2));
    outb.resize(size_t(T * 64 / 4 + 2));
    lb.resize(size_t(T * 8 / 2 + 2));
    ib.resize(size_t(T + 2));
    wb.resize(size_t(T + 2));
    x = TensorView::contiguous(align(xb), DType::bf16, {T, 64}, dev);
    out = TensorView::contiguous(align(outb), DType::bf16, {T, 64}, dev);
    logits = TensorView::contiguous(align(lb), DType::f32, {T, 8}, dev);
    ids = TensorView::contiguous(align(ib), DType::i32, {T, 2}, dev);
    weights = TensorView::contiguous(align(wb), DType::f32, {T, 2}, dev);
  }
  static void* align(std::vector<uint64_t>& v) {
    auto p = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<void*>((p + 15) & ~uintptr_t(15));
  }
  ForwardArgs logits_args() { return {.x = &x, .router_logits = &logits, .out = &out}; }
  ForwardArgs topk_args() { return {.x = &x, .topk_ids = &ids, .topk_weights = &weights, .out = &out}; }
};

// Runs f, expects InvalidArgument naming `arg` whose message contains every fragment.
template <class F>
void expect_invalid(F&& f, const std::string& arg, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception, expected InvalidArgument(" << arg << ")";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("expected"), std::string::npos) << m;
    EXPECT_NE(m.find("got"), std::string::npos) << m;
    for (const auto& f : fragments) EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
  }
}

}  // namespace

TEST(ValidateForward, AValidCallPasses) {
  Call c(5);
  EXPECT_NO_THROW(validate_forward(spec(), c.logits_args(), kCuda));
  EXPECT_NO_THROW(validate_forward(spec(), c.topk_args(), kCuda));
  c.ids.dtype = DType::i64;
  c.ib.resize(20);
  c.ids.data = Call::align(c.ib);
  EXPECT_NO_THROW(validate_forward(spec(), c.topk_args(), kCuda));
  c.logits.dtype = DType::bf16;
  EXPECT_NO_THROW(validate_forward(spec(), c.logits_args(), kCuda));
}

TEST(ValidateForward, ZeroTokensIsValidEvenWithNullData) {
  Call c(0);
  c.x.data = c.out.data = c.logits.data = nullptr;
  EXPECT_NO_THROW(validate_forward(spec(), c.logits_args(), kCuda));
}

TEST(ValidateForward, Rank) {
  Call c(4);
  c.x.rank = 3;
  c.x.shape[2] = 1;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "x", {"rank 2", "rank 3"});
}

TEST(ValidateForward, ShapeOfX) {
  Call c(4);
  c.x.shape[1] = 63;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "x", {"[*, 64]", "[4, 63]"});
}

TEST(ValidateForward, TokensMustAgree) {
  Call c(4);
  c.logits.shape[0] = 3;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "router_logits", {"[4, 8]", "[3, 8]"});
  Call d(4);
  d.out.shape[0] = 5;
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "out", {"[4, 64]", "[5, 64]"});
  Call e(4);
  e.weights.shape[0] = 2;
  expect_invalid([&] { validate_forward(spec(), e.topk_args(), kCuda); }, "topk_weights", {"[4, 2]", "[2, 2]"});
}

TEST(ValidateForward, ShapeOfLogitsAndTopk) {
  Call c(4);
  c.logits.shape[1] = 16;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "router_logits", {"[4, 8]", "[4, 16]"});
  Call d(4);
  d.ids.shape[1] = 3;
  expect_invalid([&] { validate_forward(spec(), d.topk_args(), kCuda); }, "topk_ids", {"[4, 2]", "[4, 3]"});
}

TEST(ValidateForward, DtypeSets) {
  Call c(4);
  c.x.dtype = c.out.dtype = DType::i32;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "x", {"bf16, f16 or f32", "i32"});
  Call d(4);
  d.logits.dtype = DType::f16;
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "router_logits", {"f32 or bf16", "f16"});
  Call e(4);
  e.ids.dtype = DType::f32;
  expect_invalid([&] { validate_forward(spec(), e.topk_args(), kCuda); }, "topk_ids", {"i32 or i64", "f32"});
  Call f(4);
  f.weights.dtype = DType::bf16;
  expect_invalid([&] { validate_forward(spec(), f.topk_args(), kCuda); }, "topk_weights", {"f32", "bf16"});
}

TEST(ValidateForward, OutHasTheDtypeOfX) {
  Call c(4);
  c.out.dtype = DType::f16;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "out", {"bf16", "f16"});
}

TEST(ValidateForward, Contiguity) {
  Call c(4);
  c.x.strides = {128, 1};
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "x", {"[64, 1]", "[128, 1]"});
  Call d(4);
  d.logits.strides = {1, 4};  // column-major
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "router_logits", {"[8, 1]", "[1, 4]"});
}

TEST(ValidateForward, Alignment) {
  Call c(4);
  c.x.data = static_cast<char*>(c.x.data) + 2;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "x", {"16 bytes", "0x"});
  Call d(4);
  d.weights.data = static_cast<char*>(d.weights.data) + 8;
  expect_invalid([&] { validate_forward(spec(), d.topk_args(), kCuda); }, "topk_weights", {"16 bytes"});
}

TEST(ValidateForward, NullData) {
  Call c(4);
  c.logits.data = nullptr;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "router_logits", {"null", "32 elements"});
}

TEST(ValidateForward, Device) {
  Call c(4);
  c.logits.device = Device{DeviceKind::CPU, 0};
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "router_logits", {"cuda:0", "cpu:0"});
  Call d(4);
  d.out.device = Device{DeviceKind::CUDA, 1};
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "out", {"cuda:0", "cuda:1"});
}

TEST(ValidateForward, SizeOverflowAndLimit) {
  Call c(4);
  TensorView t = c.x;
  t.rank = 3;
  t.shape = {int64_t(1) << 31, int64_t(1) << 31, int64_t(1) << 31, 0};
  expect_invalid([&] { validate_tensor("big", t, {DType::bf16}, {-1, -1, -1}, kCuda); }, "big", {"overflows int64"});
  t.shape = {int64_t(1) << 21, int64_t(1) << 20, 1, 0};
  expect_invalid([&] { validate_tensor("big", t, {DType::bf16}, {-1, -1, -1}, kCuda); }, "big",
                 {"1099511627776", "2199023255552"});
  // Through validate_forward: T so large that [T, 64] passes kMaxElements.
  Call d(4);
  d.x.shape[0] = d.out.shape[0] = d.logits.shape[0] = (int64_t(1) << 40) / 32;
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "x", {"1099511627776"});
  t.shape = {-3, 4, 1, 0};
  expect_invalid([&] { validate_tensor("neg", t, {DType::bf16}, {-1, -1, -1}, kCuda); }, "neg", {"[-3, 4, 1]"});
}

TEST(ValidateForward, OutMustNotOverlapInputs) {
  Call c(4);
  c.out.data = c.x.data;
  expect_invalid([&] { validate_forward(spec(), c.logits_args(), kCuda); }, "out", {"overlap", "x"});
  Call d(4);
  // out ends one byte into logits: still an overlap.
  d.out.data = static_cast<char*>(d.logits.data) - d.out.nbytes() + 16;
  expect_invalid([&] { validate_forward(spec(), d.logits_args(), kCuda); }, "out", {"overlap", "router_logits"});
  Call e(4);
  e.out.data = e.ids.data;
  expect_invalid([&] { validate_forward(spec(), e.topk_args(), kCuda); }, "out", {"topk_ids"});
  Call f(4);  // adjacent but disjoint ranges are fine
  f.xb.resize(200);
  f.x.data = Call::align(f.xb);
  f.out.data = static_cast<char*>(f.x.data) + f.x.nbytes();
  EXPECT_NO_THROW(validate_forward(spec(), f.logits_args(), kCuda));
}

TEST(ValidateForward, ExactlyOneRoutingInput) {
  Call c(4);
  ForwardArgs both = c.topk_args();
  both.router_logits = &c.logits;
  expect_invalid([&] { validate_forward(spec(), both, kCuda); }, "router_logits", {"either", "both"});
  ForwardArgs neither{.x = &c.x, .out = &c.out};
  expect_invalid([&] { validate_forward(spec(), neither, kCuda); }, "router_logits", {"neither"});
  ForwardArgs half{.x = &c.x, .topk_ids = &c.ids, .out = &c.out};
  expect_invalid([&] { validate_forward(spec(), half, kCuda); }, "topk_weights", {"together"});
}

TEST(ValidateForward, MissingXOrOutAndBadSpec) {
  Call c(4);
  ForwardArgs a = c.logits_args();
  a.x = nullptr;
  expect_invalid([&] { validate_forward(spec(), a, kCuda); }, "x", {"none"});
  a = c.logits_args();
  a.out = nullptr;
  expect_invalid([&] { validate_forward(spec(), a, kCuda); }, "out", {"none"});
  MoeSpec bad = spec();
  bad.topk = 9;
  EXPECT_THROW(validate_forward(bad, c.logits_args(), kCuda), InvalidArgument);
}

TEST(ValidateTopkIds, RangeWithTokenSlotAndValue) {
  std::vector<int32_t> ids{0, 1, 7, 8};
  auto t = TensorView::contiguous(ids.data(), DType::i32, {2, 2});
  expect_invalid([&] { validate_topk_ids_host("topk_ids", t, 8); }, "topk_ids", {"[0, 8)", "8", "token 1", "slot 1"});
  ids[3] = 2;
  EXPECT_NO_THROW(validate_topk_ids_host("topk_ids", t, 8));
  std::vector<int64_t> ids64{0, -1};
  auto t64 = TensorView::contiguous(ids64.data(), DType::i64, {1, 2});
  expect_invalid([&] { validate_topk_ids_host("topk_ids", t64, 8); }, "topk_ids", {"-1", "token 0", "slot 1"});
}
