"""MoeLayer.from_checkpoint on a tiny Mixtral-style safetensors checkpoint written here."""

import json
import struct

import numpy as np
import pytest

import moeforge
import numpy_reference as npref
from moeforge import _core

pytestmark = pytest.mark.skipif(not getattr(_core, "_has_checkpoints", False), reason="built without checkpoints")

E, H, I, K = 4, 64, 32, 2


def bf16_bits(a):
    """float32 -> bf16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixtral-tiny")
    (d / "config.json").write_text(json.dumps({
        "model_type": "mixtral", "num_local_experts": E, "hidden_size": H, "intermediate_size": I,
        "num_experts_per_tok": K, "hidden_act": "silu", "num_hidden_layers": 1, "norm_topk_prob": True}))
    rng = np.random.default_rng(0)
    raw = {}
    prefix = "model.layers.0.block_sparse_moe."
    for e in range(E):
        for name, shape in (("w1", (I, H)), ("w3", (I, H)), ("w2", (H, I))):
            raw[f"{prefix}experts.{e}.{name}.weight"] = ("BF16", bf16_bits(rng.standard_normal(shape) / 8))
    raw[prefix + "gate.weight"] = ("BF16", bf16_bits(rng.standard_normal((E, H)) / 8))
    write_safetensors(d / "model.safetensors", raw)
    return d, {k: bf16_value(v[1]) for k, v in raw.items()}


def test_from_checkpoint_cpu(checkpoint):
    d, raw = checkpoint
    layer = moeforge.MoeLayer.from_checkpoint(d, 0, backend="cpu")
    spec = layer.spec
    assert (spec.num_experts, spec.hidden, spec.intermediate, spec.topk) == (E, H, I, K)
    w = layer.weights
    p = "model.layers.0.block_sparse_moe."
    np.testing.assert_array_equal(w.expert(1)["w13"], np.concatenate([raw[p + "experts.1.w1.weight"],
                                                                       raw[p + "experts.1.w3.weight"]]))
    np.testing.assert_array_equal(w.expert(2)["w2"], raw[p + "experts.2.w2.weight"])
    x = np.random.default_rng(1).standard_normal((6, H)).astype(np.float32)
    logits = w.router_logits(x)
    assert logits.shape == (6, E) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, x.astype(np.float64) @ raw[p + "gate.weight"].T, rtol=1e-6, atol=1e-6)
    out = layer(x, logits)
    ref = _core._reference_forward(spec, w, x, logits)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    mine = npref.forward(spec, w, x, logits)
    assert np.linalg.norm(ref - mine) / np.linalg.norm(mine) < 1e-12


def test_missing_checkpoint_is_an_io_error(tmp_path):
    with pytest.raises(moeforge.IoError) as e:
        moeforge.MoeLayer.from_checkpoint(tmp_path / "nothing-here", 0, backend="cpu")
    assert isinstance(e.value, OSError)
