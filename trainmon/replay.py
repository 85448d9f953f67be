"""Kept for `trainmon.cli`; the feeds live in trainmon.view.feeds."""

from trainmon.view.feeds.replay import ReplayClock, ReplayFeed, status_lines

__all__ = ["ReplayClock", "ReplayFeed", "status_lines"]
