"""PyTorch integration: a ``torch.library`` custom op and vLLM's ``fused_experts``.

* ``torch.ops.moeforge.moe_forward(x, router_logits, topk_ids, topk_weights, handle)``
  returns a new tensor; ``torch.ops.moeforge.moe_forward_out(out, x, ...)`` writes
  into ``out``. Either ``router_logits`` or both ``topk_*`` are given (the others
  None). ``handle`` is an int from :func:`register`: layers live in a process-wide
  registry so that the op's arguments are only tensors and an int. Both ops have
  fake (meta) implementations (``torch.library.register_fake``), so they trace
  under ``torch.compile`` and record into CUDA graphs: the launch goes to
  ``torch.cuda.current_stream()``, and each call's workspace is stream-ordered.
* :class:`MoeModule` wraps a :class:`moeforge.MoeLayer` as an ``nn.Module``.
* :func:`fused_experts` mirrors vLLM's ``fused_experts`` (same argument order).

Build layers (and call ``fused_experts`` once for a given set of weights) before
capturing a CUDA graph: preparing a layer uploads weights, which a capture forbids.
"""

# No `from __future__ import annotations`: torch.library.custom_op reads the type hints.
import itertools
import threading
import weakref
from typing import Dict, Optional, Tuple

import torch

from . import MoeLayer, MoeSpec, Weights
from .errors import InvalidArgumentError, UnsupportedError

# --------------------------------------------------------------------------------------
# Layer registry: op arguments must be tensors and scalars, so layers go by handle.
_registry: Dict[int, MoeLayer] = {}
_registry_lock = threading.Lock()
_next_handle = itertools.count(1)


def register(layer: MoeLayer) -> int:
    """Registers ``layer`` and returns its handle for the ops (kept until unregister)."""
    if not isinstance(layer, MoeLayer):
        raise TypeError(f"layer: expected a moeforge.MoeLayer, got {type(layer).__name__}")
    with _registry_lock:
        handle = next(_next_handle)
        _registry[handle] = layer
    return handle


def unregister(handle: int) -> None:
    """Drops a handle (the layer is freed once nothing else holds it)."""
    with _registry_lock:
        _registry.pop(handle, None)


def get_layer(handle: int) -> MoeLayer:
    with _registry_lock:
        layer = _registry.get(int(handle))
    if layer is None:
        raise InvalidArgumentError(f"handle: no moeforge layer is registered as {handle}", "invalid argument", 2,
                                   argument="handle")
    return layer


def _run(layer: MoeLayer, out: torch.Tensor, x: torch.Tensor, router_logits: Optional[torch.Tensor],
         topk_ids: Optional[torch.Tensor], topk_weights: Optional[torch.Tensor]) -> None:
    stream = int(torch.cuda.current_stream(x.device).cuda_stream) if x.is_cuda else 0
    if router_logits is not None:
        layer(x, router_logits, out=out, stream=stream)
    else:
        layer(x, topk_ids=topk_ids, topk_weights=topk_weights, out=out, stream=stream)


@torch.library.custom_op("moeforge::moe_forward", mutates_args=())
def moe_forward(x: torch.Tensor, router_logits: Optional[torch.Tensor], topk_ids: Optional[torch.Tensor],
                topk_weights: Optional[torch.Tensor], handle: int) -> torch.Tensor:
    """out [T, H] = layer[handle](x, router_logits | topk_ids + topk_weights), on the current stream."""
    layer = get_layer(handle)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _run(layer, out, x, router_logits, topk_ids, topk_weights)
    return out


@torch.library.register_fake("moeforge::moe_forward")
def _moe_forward_fake(x, router_logits, topk_ids, topk_weights, handle):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("moeforge::moe_forward_out", mutates_args=("out",))
def moe_forward_out(out: torch.Tensor, x: torch.Tensor, router_logits: Optional[torch.Tensor],
                    topk_ids: Optional[torch.Tensor], topk_weights: Optional[torch.Tensor], handle: int) -> None:
    """As moe_forward, writing into ``out`` (contiguous [T, H], x's dtype, not overlapping x)."""
    _run(get_layer(handle), out, x, router_logits, topk_ids, topk_weights)


