"""The terminal UI (Textual). It only draws what the headless layer (trainmon.view) computes."""

from __future__ import annotations

from trainmon.tui.app import FrameReady, Job, TrainmonApp

__all__ = ["FrameReady", "Job", "TrainmonApp"]
