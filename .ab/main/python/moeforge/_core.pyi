"""
moeforge C++ core (nanobind). Use the moeforge package; names with a leading _ are internal.
"""

from collections.abc import Sequence
import enum

import numpy
from numpy.typing import NDArray


class RoutingKind(enum.Enum):
    """How router logits become top-k experts and weights (spec.hpp)."""

    Softmax = 0
    """softmax over all experts; top-k of p"""

    SoftmaxGrouped = 1
    """softmax; best groups kept; top-k among them (Mistral 4)"""

    SigmoidBiasGrouped = 2
    """sigmoid + correction bias for selection; grouped (DeepSeek-V3)"""

class ActivationKind(enum.Enum):
    """The gated activation of GEMM1's output."""

    SwiGLU = 0
    """silu(gate) * up"""

    GeGLU = 1
    """gelu_tanh(gate) * up"""

    ClampedSwiGLU = 2
    """gpt-oss: clamped, (u + 1) * g * sigmoid(alpha * g)"""

class WeightFormat(enum.Enum):
    """How expert weights are stored."""

    BF16 = 0

    FP16 = 1

    FP8_Block128 = 2
    """E4M3, one f32 scale per 128x128 block"""

    NVFP4 = 3
    """E2M1, E4M3 scale per 16, f32 global scale"""

    MXFP4 = 4
    """E2M1, UE8M0 scale per 32"""

class ActivationFormat(enum.Enum):
    """What the GEMMs consume as activations."""

    BF16 = 0

    FP16 = 1

    FP8_Group128 = 2
    """E4M3, one f32 scale per 1x128 group"""

class RoutingSpec:
    """Routing of one MoE layer (see MoeSpec.routing)."""

    def __init__(self, **kwargs) -> None:
        """
        RoutingSpec(**fields): any field as a keyword; the rest keep their defaults.
        """

    @property
    def kind(self) -> RoutingKind:
        """RoutingKind (or its name, e.g. 'softmax-grouped')"""

    @kind.setter
    def kind(self, arg: object, /) -> None: ...

    @property
    def renormalize(self) -> bool:
        """divide the k weights by their sum"""

    @renormalize.setter
    def renormalize(self, arg: object, /) -> None: ...

    @property
    def n_groups(self) -> int:
        """grouped kinds: number of expert groups"""

    @n_groups.setter
    def n_groups(self, arg: object, /) -> None: ...

    @property
    def topk_groups(self) -> int:
        """grouped kinds: groups kept"""

    @topk_groups.setter
    def topk_groups(self, arg: object, /) -> None: ...

    @property
    def group_score_topn(self) -> int:
        """grouped kinds: a group's score sums its best N experts"""

    @group_score_topn.setter
    def group_score_topn(self, arg: object, /) -> None: ...

    @property
    def scaling_factor(self) -> float:
        """routed_scaling_factor, applied after renormalization"""

    @scaling_factor.setter
    def scaling_factor(self, arg: object, /) -> None: ...

    def __repr__(self) -> str: ...

class ActivationSpec:
    """Gated activation (see MoeSpec.activation)."""

    def __init__(self, **kwargs) -> None:
        """
        ActivationSpec(**fields): any field as a keyword; the rest keep their defaults.
        """

    @property
    def kind(self) -> ActivationKind:
        """ActivationKind (or its name, e.g. 'swiglu')"""

    @kind.setter
    def kind(self, arg: object, /) -> None: ...

    @property
    def alpha(self) -> float:
        """ClampedSwiGLU only"""

    @alpha.setter
    def alpha(self, arg: object, /) -> None: ...

    @property
    def limit(self) -> float:
        """ClampedSwiGLU only"""

    @limit.setter
    def limit(self, arg: object, /) -> None: ...

    def __repr__(self) -> str: ...

