"""``import pynvml`` inside a competitor under benchmark (nvitop, glances): NVML answered by the fake of
testsupport/fake_pynvml.py over the same simulated GPUs and processes that trainmon sees (benchmarks/_fake_gpus.py).

The binding's own names come first where it is installed (nvitop reads its constants and structures at import), then
the fake's constants, structures and errors, then the fake's NVML calls; a call the fake does not answer raises
NVMLError_NotSupported, as a driver does for a query the GPU lacks. ``_nvmlGetFunctionPointer`` is absent, so nvitop
calls the functions below instead of the library's symbols. Set by monitor_cost.py through the environment:
``TM_BENCH_GPUS`` (how many GPUs) and ``TM_BENCH_TRACK`` (a file of the pids that run on them).
"""

from __future__ import annotations

import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys
from typing import Any as _Any

from benchmarks._fake_gpus import fake_gpus as _fake_gpus
from benchmarks._fake_gpus import feed_every as _feed_every
from benchmarks._fake_gpus import feeder as _feeder
from testsupport import fake_pynvml as _fake_module

_here = _os.path.dirname(_os.path.abspath(__file__))
_spec = _machinery.PathFinder.find_spec("pynvml", [p for p in _sys.path if _os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _real = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_real)
    globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
    _real_functions = [k for k, v in vars(_real).items() if k.startswith("nvml") and callable(v)]
else:
    _real_functions = []

globals().update({k: v for k, v in vars(_fake_module).items() if k.startswith(_fake_module._EXPORTED)})
NVMLError = _fake_module.NVMLError
NVML_ERROR_NOT_SUPPORTED = _fake_module.NVML_ERROR_NOT_SUPPORTED
globals().update({k: v for k, v in vars(_fake_module).items() if k.startswith("NVMLError_")})

_track = _os.environ.get("TM_BENCH_TRACK")
with open(_track or _os.devnull) as _fh:
    _pids = [int(p) for p in _fh.read().split()]
_fake, _owners = _fake_gpus(int(_os.environ.get("TM_BENCH_GPUS", "8")), _pids)
_feed_every(_feeder(_fake, _owners), 1.0)


def _not_supported(name: str) -> _Any:
    def call(*args: _Any, **kwargs: _Any) -> _Any:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    call.__name__ = name
    return call


for _name in _real_functions:
    globals()[_name] = _not_supported(_name)


def _answered(name: str, call: _Any) -> _Any:
    # The fake models the queries trainmon makes; an argument it has no answer for (a clock type, a sensor)
    # is NotSupported, as from a driver, instead of a KeyError out of the fake.
    def answer(*args: _Any, **kwargs: _Any) -> _Any:
        try:
            return call(*args, **kwargs)
        except (KeyError, IndexError, ValueError):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED) from None

    answer.__name__ = name
    return answer


for _name in dir(type(_fake)):
    if _name.startswith("nvml"):
        globals()[_name] = _answered(_name, getattr(_fake, _name))


def nvmlInitWithFlags(flags: int) -> None:
    _fake.nvmlInit()


def nvmlExceptionClass(code: int) -> type:
    return NVMLError._valClassMapping.get(code, NVMLError)


_nvmlGetFunctionPointer = None


def __getattr__(name: str) -> _Any:
    if name.startswith("nvml"):
        return _not_supported(name)
    raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
