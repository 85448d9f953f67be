"""What the screen shows, computed headless: the shared time axis, every pane's series and its values at the cursor.

The TUI (``trainmon.tui``) only draws a :class:`Frame`. A Frame is built from a :class:`Feed` (the live Monitor,
or a recording being replayed) and a :class:`ViewState` (window, pause, cursor) by a :class:`FrameBuilder`, under
the store's lock, on any thread. Nothing here imports textual, so all of it is unit-tested without a terminal.

- ``feeds``: the Feed protocol, :class:`LiveFeed` and :class:`ReplayFeed` (with its playback clock)
- ``state``: :class:`ViewState`, where the screen looks
- ``frames``: the Frame and the data each pane draws
- ``resample``: series and steps on the shared time axis, values at an instant
- ``extract``: each pane's data read out of the store
- ``axis``, ``timefmt``: tick labels and the cursor's clock
- ``build``: :class:`FrameBuilder` and ``build_frame``, which put it together
"""

from trainmon.view.feeds import (
    Feed,
    LiveFeed,
    MonitorLike,
    ReplayClock,
    ReplayFeed,
    VerdictPoint,
    clip_points,
    status_lines,
)
from trainmon.view.frame_builder import FrameBuilder, build_frame
from trainmon.view.frames import Frame, Layout, ProcRow, RunView, VerdictView
from trainmon.view.resample import run_values
from trainmon.view.timefmt import fmt_elapsed
from trainmon.view.viewport import WINDOWS_S, ViewState

__all__ = [
    "WINDOWS_S",
    "Feed",
    "Frame",
    "FrameBuilder",
    "Layout",
    "LiveFeed",
    "MonitorLike",
    "ProcRow",
    "ReplayClock",
    "ReplayFeed",
    "RunView",
    "VerdictPoint",
    "VerdictView",
    "ViewState",
    "build_frame",
    "clip_points",
    "fmt_elapsed",
    "run_values",
    "status_lines",
]
