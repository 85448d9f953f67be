"""GPM (GPU Performance Monitoring, Hopper and newer) for the GPU source: a GPU's two sample buffers allocated, read
as a pair each tick into its GPM series, and freed.

GPM metrics are rates between two samples, so each GPU keeps two buffers used alternately (``gpu_devices.Gpm``);
the first value comes one tick after the first sample. MIG devices read none of their own: their GPU's figures
cover them.
`trainmon.sources.gpu.gpu_source` calls `GpmReader.read` from each device's reading; opening and freeing come
with the device list (`trainmon.sources.gpu.device_list`).
"""

from __future__ import annotations

import logging
from typing import Any

from trainmon.metrics import GPM_METRIC_IDS
from trainmon.numbers import NAN, is_nan
from trainmon.sources.base import Source
from trainmon.sources.gpu.devices import Device, Gpm
from trainmon.sources.gpu.nvml import FAIL, DeviceLost, NvmlBinding, gpm_reason

# NVML says the two GPM samples must be some time apart; DCGM keeps them >= its update interval.
GPM_MIN_INTERVAL_S = 0.1


class GpmReader:
    """GPM over one binding; n/a reasons go to ``source`` (the GPU source), like those of its other calls."""

    def __init__(self, binding: NvmlBinding, source: Source) -> None:
        self._binding = binding
        self._call = binding.call
        self._source = source

    # ------------------------------------------------------------------ buffers

    def open(self, d: Device) -> None:
        """Allocate a GPU's sample pair where it supports GPM; `d.gpm_status` says "ok" or why not."""
        support = self._call(d, "gpm_support", (), d.handle, log_level=logging.DEBUG)
        if support is FAIL:
            d.gpm_status = gpm_reason(self._source.clear_na(d.prefix + "gpm_support") or "GPM query failed")
            return
        if not getattr(support, "isSupportedDevice", 0):
            d.gpm_status = "not supported on this GPU (GPM needs Hopper or newer)"
            return
        samples: list[Any] = []
        for _ in range(2):
            s = self._call(d, "gpm_alloc", ())
            if s is FAIL:
                self._free_samples(d, samples)
                d.gpm_status = "GPM sample allocation failed: " + (self._source.clear_na(d.prefix + "gpm_alloc") or "?")
                return
            samples.append(s)
        query = self._binding.gpm_query(list(GPM_METRIC_IDS.values()))
        if query is None:
            self._free_samples(d, samples)
            d.gpm_status = "this pynvml binding has no c_nvmlGpmMetricsGet_t"
            return
        d.set_gpm(Gpm(samples, query))
        d.gpm_status = "ok"

    def free(self, d: Device) -> None:
        """Free a device's sample pair, if it has one."""
        if d.gpm is not None:
            self._free_samples(d, d.gpm.samples)
            d.set_gpm(None)

    def _free_samples(self, d: Device, samples: list[Any]) -> None:
        for s in samples:
            try:
                self._call(d, "gpm_free", (), s, log_level=logging.DEBUG)
            except DeviceLost:
                pass

    # ------------------------------------------------------------------ reading

    def read(self, d: Device, g: Gpm, now: float, out: dict[str, float]) -> None:
        """Take this tick's sample and put the metrics between it and the previous one into ``out``."""
        keys = [d.keys[m] for m in GPM_METRIC_IDS]
        if g.have_prev and now - g.prev_t < GPM_MIN_INTERVAL_S:
            self._put(d, g, out)  # too soon for a meaningful pair: repeat the last values
            return
        cur = g.samples[g.cur]
        if self._call(d, "gpm_sample", keys, d.handle, cur) is FAIL:
            g.have_prev = False
            g.values = dict.fromkeys(GPM_METRIC_IDS, NAN)
            if "gpm_sample" in d.skip:
                d.gpm_status = f"GPM sampling failed: {d.skip['gpm_sample']}"
            return
        if g.have_prev:
            g.query.sample1 = g.samples[1 - g.cur]
            g.query.sample2 = cur
            if self._call(d, "gpm_metrics", keys, g.query) is FAIL:
                g.values = dict.fromkeys(GPM_METRIC_IDS, NAN)
            else:
                self._collect(d, g)
        else:
            for s in keys:
                self._source.na(s, "GPM needs two samples: first value next tick")
        g.cur = 1 - g.cur
        g.have_prev = True
        g.prev_t = now
        self._put(d, g, out)

    def _collect(self, d: Device, g: Gpm) -> None:
        for j, metric in enumerate(GPM_METRIC_IDS):
            g.values[metric], reason = self._binding.gpm_result(g.query, j)
            if reason is not None:
                self._source.na(d.keys[metric], reason)
                self._binding.log_once(d.keys[metric], reason)

    def _put(self, d: Device, g: Gpm, out: dict[str, float]) -> None:
        for metric, v in g.values.items():
            if not is_nan(v):
                key = d.keys[metric]
                out[key] = v
                self._source.clear_na(key)
