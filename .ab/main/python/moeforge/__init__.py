"""moeforge: Mixture-of-Experts layers with kernels compiled for the exact GPU they run on.

    import moeforge, numpy as np
    layer = moeforge.MoeLayer(moeforge.MoeSpec(num_experts=8, hidden=64, intermediate=32, topk=2), backend="cpu")
    x = np.random.randn(4, 64).astype(np.float32)
    logits = np.random.randn(4, 8).astype(np.float32)
    print(layer(x, logits).shape)   # (4, 64)

Inputs are any DLPack arrays (torch, CuPy, JAX on the GPU; NumPy on the CPU),
read in place; the output is allocated in x's framework (or written into out=)
and the work runs on the caller's current stream. ``moeforge.torch`` adds a
``torch.library`` op for torch.compile and CUDA graphs, and vLLM's
``fused_experts``.
"""

from __future__ import annotations

import json as _json
from typing import Any, Optional

from . import _arrays, _core, presets
from ._core import (
    ActivationFormat,
    ActivationKind,
    ActivationSpec,
    MoeSpec,
    RoutingKind,
    RoutingSpec,
    WeightFormat,
    Weights,
)
from .errors import (
    CacheError,
    CompileError,
    DeviceError,
    InternalError,
    InvalidArgumentError,
    IoError,
    MoeforgeError,
    UnsupportedError,
)

__version__ = _core.__version__


def enum_name(value: Any) -> str:
    """An enum value's name as the CLI and ``describe()`` print it: 'softmax-grouped', 'fp8', ..."""
    return _core._enum_name(value)


def doctor(model: str = "mistral-small-4", selftest: bool = True) -> dict:
    """What ``moeforge doctor --json`` prints, as a dict: driver, NVRTC, devices and their
    exact targets, the kernel cache, budget rejections, the backend ``auto`` would choose
    for ``model`` and any problems. ``selftest=False`` skips the per-GPU self-tests (as
    ``--no-selftest``). Never raises for a missing driver or GPU: the report says so."""
    return _json.loads(_core._doctor_json(model, selftest, selftest))


