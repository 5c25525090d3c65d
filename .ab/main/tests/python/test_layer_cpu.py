"""CPU path with NumPy: bit-exact against the C++ reference, and within 1e-12 of an
independent NumPy float64 implementation."""

import numpy as np
import pytest

import moeforge
import numpy_reference as npref
from moeforge import _core


def small_spec(**kw):
    base = dict(name="small", num_experts=8, hidden=64, intermediate=32, topk=2, num_shared_experts=1,
                shared_intermediate=48)
    base.update(kw)
    return moeforge.MoeSpec(**base)


def inputs(spec, T, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, spec.hidden)).astype(np.float32)
    logits = (2.0 * rng.standard_normal((T, spec.num_experts))).astype(np.float32)
    return x, logits


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


SPECS = {
    "softmax-shared": dict(),
    "softmax-noshared-norenorm": dict(num_shared_experts=0, shared_intermediate=0,
                                      routing={"renormalize": False, "scaling_factor": 1.5}),
    "softmax-grouped-geglu": dict(routing={"kind": "softmax-grouped", "n_groups": 4, "topk_groups": 2},
                                  activation={"kind": "geglu"}),
    "sigmoid-bias-grouped": dict(routing={"kind": "sigmoid-bias-grouped", "n_groups": 4, "topk_groups": 2,
                                          "scaling_factor": 2.5}, topk=3),
    "fp8-weights": dict(weight_format="fp8", hidden=128, intermediate=128, shared_intermediate=128),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_cpu_layer_equals_cpp_reference_and_numpy(name):
    spec = small_spec(**SPECS[name])
    layer = moeforge.MoeLayer(spec, backend="cpu", seed=7)
    assert layer.backend == "cpu" and layer.device == ("cpu", 0)
    x, logits = inputs(spec, 37, seed=1)
    out = layer(x, logits)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == x.shape
    ref = _core._reference_forward(spec, layer.weights, x, logits)
    assert ref.dtype == np.float64
    # The cpu backend is the reference rounded once to the output dtype: bit for bit.
    np.testing.assert_array_equal(out.view(np.uint32), ref.astype(np.float32).view(np.uint32))
    mine = npref.forward(spec, layer.weights, x, logits)
    assert rel(ref, mine) < 1e-12
    assert np.all(np.isfinite(ref)) and np.linalg.norm(ref) > 0


def test_routing_matches_numpy():
    spec = small_spec(routing={"kind": "sigmoid-bias-grouped", "n_groups": 4, "topk_groups": 2}, topk=3)
    _, logits = inputs(spec, 50, seed=2)
    bias = np.linspace(-0.2, 0.2, spec.num_experts).astype(np.float32)
    ids, wts = _core._reference_route(spec, logits, bias)
    nids, nwts = npref.route(spec, logits, bias)
    np.testing.assert_array_equal(ids, nids)
    np.testing.assert_allclose(wts, nwts, rtol=1e-14)


def test_forward_topk_and_out():
    spec = small_spec()
    layer = moeforge.MoeLayer(spec, backend="cpu", seed=3)
    x, _ = inputs(spec, 9, seed=4)
    rng = np.random.default_rng(5)
    ids = np.stack([rng.choice(spec.num_experts, spec.topk, replace=False) for _ in range(9)]).astype(np.int32)
    wts = rng.random((9, spec.topk)).astype(np.float32)
    out = np.full_like(x, np.nan)
    got = layer(x, topk_ids=ids, topk_weights=wts, out=out)
    assert got is out and np.all(np.isfinite(out))
    ref = _core._reference_forward_topk(spec, layer.weights, x, ids, wts)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    mine = npref.forward(spec, layer.weights, x, topk_ids=ids, topk_weights=wts)
    assert rel(ref, mine) < 1e-12
    out64 = layer(x, topk_ids=ids.astype(np.int64), topk_weights=wts)
    np.testing.assert_array_equal(out64, out)


def test_in_memory_weights_with_bias_clamped_swiglu():
    spec = small_spec(expert_bias=True, activation={"kind": "clamped-swiglu"}, num_shared_experts=0,
                      shared_intermediate=0)
    E, H, I = spec.num_experts, spec.hidden, spec.intermediate
    rng = np.random.default_rng(11)
    w13 = (rng.standard_normal((E, 2 * I, H)) / 4).astype(np.float32)
    w2 = (rng.standard_normal((E, H, I)) / 3).astype(np.float32)
    b13 = rng.standard_normal((E, 2 * I)).astype(np.float32)
    b2 = rng.standard_normal((E, H)).astype(np.float32)
    weights = moeforge.Weights.from_experts(spec, list(w13), list(w2), list(b13), list(b2))
    e3 = weights.expert(3)
    # f32 -> bf16 rounding is what the BF16 format stores.
    assert np.max(np.abs(e3["w13"] - w13[3])) <= np.max(np.abs(w13[3])) * 2.0 ** -8
    np.testing.assert_array_equal(e3["b13"], b13[3])
    layer = moeforge.MoeLayer(spec, weights, backend="cpu")
    x, logits = inputs(spec, 21, seed=12)
    out = layer(x, logits)
    ref = _core._reference_forward(spec, weights, x, logits)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    assert rel(ref, npref.forward(spec, weights, x, logits)) < 1e-12


def test_in_memory_bf16_bits_copied_exactly():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    spec = small_spec(num_shared_experts=0, shared_intermediate=0)
    E, H, I = spec.num_experts, spec.hidden, spec.intermediate
    rng = np.random.default_rng(3)
    w13 = rng.standard_normal((E, 2 * I, H)).astype(ml_dtypes.bfloat16)
    w2 = rng.standard_normal((E, H, I)).astype(ml_dtypes.bfloat16)
    weights = moeforge.Weights.from_experts(spec, list(w13), list(w2))
    np.testing.assert_array_equal(weights.expert(5)["w2"], w2[5].astype(np.float64))
    layer = moeforge.MoeLayer(spec, weights, backend="cpu")
    x, logits = inputs(spec, 5, seed=4)
    xb = x.astype(ml_dtypes.bfloat16)
    out = layer(xb, logits)
    assert out.dtype == xb.dtype
    ref = _core._reference_forward(spec, weights, _core._reinterpret_bf16(xb.view(np.uint16)), logits)
    np.testing.assert_array_equal(out.astype(np.float32), ref.astype(np.float32).astype(ml_dtypes.bfloat16)
                                  .astype(np.float32))


def test_zero_tokens_and_presets_by_name():
    layer = moeforge.MoeLayer(small_spec(), backend="cpu")
    x = np.zeros((0, 64), np.float32)
    out = layer(x, np.zeros((0, 8), np.float32))
    assert out.shape == (0, 64)
    assert "backend=cpu" in repr(layer)


def test_deterministic_synthetic_weights():
    spec = small_spec()
    a = moeforge.MoeLayer(spec, backend="cpu", seed=1)
    b = moeforge.MoeLayer(spec, backend="cpu", seed=1)
    c = moeforge.MoeLayer(spec, backend="cpu", seed=2)
    x, logits = inputs(spec, 8, seed=9)
    np.testing.assert_array_equal(a(x, logits), b(x, logits))
    assert not np.array_equal(a(x, logits), c(x, logits))


def test_readme_cpu_example():
    import moeforge, numpy as np  # noqa: E401,F811
    layer = moeforge.MoeLayer(moeforge.MoeSpec(num_experts=8, hidden=256, intermediate=128, topk=2), backend="cpu")
    rng = np.random.default_rng(0)
    y = layer(rng.standard_normal((4, 256), np.float32), rng.standard_normal((4, 8), np.float32))
    assert (layer.backend, y.shape, y.dtype) == ("cpu", (4, 256), np.float32)
