"""A meta-path finder that runs a callback right after a watched module's body has executed.

The agent must never import torch or a training framework itself; it learns of them when the job imports
them. Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType


class AfterImport:
    """Finds nothing itself: for a name in ``names`` it asks the other finders for the spec and wraps that one
    loader's ``exec_module`` so ``callback(name)`` runs once the module's body has. ``once``: the finder leaves
    ``sys.meta_path`` at its first hit. A failing callback is swallowed: the user's import always completes."""

    def __init__(self, names: Collection[str], callback: Callable[[str], None], *, once: bool = False) -> None:
        self.names = names
        self.callback = callback
        self.once = once

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original_exec = getattr(loader, "exec_module", None)
        if loader is None or original_exec is None:
            return None
        callback, once = self.callback, self.once

        def exec_module(module: Any) -> None:
            original_exec(module)
            try:
                if once and self in sys.meta_path:
                    sys.meta_path.remove(self)
                callback(fullname)
            except Exception:
                pass

        # Wraps this one loader instance's method, so the callback follows the module's body.
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
