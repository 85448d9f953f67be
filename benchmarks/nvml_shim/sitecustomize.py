"""Loaded first by a competitor under benchmark (PYTHONPATH): glances loads libnvidia-ml.so.1 before it imports
pynvml, and turns its GPU plugin off where that library is missing. Here the library stands for the fake of
``pynvml.py`` beside this file, so the load answers with an empty stand-in and glances goes on to ``import pynvml``."""

from __future__ import annotations

import ctypes

_CDLL = ctypes.CDLL


class _NvmlLibrary:
    def __init__(self, name: str, *args: object, **kwargs: object) -> None:
        self._name = name


def _cdll(name: str | None, *args: object, **kwargs: object) -> object:
    if name and str(name).startswith("libnvidia-ml.so"):
        return _NvmlLibrary(str(name))
    return _CDLL(name, *args, **kwargs)


ctypes.CDLL = _cdll  # type: ignore[misc,assignment]
