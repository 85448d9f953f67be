"""Which trainer drives the loop, and trainmon's callback added to it without a line of the user's code.

When the job constructs a ``transformers.Trainer``, a Lightning ``Trainer`` or an ``accelerate.Accelerator``,
the agent reports that framework and its version (the monitor then words its advice in that framework's own
settings: ``TrainingArguments(dataloader_num_workers=...)`` rather than ``DataLoader(num_workers=...)``). The
most specific one wins: a ``transformers.Trainer`` makes an ``Accelerator`` of its own.

A ``transformers.Trainer`` or Lightning ``Trainer`` also gets trainmon's ``TrainmonCallback`` (optimizer steps
whatever the gradient accumulation, evaluation and checkpoint spans marked, not inferred), once, unless the
user passed one or set ``TRAINMON_NO_AUTOCALLBACK=1``.

Nothing here imports a framework: the classes are patched when their module has been imported (at ``attach()``
if it already was, else by a ``sys.meta_path`` finder right after the module's body has run).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmon.agent._import_hook import AfterImport
from trainmon.agent._sender import debug

if TYPE_CHECKING:
    pass

NO_AUTO_ENV = "TRAINMON_NO_AUTOCALLBACK"
_TRUE = {"1", "true", "yes", "on"}
# module → (class, framework, the package its version is read from)
TARGETS: dict[str, tuple[str, str, str]] = {
    "transformers.trainer": ("Trainer", "transformers", "transformers"),
    "lightning.pytorch.trainer.trainer": ("Trainer", "lightning", "lightning"),
    "pytorch_lightning.trainer.trainer": ("Trainer", "lightning", "pytorch_lightning"),
    "accelerate.accelerator": ("Accelerator", "accelerate", "accelerate"),
}
SPECIFIC = {"accelerate": 1, "lightning": 2, "transformers": 3}  # which one drives the loop when several are made
# Where the callbacks live. Imported by name, and only once the framework is imported and one of its trainers
# constructed: the agent itself imports nothing of trainmon but the wire protocol.
AUTO_MODULE = "trainmon.integrations._auto"


def auto_callback_enabled() -> bool:
    return os.environ.get(NO_AUTO_ENV, "").strip().lower() not in _TRUE


def version_of(package: str) -> str | None:
    module = sys.modules.get(package)
    version = getattr(module, "__version__", None)
    return str(version)[:40] if version is not None else None


class Frameworks:
    """Patches the trainers' ``__init__`` (``install``) and undoes it (``uninstall``); ``emit`` takes the
    ``framework`` control message."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.current: str | None = None
        self.lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self._patched: set[str] = set()
        self._finder: AfterImport | None = None

    def install(self) -> None:
        with self.lock:
            for module in TARGETS:
                if module in sys.modules:
                    self._patch_module(module)
            if self._finder is None and len(self._patched) < len(TARGETS):
                self._finder = AfterImport(TARGETS, self.imported)
                sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        with self.lock:
            if self._finder is not None:
                try:
                    sys.meta_path.remove(self._finder)
                except ValueError:
                    pass
                self._finder = None
            while self._undo:
                try:
                    self._undo.pop()()
                except Exception:
                    pass
            self._patched.clear()

    def imported(self, module: str) -> None:
        """The finder's callback: ``module``'s body has just run."""
        with self.lock:
            if self._finder is not None:
                self._patch_module(module)

    def _patch_module(self, module: str) -> None:
        if module in self._patched:
            return
        self._patched.add(module)
        cls_name, framework, package = TARGETS[module]
        cls = getattr(sys.modules.get(module), cls_name, None)
        init = cls.__dict__.get("__init__") if isinstance(cls, type) else None
        if cls is None or init is None or hasattr(init, "__trainmon_original__"):
            return
        frameworks = self

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            init(obj, *args, **kwargs)
            try:
                frameworks.constructed(framework, package, obj)
            except Exception as exc:
                debug(f"{framework} seen, not handled: {exc!r}")

        __init__.__trainmon_original__ = init  # type: ignore[attr-defined]
        __init__.__wrapped__ = init  # type: ignore[attr-defined]
        __init__.__doc__ = init.__doc__
        cls.__init__ = __init__

        def undo() -> None:
            if cls.__dict__.get("__init__") is __init__:
                cls.__init__ = init

        self._undo.append(undo)

    def constructed(self, framework: str, package: str, obj: Any) -> None:
        """A trainer (or an Accelerator) of ``framework`` was made: report it, give it the callback."""
        self.seen(framework, package)
        if framework in ("transformers", "lightning") and auto_callback_enabled():
            importlib.import_module(AUTO_MODULE).add_callback(framework, obj)

    def seen(self, framework: str, package: str | None = None) -> None:
        """Report ``framework`` as the one driving the loop unless a more specific one was seen."""
        current = self.current
        if current is not None and SPECIFIC.get(current, 0) >= SPECIFIC.get(framework, 0):
            return
        self.current = framework
        self.emit({"framework": {"name": framework, "version": version_of(package or framework)}})
