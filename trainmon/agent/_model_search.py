"""Where the model is, for agent/_outside.py to time it: the root modules and the optimizers of the training.

Looked for first among what the training thread's frames reach, then (once per process) among the collector's
objects; a root is a module no other module found holds (a DDP or ``torch.compile`` wrapper, not what it wraps).
"""

from __future__ import annotations

import gc
from types import CodeType, MethodType
from typing import Any

from trainmon.agent import _hot

MAX_ROOTS = 16  # modules timed: those holding the optimizers' parameters first, then other ones with parameters


def find_targets(torch: Any, everywhere: bool = True) -> tuple[list[Any], list[Any]]:
    """(root modules to time, optimizers). A root is a module no other module found holds (a DDP or compiled wrapper,
    not what it wraps); those holding an optimizer's parameters come first, then other roots with parameters (a
    teacher, a frozen encoder: model compute too). Looked for first in what the training thread's frames reach (a few
    hundred objects: a loop's locals, its script's globals, a trainer's attributes), and only where that finds no
    module holding an optimizer's parameters in the collector's objects (hundreds of thousands once torch is imported:
    a tenth of a second or more, holding the interpreter's lock); not there unless ``everywhere``."""
    module_t, optimizer_t = torch.nn.Module, torch.optim.Optimizer
    for search in (_reachable, _collected) if everywhere else (_reachable,):
        modules, optimizers = search(module_t, optimizer_t)
        roots = _roots(modules, optimizers, whole=search is _reachable)
        if roots:
            return roots, optimizers
    return [], []


STACK_DEPTH = 4  # attribute and item levels followed from a frame's locals (Lightning: self.trainer.strategy.model)
STACK_OBJECTS = 20_000  # objects looked at, at most
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, MethodType, CodeType)


def _reachable(module_t: type, optimizer_t: type) -> tuple[list[Any], list[Any]]:
    """Modules and optimizers reachable from the training thread's frames: their locals, the globals of the script
    running as ``__main__``, then attributes, dict values and list items, STACK_DEPTH levels deep. Never a module's
    attributes (its submodules are its own) nor a Python module's but ``__main__``'s."""
    import sys
    import types

    frame = sys._current_frames().get(_hot._train[0])
    level: list[Any] = []
    while frame is not None:
        level.extend(frame.f_locals.values())
        frame = frame.f_back
    main = sys.modules.get("__main__")
    if main is not None:
        level.extend(vars(main).values())
    modules: list[Any] = []
    optimizers: list[Any] = []
    seen: set[int] = set()
    for _ in range(STACK_DEPTH + 1):
        deeper: list[Any] = []
        for obj in level:
            if id(obj) in seen or len(seen) >= STACK_OBJECTS:
                continue
            seen.add(id(obj))
            cls = type(obj)  # never obj.__class__: a proxy object may compute it
            if issubclass(cls, module_t):
                modules.append(obj)
            elif issubclass(cls, optimizer_t):
                optimizers.append(obj)
            elif issubclass(cls, dict):
                deeper.extend(list(obj.values())[:256])
            elif issubclass(cls, list | tuple | set | frozenset):
                deeper.extend(list(obj)[:256])
            elif not issubclass(cls, _LEAVES) and not isinstance(obj, types.ModuleType | types.FunctionType):
                own = getattr(obj, "__dict__", None)  # a plain object's attributes (a trainer, a config)
                if type(own) is dict:
                    deeper.extend(list(own.values())[:256])
        level = deeper
    return modules, optimizers


def _collected(module_t: type, optimizer_t: type) -> tuple[list[Any], list[Any]]:
    """Every module and optimizer the garbage collector tracks: its objects filtered by their type at C speed (the
    classes of both kinds known now, in a set), with no Python code run per object."""
    from itertools import compress

    kinds = _subclasses(module_t) | _subclasses(optimizer_t)
    objects = gc.get_objects()
    found = list(compress(objects, map(kinds.__contains__, map(type, objects))))
    del objects
    modules = [obj for obj in found if issubclass(type(obj), module_t)]
    return modules, [obj for obj in found if issubclass(type(obj), optimizer_t)]


def _subclasses(cls: type) -> set[type]:
    """``cls`` and every class derived from it, however far down."""
    out = {cls}
    pending = [cls]
    while pending:
        sub: type
        for sub in type.__subclasses__(pending.pop()):
            if sub not in out:
                out.add(sub)
                pending.append(sub)
    return out


def _roots(modules: list[Any], optimizers: list[Any], whole: bool = False) -> list[Any]:
    """The roots among ``modules`` (held by none of the others, however deep), those holding an optimizer's parameters
    first; none where no root holds any, or (``whole``) where the roots hold some of an optimizer's parameters but
    not all: what a frame reached may be a block of the model whose forward the thread is in, not the model."""
    if not optimizers or not modules:
        return []
    held = {id(sub) for m in modules for sub in m.modules() if sub is not m}
    per_optimizer = [{id(p) for group in opt.param_groups for p in group.get("params", ())} for opt in optimizers]
    trained = set().union(*per_optimizer)
    owned: set[int] = set()
    owners: list[Any] = []
    others: list[Any] = []
    for m in modules:
        if id(m) in held:
            continue
        params = {id(p) for p in m.parameters()}
        if params:
            (owners if trained.intersection(params) else others).append(m)
            owned |= params
    if whole and any(ids & owned and ids - owned for ids in per_optimizer):
        return []
    return (owners + others)[:MAX_ROOTS] if owners else []
