"""Exceptions raised by moeforge, one per C++ ``moeforge::ErrorKind``.

Every class derives from :class:`MoeforgeError` and from the built-in exception a
Python caller would expect, so ``except ValueError`` catches a bad argument::

    InvalidArgumentError  ValueError           .argument: the argument at fault ("x", "spec.topk")
    UnsupportedError      NotImplementedError  a valid request this build, backend or device cannot serve
    DeviceError           RuntimeError         CUDA driver error, missing driver; .cuda_code
    CompileError          RuntimeError         NVRTC failed (the log is in the message)
    CacheError            RuntimeError         the kernel cache refused
    IoError               OSError              checkpoints, JSON records
    InternalError         RuntimeError         a bug in moeforge

Each instance also has ``.kind`` (the C++ kind's name) and ``.exit_code`` (the CLI's).
"""

from __future__ import annotations


class MoeforgeError(Exception):
    """Base class of every error moeforge raises."""

    def __init__(self, message: str, kind: str = "internal", exit_code: int = 10, **attrs):
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code
        for key, value in attrs.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(MoeforgeError, ValueError):
    """A caller's argument is wrong; ``.argument`` names it (the message starts with it)."""

    argument: str = ""


class UnsupportedError(MoeforgeError, NotImplementedError):
    """A valid request that this build, backend or device cannot serve."""


class DeviceError(MoeforgeError, RuntimeError):
    """A CUDA driver error, a lost context or a missing driver; ``.cuda_code`` (0 if none)."""

    cuda_code: int = 0


class CompileError(MoeforgeError, RuntimeError):
    """NVRTC failed to compile a kernel (the log is in the message)."""


class CacheError(MoeforgeError, RuntimeError):
    """The kernel cache refused (permissions, corruption that cannot be rebuilt)."""


class IoError(MoeforgeError, OSError):
    """Files: checkpoints, JSON records."""

    def __init__(self, message: str, kind: str = "io", exit_code: int = 7, **attrs):
        MoeforgeError.__init__(self, message, kind, exit_code, **attrs)


class InternalError(MoeforgeError, RuntimeError):
    """A bug in moeforge."""


__all__ = [
    "MoeforgeError",
    "InvalidArgumentError",
    "UnsupportedError",
    "DeviceError",
    "CompileError",
    "CacheError",
    "IoError",
    "InternalError",
]