class MoeSpec:
    """
    Everything that defines one MoE layer, independent of weights (C++ moeforge::MoeSpec).

    Weights follow nn.Linear: W13 of an expert is [2I, H], rows [0, I) the gate, rows
    [I, 2I) the up projection; W2 is [H, I].
    """

    def __init__(self, **kwargs) -> None:
        """
        MoeSpec(**fields): any field as a keyword (routing / activation also as dicts).
        """

    @property
    def name(self) -> str:
        """a label ('custom' unless a preset)"""

    @name.setter
    def name(self, arg: object, /) -> None: ...

    @property
    def num_experts(self) -> int:
        """E, routed experts"""

    @num_experts.setter
    def num_experts(self, arg: object, /) -> None: ...

    @property
    def hidden(self) -> int:
        """H, the model dimension"""

    @hidden.setter
    def hidden(self, arg: object, /) -> None: ...

    @property
    def intermediate(self) -> int:
        """I, per routed expert"""

    @intermediate.setter
    def intermediate(self, arg: object, /) -> None: ...

    @property
    def topk(self) -> int:
        """k, experts per token"""

    @topk.setter
    def topk(self, arg: object, /) -> None: ...

    @property
    def routing(self) -> RoutingSpec:
        """RoutingSpec (assign one, or a dict of its fields)"""

    @routing.setter
    def routing(self, arg: object, /) -> None: ...

    @property
    def activation(self) -> ActivationSpec:
        """ActivationSpec (assign one, or a dict of its fields)"""

    @activation.setter
    def activation(self, arg: object, /) -> None: ...

    @property
    def num_shared_experts(self) -> int:
        """always-on experts"""

    @num_shared_experts.setter
    def num_shared_experts(self, arg: object, /) -> None: ...

    @property
    def shared_intermediate(self) -> int:
        """I of each shared expert"""

    @shared_intermediate.setter
    def shared_intermediate(self, arg: object, /) -> None: ...

    @property
    def expert_bias(self) -> bool:
        """b13 [E, 2I] and b2 [E, H] (gpt-oss)"""

    @expert_bias.setter
    def expert_bias(self, arg: object, /) -> None: ...

    @property
    def weight_format(self) -> WeightFormat:
        """WeightFormat (or 'bf16', 'fp16', 'fp8', 'nvfp4', 'mxfp4')"""

    @weight_format.setter
    def weight_format(self, arg: object, /) -> None: ...

    @property
    def activation_format(self) -> ActivationFormat:
        """ActivationFormat (or 'bf16', 'fp16', 'fp8')"""

    @activation_format.setter
    def activation_format(self, arg: object, /) -> None: ...

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the field when inconsistent."""

    def describe(self) -> str:
        """One line: 'mistral-small-4: E=128 H=4096 ...'."""

    def __repr__(self) -> str: ...

    def __copy__(self) -> MoeSpec: ...

    def __deepcopy__(self, arg: object, /) -> MoeSpec: ...

class Weights:
    """
    Where a layer's weights come from (C++ WeightSource): synthetic from a seed, or held in
    memory from arrays.
    """

    @staticmethod
    def synthetic(spec: MoeSpec, seed: int = 0) -> Weights:
        """
        Deterministic weights from (spec, seed), scaled like a trained layer (make_synthetic_weights).
        """

    @staticmethod
    def from_experts(spec: MoeSpec, w13: Sequence[object], w2: Sequence[object], b13: Sequence[object] | None = None, b2: Sequence[object] | None = None, shared_w13: Sequence[object] = [], shared_w2: Sequence[object] = [], correction_bias: object | None = None) -> Weights:
        """
        Weights held in memory (C++ InMemoryWeights), one CPU array per expert:
        w13[e] [2I, H] (gate rows, then up rows), w2[e] [H, I]; b13[e] [2I], b2[e] [H] when
        spec.expert_bias; shared_w13[s] [2SI, H], shared_w2[s] [H, SI]; correction_bias [E].
        Any DLPack CPU array (bf16, f16, f32, f64); bf16 into a BF16 spec (f16 into FP16) is
        copied bit for bit, anything else is quantized into spec.weight_format. Copies the data.
        """

    @property
    def spec(self) -> MoeSpec: ...

    @staticmethod
    def from_checkpoint(dir: str, layer: int, allow_bf16_fallback: bool = True) -> Weights:
        """
        One MoE layer of a Hugging Face safetensors checkpoint (C++ CheckpointWeights::open): the
        spec from config.json, weights memory-mapped and read one expert at a time. Raises IoError
        for a missing or damaged checkpoint, UnsupportedError for a layout moeforge cannot run.
        """

    @property
    def warnings(self) -> list[str]:
        """
        Warnings from loading a checkpoint (fallbacks, assumptions); empty otherwise.
        """

    @property
    def description(self) -> str: ...

    def router_logits(self, x: NDArray) -> NDArray[numpy.float32]:
        """
        Checkpoint weights only: router logits [T, E] float32 = x [T, H] (CPU) @ router weight^T
        (+ router bias), in double, rounded once.
        """

    def expert(self, e: int) -> dict:
        """
        Routed expert e as the kernels see it: dict of float64 w13 [2I, H], w2 [H, I], b13, b2.
        """

    def shared_expert(self, s: int) -> dict:
        """Shared expert s, dequantized (as expert())."""

    def correction_bias(self) -> object:
        """e_score_correction_bias [E] float32, or None."""

class Layer:
    """The C++ moeforge::MoeLayer (use moeforge.MoeLayer)."""

    def __init__(self, spec: MoeSpec, weights: Weights, backend: str = 'auto', device: int = 0) -> None: ...

    def forward(self, x: NDArray, router_logits: NDArray, out: NDArray, stream: int = 0) -> None:
        """
        out[T, H] = layer(x[T, H], router_logits[T, E]) on `stream` (a CUstream as an int; 0 = legacy default).
        """

    def forward_topk(self, x: NDArray, topk_ids: NDArray, topk_weights: NDArray, out: NDArray, stream: int = 0) -> None:
        """
        Precomputed routing: topk_ids [T, k] int32/int64, topk_weights [T, k] float32 (used as given).
        """

    @property
    def spec(self) -> MoeSpec: ...

    @property
    def backend(self) -> str:
        """the backend chosen ('cpu', 'portable', 'sm90')"""

    @property
    def backend_reason(self) -> str:
        """why it was chosen"""

    @property
    def device(self) -> tuple[str, int]:
        """('cpu', 0) or ('cuda', ordinal)"""
