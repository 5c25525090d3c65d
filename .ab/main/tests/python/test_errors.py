"""C++ error kinds arrive as the matching Python exceptions, naming the argument."""

import numpy as np
import pytest

import moeforge
from moeforge import errors


@pytest.fixture(scope="module")
def layer():
    spec = moeforge.MoeSpec(num_experts=8, hidden=64, intermediate=32, topk=2)
    return moeforge.MoeLayer(spec, backend="cpu")


def x_logits(T=4, H=64, E=8):
    rng = np.random.default_rng(0)
    return rng.standard_normal((T, H)).astype(np.float32), rng.standard_normal((T, E)).astype(np.float32)


@pytest.mark.parametrize("case, argument", [
    ("x_hidden", "x"), ("x_dtype", "x"), ("x_rank", "x"), ("x_strided", "x"),
    ("logits_shape", "router_logits"), ("logits_dtype", "router_logits"),
    ("out_dtype", "out"), ("out_shape", "out"), ("out_overlaps_x", "out"),
    ("ids_range", "topk_ids"), ("ids_dtype", "topk_ids"), ("weights_missing", "topk_weights"),
    ("both_routings", "router_logits"),
])
def test_invalid_arguments(layer, case, argument):
    x, logits = x_logits()
    ids = np.tile(np.array([[0, 1]], np.int32), (4, 1))
    wts = np.full((4, 2), 0.5, np.float32)
    calls = {
        "x_hidden": lambda: layer(x_logits(H=63)[0], logits),
        "x_dtype": lambda: layer(x.astype(np.float64), logits),
        "x_rank": lambda: layer(x[None], logits),
        "x_strided": lambda: layer(np.asfortranarray(x), logits),
        "logits_shape": lambda: layer(x, logits[:, :7]),
        "logits_dtype": lambda: layer(x, logits.astype(np.float16)),
        "out_dtype": lambda: layer(x, logits, out=np.empty(x.shape, np.float16)),
        "out_shape": lambda: layer(x, logits, out=np.empty((5, 64), np.float32)),
        "out_overlaps_x": lambda: layer(x, logits, out=x),
        "ids_range": lambda: layer(x, topk_ids=ids + 7, topk_weights=wts),
        "ids_dtype": lambda: layer(x, topk_ids=ids.astype(np.float32), topk_weights=wts),
        "weights_missing": lambda: layer(x, topk_ids=ids),
        "both_routings": lambda: layer(x, logits, topk_ids=ids, topk_weights=wts),
    }
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        calls[case]()
    assert isinstance(e.value, ValueError) and isinstance(e.value, errors.MoeforgeError)
    assert e.value.argument == argument, str(e.value)
    assert str(e.value).startswith(argument + ":"), str(e.value)
    assert e.value.exit_code == 2


def test_unknown_backend_and_gpu_backend_without_gpu():
    spec = moeforge.MoeSpec(num_experts=8, hidden=64, intermediate=32, topk=2)
    with pytest.raises(moeforge.MoeforgeError) as e:
        moeforge.MoeLayer(spec, backend="no-such-backend")
    assert isinstance(e.value, (ValueError, NotImplementedError))
    if not moeforge.doctor(selftest=False)["devices"]:
        with pytest.raises((moeforge.UnsupportedError, moeforge.DeviceError)) as e:
            moeforge.MoeLayer(spec, backend="portable")
        assert isinstance(e.value, (NotImplementedError, RuntimeError))


def test_exception_hierarchy():
    assert issubclass(moeforge.InvalidArgumentError, ValueError)
    assert issubclass(moeforge.UnsupportedError, NotImplementedError)
    for cls in (moeforge.DeviceError, moeforge.CompileError, moeforge.CacheError, moeforge.InternalError):
        assert issubclass(cls, RuntimeError) and issubclass(cls, moeforge.MoeforgeError)
    assert issubclass(moeforge.IoError, OSError)


def test_wrong_python_types():
    spec = moeforge.MoeSpec(num_experts=8, hidden=64, intermediate=32, topk=2)
    with pytest.raises(TypeError):
        moeforge.MoeLayer(42)
    with pytest.raises(TypeError):
        moeforge.MoeLayer(spec, weights="weights")
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        moeforge.MoeLayer(spec, backend="cpu")([[1.0] * 64], np.zeros((1, 8), np.float32))
    assert e.value.argument == "x"


def test_weights_from_experts_checks(layer):
    spec = moeforge.MoeSpec(num_experts=2, hidden=64, intermediate=32, topk=1)
    w13 = [np.zeros((64, 64), np.float32)] * 2
    w2 = [np.zeros((64, 32), np.float32)] * 2
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        moeforge.Weights.from_experts(spec, w13[:1], w2)
    assert e.value.argument == "w13"
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        moeforge.Weights.from_experts(spec, w13, [np.zeros((64, 31), np.float32)] * 2)
    assert e.value.argument == "w2[0]"
