"""Real shapes of served models (C++ ``moeforge::presets``).

>>> import moeforge
>>> moeforge.presets.names()[:2]
['mistral-small-4', 'deepseek-v3']
"""

from __future__ import annotations

from typing import List

from . import _core


def get(name: str) -> "_core.MoeSpec":
    """The MoeSpec of preset ``name``; raises InvalidArgumentError for an unknown name."""
    return _core._presets_get(name)


def names() -> List[str]:
    """Every preset name."""
    return list(_core._presets_names())


__all__ = ["get", "names"]