class MoeLayer:
    """One MoE layer: spec + weights prepared once for a backend and device.

    ``MoeLayer(spec, weights=None, backend="auto", device=0, seed=0)``

    * ``spec``: a :class:`MoeSpec` or a preset name (``moeforge.presets.names()``).
    * ``weights``: a :class:`Weights` (``Weights.synthetic(spec, seed)``,
      ``Weights.from_experts(...)``); None: synthetic weights from ``seed``.
    * ``backend``: "auto" (the preferred GPU backend that passes its self-test here:
      "sm90" on H100/H200, else "portable"; "cpu" without a GPU), "cpu" (the
      double-precision reference, rounded once into the output dtype), "portable", "sm90".
      An explicit backend that cannot run here raises, saying why.
    * ``device``: CUDA ordinal (ignored by "cpu").

    Calls are thread-safe; the layer holds no per-call state.
    """

    def __init__(self, spec: Any, weights: Optional[Weights] = None, backend: str = "auto", device: int = 0,
                 seed: int = 0):
        if isinstance(spec, str):
            spec = presets.get(spec)
        if not isinstance(spec, MoeSpec):
            raise TypeError(f"spec: expected a moeforge.MoeSpec or a preset name, got {type(spec).__name__}")
        if weights is None:
            weights = Weights.synthetic(spec, seed)
        elif not isinstance(weights, Weights):
            raise TypeError(f"weights: expected a moeforge.Weights or None, got {type(weights).__name__}")
        self._weights = weights
        self._layer = _core.Layer(spec, weights, backend, device)

    @classmethod
    def from_checkpoint(cls, path: str, layer: int, backend: str = "auto", device: int = 0,
                        allow_bf16_fallback: bool = True) -> "MoeLayer":
        """Layer ``layer`` of a Hugging Face safetensors checkpoint directory (config.json +
        *.safetensors): the spec comes from config.json, the weights are memory-mapped and
        read one expert at a time (``Weights.from_checkpoint``). Loading warnings (e.g. a
        fallback to BF16) are issued as Python warnings. Router logits for this layer:
        ``layer.weights.router_logits(x)`` (CPU x).
        Raises IoError for a missing or damaged checkpoint, UnsupportedError for a layout
        moeforge cannot run."""
        if not getattr(_core, "_has_checkpoints", False):
            raise UnsupportedError("MoeLayer.from_checkpoint: this build has no checkpoint loader", "unsupported", 3)
        weights = Weights.from_checkpoint(str(path), int(layer), allow_bf16_fallback)
        import warnings

        for message in weights.warnings:
            warnings.warn(f"moeforge checkpoint: {message}", stacklevel=2)
        return cls(weights.spec, weights, backend=backend, device=device)

    # -- properties ---------------------------------------------------------------------
    @property
    def spec(self) -> MoeSpec:
        """The layer's MoeSpec (a copy)."""
        return self._layer.spec

    @property
    def weights(self) -> Weights:
        return self._weights

    @property
    def backend(self) -> str:
        """The backend in use ('cpu', 'portable', 'sm90')."""
        return self._layer.backend

    @property
    def backend_reason(self) -> str:
        """Why that backend was chosen."""
        return self._layer.backend_reason

    @property
    def device(self) -> tuple:
        """('cpu', 0) or ('cuda', ordinal): where inputs and outputs must live."""
        return self._layer.device

    def __repr__(self) -> str:
        kind, index = self.device
        return f"MoeLayer({self._layer.spec.describe()}; backend={self.backend}, device={kind}:{index})"

    # -- forward ------------------------------------------------------------------------
    def __call__(self, x: Any, router_logits: Any = None, *, topk_ids: Any = None, topk_weights: Any = None,
                 out: Any = None, stream: Optional[int] = None) -> Any:
        """``layer(x, router_logits)`` or ``layer(x, topk_ids=..., topk_weights=...)``.

        * ``x`` [T, H]: bf16, f16 or f32 (NumPy: float32, or ``ml_dtypes.bfloat16``).
        * ``router_logits`` [T, E]: f32 or bf16; or precomputed routing ``topk_ids``
          [T, k] int32/int64 and ``topk_weights`` [T, k] f32 (used as given).
        * ``out`` [T, H], x's dtype: written in place and returned; default: a new
          array in x's framework on x's device.
        * ``stream``: a CUstream as an int; default: the caller's current stream
          (torch, CuPy), else the legacy default stream.

        Every array must be contiguous and on the layer's device; nothing is copied.
        Raises InvalidArgumentError (a ValueError) naming the argument at fault.
        """
        x_core = _arrays.to_core(x, "x")
        if out is None:
            result, out_core = _arrays.empty_like(x)
        else:
            result, out_core = out, _arrays.to_core(out, "out")
        if stream is None:
            stream = _arrays.current_stream(x)
        if router_logits is not None:
            if topk_ids is not None or topk_weights is not None:
                raise InvalidArgumentError(
                    "router_logits: expected either router_logits or topk_ids and topk_weights, got both",
                    "invalid argument", 2, argument="router_logits")
            self._layer.forward(x_core, _arrays.to_core(router_logits, "router_logits"), out_core, stream)
        else:
            if topk_ids is None or topk_weights is None:
                missing = "topk_ids" if topk_ids is None else "topk_weights"
                raise InvalidArgumentError(
                    f"{missing}: expected router_logits, or topk_ids and topk_weights together",
                    "invalid argument", 2, argument=missing)
            self._layer.forward_topk(x_core, _arrays.to_core(topk_ids, "topk_ids"),
                                     _arrays.to_core(topk_weights, "topk_weights"), out_core, stream)
        return _arrays.finish(result)

    forward = __call__


__all__ = [
    "MoeLayer",
    "MoeSpec",
    "RoutingSpec",
    "ActivationSpec",
    "RoutingKind",
    "ActivationKind",
    "WeightFormat",
    "ActivationFormat",
    "Weights",
    "presets",
    "doctor",
    "enum_name",
    "MoeforgeError",
    "InvalidArgumentError",
    "UnsupportedError",
    "DeviceError",
    "CompileError",
    "CacheError",
    "IoError",
    "InternalError",
]
