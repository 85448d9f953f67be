"""Time series and runs on one monotonic clock."""

from trainmon.store.run import LoaderInfo, Run
from trainmon.store.series import Series
from trainmon.store.steps import Steps
from trainmon.store.store import Ingest, Store

__all__ = ["Ingest", "LoaderInfo", "Run", "Series", "Steps", "Store"]
