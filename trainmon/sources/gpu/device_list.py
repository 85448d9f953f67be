"""The GPU source's device list: the GPUs NVML sees and their MIG devices opened (handle, identity, GPM buffers),
a device lost when NVML says it fell off the bus, and opened again every few seconds.

The list holds the GPUs (id = NVML index) first, then their MIG devices numbered on from the GPU count (see
`trainmon.sources.gpu.devices`). Handles are looked up once here and cached;
`trainmon.sources.gpu.gpu_source` reads through
them each tick and hands a `DeviceLost` back to `DeviceList.lose`.
"""

from __future__ import annotations

import logging
from typing import Any

from trainmon.metrics import GPU, MIB
from trainmon.sources.base import Source
from trainmon.sources.gpu.devices import Device, Mig
from trainmon.sources.gpu.gpm import GpmReader
from trainmon.sources.gpu.nvml import FAIL, DeviceLost, NvmlBinding, as_str

log = logging.getLogger("trainmon.gpu")

LOST_PROBE_INTERVAL_S = 5.0


class DeviceList:
    """The devices of one binding; n/a reasons go to ``source`` (the GPU source), GPM buffers through ``gpm``."""

    def __init__(self, binding: NvmlBinding, source: Source, gpm: GpmReader) -> None:
        self._binding = binding
        self._call = binding.call
        self._source = source
        self._gpm = gpm
        self.devices: list[Device] = []  # the GPUs (id = NVML index), then their MIG devices
        self.gpu_count = 0  # how many of them are GPUs

    # ------------------------------------------------------------------ opening

    def enumerate(self, count: int, now: float) -> None:
        """(Re)build the list for ``count`` GPUs: every device opened afresh, the old ones' GPM buffers freed."""
        for d in self.devices:
            self._gpm.free(d)
        self._source.clear_na_under(GPU.prefix)
        gpus = [self._open_device(i, now) for i in range(count)]
        migs: list[Device] = []
        for gpu in gpus:
            for slot in self._mig_slots(gpu, now):
                mig = self._open_mig(gpu, slot, count + len(migs), now)
                if mig is not None:
                    migs.append(mig)
        self.devices = gpus + migs
        self.gpu_count = count

    def free_all(self) -> None:
        """Free every device's GPM buffers (at close)."""
        for d in self.devices:
            self._gpm.free(d)

    def _open_device(self, index: int, now: float) -> Device:
        d = Device(index, None)
        try:
            self._open_handle(d)
        except DeviceLost as e:
            self.lose(d, e.reason, now)
        if d.handle is None and d.lost is None:
            # Without a handle nothing can be read: treated like a lost GPU, opened again every few seconds.
            self.lose(d, self._source.clear_na(d.prefix + "handle") or "no device handle", now)
        return d

    def _mig_slots(self, gpu: Device, now: float) -> range:
        """The MIG indices to look at on a GPU in MIG mode (none for other GPUs); marks the GPU as in MIG mode."""
        if gpu.handle is None or gpu.lost is not None:
            return range(0)
        try:
            mode = self._call(gpu, "mig_mode", (), gpu.handle, log_level=logging.DEBUG)
            if mode is FAIL or not mode or int(mode[0]) != 1:
                return range(0)
            count = self._call(gpu, "mig_count", (), gpu.handle, log_level=logging.DEBUG)
        except DeviceLost as e:
            self.lose(gpu, e.reason, now)
            return range(0)
        finally:  # no MIG is not a failure: no reason left behind
            self._source.clear_na(gpu.prefix + "mig_mode")
            self._source.clear_na(gpu.prefix + "mig_count")
        gpu.mig_mode = True
        return range(int(count)) if count is not FAIL else range(0)

    def _open_mig(self, gpu: Device, slot: int, index: int, now: float) -> Device | None:
        """MIG device ``slot`` of ``gpu`` as device ``index``, or None where that MIG index holds none."""
        handle = None
        if gpu.handle is not None and gpu.lost is None:
            try:
                handle = self._call(gpu, "mig_handle", (), gpu.handle, slot, not_found=None)
            except DeviceLost as e:
                self.lose(gpu, e.reason, now)
            self._source.clear_na(gpu.prefix + "mig_handle")
        if handle is None or handle is FAIL:
            return None
        gi = self._call(gpu, "gpu_instance", (), handle, log_level=logging.DEBUG)
        ci = self._call(gpu, "compute_instance", (), handle, log_level=logging.DEBUG)
        self._source.clear_na(gpu.prefix + "gpu_instance")
        self._source.clear_na(gpu.prefix + "compute_instance")
        d = Device(index, None, Mig(gpu.index, slot, None if gi is FAIL else int(gi), None if ci is FAIL else int(ci)))
        try:
            self._identify(d, handle)
        except DeviceLost as e:
            self.lose(d, e.reason, now)
        return d

    def _open_handle(self, d: Device) -> None:
        handle = self._call(d, "handle", (), d.index)
        if handle is FAIL:
            return
        self._identify(d, handle)

    def _identify(self, d: Device, handle: Any) -> None:
        d.handle = handle
        name = self._call(d, "name", (), handle)
        d.name = name if isinstance(name, str) else ("" if name is FAIL else as_str(name))
        uuid = self._call(d, "uuid", (), handle)
        d.uuid = uuid if isinstance(uuid, str) else ("" if uuid is FAIL else as_str(uuid))
        mem = self._call(d, "memory", (d.keys["mem_total_mb"],), handle)
        if mem is not FAIL:
            d.mem_total_mb = mem.total / MIB
        if d.mig is not None:
            d.gpm_status = "not read per MIG device (the GPU's own GPM figures cover all its MIG devices)"
        else:
            self._gpm.open(d)

    # ------------------------------------------------------------------ lost devices

    def lose(self, d: Device, reason: str, now: float) -> None:
        """``d`` is lost for ``reason``: its series n/a, logged once, probed again from ``now`` on."""
        d.lost = reason
        d.lost_probe_t = now
        for s in d.series:
            self._source.na(s, reason)
        self._binding.log_once(d.prefix.rstrip("."), reason, logging.WARNING)

    def retry_lost(self, pos: int, d: Device, now: float) -> Device:
        """A lost device is opened afresh every few seconds; a dead GPU can make each call slow. A MIG device
        is opened again through its GPU once that answers (GPUs come first in the list: retried first)."""
        if now - d.lost_probe_t < LOST_PROBE_INTERVAL_S:
            return d
        self._gpm.free(d)
        if d.mig is not None:
            gpu = self.devices[d.mig.parent]
            fresh = self._open_mig(gpu, d.mig.slot, d.index, now) if gpu.lost is None else None
            if fresh is None:
                if gpu.lost is None:  # its GPU answers, but holds no MIG device there any more (reconfigured)
                    self.lose(d, "MIG device gone: its GPU answers, this MIG index holds none", now)
                d.lost_probe_t = now
                return d
        else:
            fresh = self._open_device(d.index, now)
            fresh.mig_mode = d.mig_mode
        self.devices[pos] = fresh
        if fresh.lost is None:
            log.warning("gpu.%d answers again", d.index)
            for s in d.series:
                if self._source.na_reason(s) == d.lost:
                    self._source.clear_na(s)
        return fresh
