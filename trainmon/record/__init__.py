"""Recording: append-only files of everything the monitor ingested, and reading them back."""

from __future__ import annotations

from trainmon.record.format import RecordingError, replay_into
from trainmon.record.writer import Recorder, RecorderError
from trainmon.store.store import Store

__all__ = ["Recorder", "RecorderError", "RecordingError", "load_recording"]


def load_recording(path: str) -> tuple[Store, list[str]]:
    """Read a recording into an unbounded Store. Raises RecordingError if nothing is readable."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise RecordingError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise RecordingError(f"{path} is a directory, not a recording") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    store = Store(cap=None, series_cap=None)
    warnings: list[str] = []
    replay_into(data, store, warnings)
    return store, warnings
