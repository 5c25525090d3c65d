"""Framework plumbing for MoeLayer calls: DLPack in, output in the caller's framework.

Inputs go to the C++ core as DLPack arrays through nanobind (zero-copy). Only
this module knows about frameworks, and it imports none of them unless the
caller's array comes from it.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

from . import _core
from .errors import InvalidArgumentError, UnsupportedError

_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_CUDA_MANAGED = 1, 2, 3, 13


def _framework(a: Any) -> str:
    mod = type(a).__module__.split(".")[0]
    if mod in ("torch", "numpy", "cupy", "jax", "jaxlib"):
        return "jax" if mod == "jaxlib" else mod
    return "other"


def device_of(a: Any) -> Tuple[str, int]:
    """('cpu', 0) or ('cuda', ordinal) of a DLPack array."""
    if isinstance(a, np.ndarray):
        return ("cpu", 0)
    if hasattr(a, "__dlpack_device__"):
        kind, index = a.__dlpack_device__()
        kind = int(kind)
        if kind in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            return ("cpu", 0)
        if kind in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
            return ("cuda", int(index))
        return (f"dlpack-device-{kind}", int(index))
    return ("cpu", 0)


def to_core(a: Any, name: str) -> Any:
    """What the C++ core accepts for ``a`` (still zero-copy)."""
    if a is None:
        raise InvalidArgumentError(f"{name}: expected an array, got None", "invalid argument", 2, argument=name)
    fw = _framework(a)
    if fw == "numpy":
        if a.dtype.name == "bfloat16":  # ml_dtypes.bfloat16: no DLPack code in NumPy; same bits as uint16
            return _core._reinterpret_bf16(a.view(np.uint16))
        return a
    if fw == "torch":
        return a.detach() if a.requires_grad else a
    if hasattr(a, "__dlpack__"):
        return a
    if isinstance(a, (list, tuple)) or np.isscalar(a):
        raise InvalidArgumentError(
            f"{name}: expected a DLPack array (NumPy, torch, CuPy, JAX), got {type(a).__name__}",
            "invalid argument", 2, argument=name)
    return a


def current_stream(a: Any) -> int:
    """The caller's current CUDA stream for ``a`` (0 on the CPU or when unknown)."""
    if device_of(a)[0] != "cuda":
        return 0
    fw = _framework(a)
    if fw == "torch":
        import torch

        return int(torch.cuda.current_stream(a.device).cuda_stream)
    if fw == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    # JAX and others do not expose a current stream: the legacy default stream,
    # which waits for (and is waited on by) every blocking stream.
    return 0


def empty_like(x: Any) -> Tuple[Any, Any]:
    """(out for the caller, out for the core): an uninitialized array shaped and typed as x,
    in x's framework and on x's device."""
    fw = _framework(x)
    if fw == "numpy":
        out = np.empty(x.shape, dtype=x.dtype)
        return out, to_core(out, "out")
    if fw == "torch":
        import torch

        out = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
        return out, out
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(x.device.id):
            out = cupy.empty(x.shape, dtype=x.dtype)
        return out, out
    kind, index = device_of(x)
    if fw == "jax":
        # JAX arrays are immutable: the result is made in another framework and handed
        # to JAX through DLPack (zero-copy on the GPU; one copy on the CPU).
        import jax

        if kind == "cpu":
            buf = np.empty(tuple(x.shape), dtype=np.dtype(x.dtype))
            return _Deferred(buf, lambda b: jax.numpy.asarray(b)), to_core(buf, "out")
        buf = _cuda_buffer(tuple(x.shape), str(x.dtype), index)
        return _Deferred(buf, lambda b: jax.dlpack.from_dlpack(b)), buf
    raise UnsupportedError(
        f"out: cannot allocate an output like a {type(x).__module__}.{type(x).__name__}; pass out=",
        "unsupported", 3)


class _Deferred:
    """An output that becomes the caller's type after the call (JAX)."""

    def __init__(self, buf: Any, finish: Any):
        self.buf, self.finish = buf, finish


def _cuda_buffer(shape: Tuple[int, ...], dtype: str, index: int) -> Any:
    if "torch" in sys.modules or _importable("torch"):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{index}")
    if _importable("cupy"):
        import cupy

        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=dtype)
    raise UnsupportedError("out: a CUDA output for a JAX input needs torch or CuPy installed, or pass out=",
                           "unsupported", 3)


def _importable(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def finish(out: Any) -> Any:
    return out.finish(out.buf) if isinstance(out, _Deferred) else out


def optional(a: Optional[Any], name: str) -> Optional[Any]:
    return None if a is None else to_core(a, name)
