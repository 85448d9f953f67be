"""The feeds a screen reads from: the :class:`Feed` protocol, the live Monitor (:class:`LiveFeed`) and a replayed
recording (:class:`ReplayFeed`)."""

from trainmon.view.feeds.live import LiveFeed, MonitorLike
from trainmon.view.feeds.protocol import Feed, VerdictPoint, clip_points
from trainmon.view.feeds.replay import ReplayClock, ReplayFeed, status_lines

__all__ = [
    "Feed",
    "LiveFeed",
    "MonitorLike",
    "ReplayClock",
    "ReplayFeed",
    "VerdictPoint",
    "clip_points",
    "status_lines",
]
