import copy

import pytest

import moeforge
from moeforge import ActivationKind, MoeSpec, RoutingKind, WeightFormat


def test_defaults_match_cpp():
    s = MoeSpec()
    assert s.name == "custom"
    assert (s.num_experts, s.hidden, s.intermediate, s.topk) == (0, 0, 0, 1)
    assert s.routing.kind == RoutingKind.Softmax and s.routing.renormalize is True
    assert (s.routing.n_groups, s.routing.topk_groups, s.routing.group_score_topn) == (1, 1, 2)
    assert s.routing.scaling_factor == 1.0
    assert s.activation.kind == ActivationKind.SwiGLU
    assert (s.activation.alpha, s.activation.limit) == (1.702, 7.0)
    assert (s.num_shared_experts, s.shared_intermediate, s.expert_bias) == (0, 0, False)
    assert s.weight_format == WeightFormat.BF16
    assert s.activation_format == moeforge.ActivationFormat.BF16


def test_every_field_writable_enums_by_name():
    s = MoeSpec(name="mine", num_experts=16, hidden=128, intermediate=64, topk=4,
                routing={"kind": "softmax-grouped", "n_groups": 4, "topk_groups": 2, "renormalize": False},
                activation=moeforge.ActivationSpec(kind="clamped-swiglu", alpha=1.5, limit=5.0),
                num_shared_experts=1, shared_intermediate=96, expert_bias=True, weight_format="fp8",
                activation_format="fp8")
    assert s.routing.kind == RoutingKind.SoftmaxGrouped and s.routing.n_groups == 4
    assert s.routing.renormalize is False
    assert s.activation.kind == ActivationKind.ClampedSwiGLU and s.activation.alpha == 1.5
    assert s.weight_format == WeightFormat.FP8_Block128
    assert moeforge.enum_name(s.weight_format) == "fp8"
    s.routing.scaling_factor = 2.5           # nested write goes into the spec
    s.routing.kind = RoutingKind.SigmoidBiasGrouped
    s.activation.kind = "geglu"
    s.weight_format = WeightFormat.NVFP4
    s.topk = 2
    assert s.routing.scaling_factor == 2.5
    assert s.routing.kind == RoutingKind.SigmoidBiasGrouped
    assert s.activation.kind == ActivationKind.GeGLU
    assert moeforge.enum_name(s.weight_format) == "nvfp4"
    assert "mine" in s.describe() and "mine" in repr(s)
    c = copy.copy(s)
    c.topk = 3
    assert s.topk == 2


def test_bad_field_values_raise_invalid_argument():
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        MoeSpec(weight_format="fp7")
    assert e.value.argument == "spec.weight_format"
    with pytest.raises(ValueError) as e:
        MoeSpec(no_such_field=1)
    assert e.value.argument == "spec.no_such_field"
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        MoeSpec().routing = {"kind": "argmax"}
    assert e.value.argument == "routing.kind"
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        MoeSpec(topk="two")
    assert e.value.argument == "spec.topk"


def test_validate_names_the_field():
    s = MoeSpec(num_experts=8, hidden=64, intermediate=32, topk=9)
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        s.validate()
    assert e.value.argument.startswith("spec.topk")
    assert isinstance(e.value, ValueError) and e.value.exit_code == 2


def test_presets():
    names = moeforge.presets.names()
    assert {"mistral-small-4", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b"} <= set(names)
    for n in names:
        s = moeforge.presets.get(n)
        s.validate()
        assert s.name == n
    ds = moeforge.presets.get("deepseek-v3")
    assert ds.routing.kind == RoutingKind.SigmoidBiasGrouped and ds.num_shared_experts == 1
    with pytest.raises(moeforge.InvalidArgumentError):
        moeforge.presets.get("no-such-model")