@torch.library.register_fake("moeforge::moe_forward_out")
def _moe_forward_out_fake(out, x, router_logits, topk_ids, topk_weights, handle):
    return None


class MoeModule(torch.nn.Module):
    """A MoeLayer as an ``nn.Module``: ``forward(x, router_logits)`` or
    ``forward(x, topk_ids=..., topk_weights=...)`` through ``torch.ops.moeforge.moe_forward``
    (so it compiles and graph-captures). Parameters live inside moeforge, not in the module."""

    def __init__(self, layer: MoeLayer):
        super().__init__()
        self.layer = layer
        self.handle = register(layer)
        self._finalizer = weakref.finalize(self, unregister, self.handle)

    def forward(self, x: torch.Tensor, router_logits: Optional[torch.Tensor] = None, *,
                topk_ids: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        return torch.ops.moeforge.moe_forward(x, router_logits, topk_ids, topk_weights, self.handle)

    def extra_repr(self) -> str:
        return repr(self.layer)


# --------------------------------------------------------------------------------------
# vLLM drop-in.
_ACTIVATIONS = {"silu": "swiglu"}


class _Cached:
    __slots__ = ("refs", "versions", "layer", "handle")


_cache: Dict[Tuple, _Cached] = {}
_cache_lock = threading.Lock()


def _layer_for(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk: int,
               w1_bias: Optional[torch.Tensor], w2_bias: Optional[torch.Tensor], backend: str) -> int:
    """The handle of the moeforge layer made from these weight tensors (built once, cached by
    tensor identity; rebuilt if a weight tensor was modified in place)."""
    tensors = (w1, w2, w1_bias, w2_bias)
    key = tuple(id(t) for t in tensors) + (topk, hidden_states.dtype, str(hidden_states.device), backend)
    versions = tuple(None if t is None else (t._version, t.data_ptr()) for t in tensors)
    with _cache_lock:
        c = _cache.get(key)
        if c is not None and all((r is None and t is None) or (r is not None and r() is t)
                                 for r, t in zip(c.refs, tensors)) and c.versions == versions:
            return c.handle
    if w1.dim() != 3 or w2.dim() != 3:
        raise InvalidArgumentError(f"w1: expected w1 [E, 2I, H] and w2 [E, H, I], got {list(w1.shape)} and "
                                   f"{list(w2.shape)}", "invalid argument", 2, argument="w1")
    E, two_i, H = w1.shape
    I = two_i // 2
    if two_i % 2 or tuple(w2.shape) != (E, H, I):
        raise InvalidArgumentError(f"w2: expected [{E}, {H}, {I}] to match w1 {list(w1.shape)}, got {list(w2.shape)}",
                                   "invalid argument", 2, argument="w2")
    fmt = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(w1.dtype, "bf16")
    act_fmt = {torch.float16: "fp16"}.get(hidden_states.dtype, "bf16")
    spec = MoeSpec(name="vllm-fused-experts", num_experts=E, hidden=H, intermediate=I, topk=topk,
                   expert_bias=w1_bias is not None, weight_format=fmt, activation_format=act_fmt)
    # vLLM stacks [gate; up] along w1's rows (SiluAndMul: silu(x[:, :I]) * x[:, I:]): the
    # moeforge W13 layout exactly, so experts are copied as they are.
    w1c, w2c = w1.detach().contiguous().cpu(), w2.detach().contiguous().cpu()
    b13 = b2 = None
    if w1_bias is not None:
        b13 = list(w1_bias.detach().float().contiguous().cpu())
        b2 = list(w2_bias.detach().float().contiguous().cpu())
    weights = Weights.from_experts(spec, list(w1c), list(w2c), b13, b2)
    device = (hidden_states.device.index or 0) if hidden_states.is_cuda else 0
    chosen = backend if hidden_states.is_cuda else "cpu"
    layer = MoeLayer(spec, weights, backend=chosen, device=device)
    c = _Cached()
    c.refs = tuple(None if t is None else weakref.ref(t) for t in tensors)
    c.versions, c.layer, c.handle = versions, layer, register(layer)
    with _cache_lock:
        old = _cache.pop(key, None)
        _cache[key] = c
    if old is not None:
        unregister(old.handle)
    return c.handle


def clear_fused_experts_cache() -> None:
    """Frees every layer that fused_experts built."""
    with _cache_lock:
        entries = list(_cache.values())
        _cache.clear()
    for c in entries:
        unregister(c.handle)


def fused_experts(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, inplace: bool = False, activation: str = "silu",
                  apply_router_weight_on_input: bool = False, use_fp8_w8a8: bool = False,
                  use_int8_w8a8: bool = False, use_int8_w8a16: bool = False, use_int4_w4a16: bool = False,
                  use_mxfp4_w4a4: bool = False, per_channel_quant: bool = False, global_num_experts: int = -1,
                  expert_map: Optional[torch.Tensor] = None, w1_scale=None, w2_scale=None, w1_zp=None, w2_zp=None,
                  a1_scale=None, a2_scale=None, block_shape=None, w1_bias: Optional[torch.Tensor] = None,
                  w2_bias: Optional[torch.Tensor] = None, *, backend: str = "auto") -> torch.Tensor:
    """vLLM's ``fused_experts`` on moeforge, same argument order.

    hidden_states [T, H] bf16/f16; w1 [E, 2I, H] (rows [0, I) gate, [I, 2I) up, as vLLM
    stacks them); w2 [E, H, I]; topk_weights [T, k] (made float32); topk_ids [T, k] int32/int64.
    ``activation="silu"`` (SwiGLU) only; unquantized bf16/f16 weights only, with optional
    w1_bias [E, 2I] / w2_bias [E, H]. The first call for a set of weight tensors builds a
    moeforge layer (a host copy of the weights, then the backend's upload), cached by
    tensor identity; later calls only launch. Returns hidden_states itself when inplace.
    """
    unsupported = {
        "apply_router_weight_on_input": apply_router_weight_on_input, "use_fp8_w8a8": use_fp8_w8a8,
        "use_int8_w8a8": use_int8_w8a8, "use_int8_w8a16": use_int8_w8a16, "use_int4_w4a16": use_int4_w4a16,
        "use_mxfp4_w4a4": use_mxfp4_w4a4, "per_channel_quant": per_channel_quant,
        "expert_map": expert_map is not None, "w1_scale": w1_scale is not None, "w2_scale": w2_scale is not None,
        "w1_zp": w1_zp is not None, "w2_zp": w2_zp is not None, "a1_scale": a1_scale is not None,
        "a2_scale": a2_scale is not None, "block_shape": block_shape is not None,
    }
    for name, used in unsupported.items():
        if used:
            raise UnsupportedError(f"fused_experts: {name} is not supported by moeforge's drop-in yet",
                                   "unsupported", 3)
    if activation not in _ACTIVATIONS:
        raise UnsupportedError(f"fused_experts: activation '{activation}' is not supported (expected 'silu')",
                               "unsupported", 3)
    if global_num_experts not in (-1, w1.shape[0]):
        raise UnsupportedError("fused_experts: global_num_experts != w1.shape[0] (expert parallelism) is not "
                               "supported", "unsupported", 3)
    if (w1_bias is None) != (w2_bias is None):
        raise InvalidArgumentError("w1_bias: expected w1_bias and w2_bias together", "invalid argument", 2,
                                   argument="w1_bias" if w1_bias is None else "w2_bias")
    handle = _layer_for(hidden_states, w1, w2, int(topk_ids.shape[1]), w1_bias, w2_bias, backend)
    ids = topk_ids if topk_ids.dtype in (torch.int32, torch.int64) else topk_ids.to(torch.int32)
    out = torch.ops.moeforge.moe_forward(hidden_states, None, ids.contiguous(),
                                         topk_weights.to(torch.float32).contiguous(), handle)
    if inplace:
        hidden_states.copy_(out)
        return hidden_states
    return out


__all__ = ["register", "unregister", "get_layer", "moe_forward", "moe_forward_out", "MoeModule", "fused_experts",
           "clear_fused_experts_cache"]
