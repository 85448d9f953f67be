"""trainmon's callback given to each ``transformers.Trainer`` and Lightning ``Trainer`` the job makes.

Called by the agent (``trainmon.agent._frameworks``) right after a trainer's ``__init__``, so only ever once that
framework is imported. ``TRAINMON_NO_AUTOCALLBACK=1`` turns it off; a callback the user passed takes its place.
"""

from __future__ import annotations

from typing import Any


def add_callback(framework: str, trainer: Any) -> bool:
    """Add the framework's TrainmonCallback to ``trainer`` unless it has one; True when one was added."""
    if framework == "transformers":
        from trainmon.integrations import huggingface

        return huggingface.add_to(trainer)
    if framework == "lightning":
        from trainmon.integrations import lightning

        return lightning.add_to(trainer)
    return False
