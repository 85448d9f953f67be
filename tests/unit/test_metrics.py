"""The metric schema: names built and parsed one way, the series index, one throttle table, exports."""

from __future__ import annotations

import pytest

from trainmon.metrics import (
    CPU_CORE,
    DISK,
    FAMILIES,
    GPM_METRIC_IDS,
    GPU,
    GPU_NVML_FIELDS,
    HOST,
    LIMITING_THROTTLE,
    PROC,
    PYSPY,
    THROTTLE_REASONS,
    SeriesIndex,
    limiting_reasons,
)
from trainmon.store.store import Store


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_field_name_round_trips(family):
    ident = "7" if family.numeric_ids else "nvme0n1"
    for field in family.fields:
        assert family.parse(family.key(ident, field)) == (ident, field)


def test_parse_rejects_other_families_and_malformed_names():
    assert GPU.parse("disk.sda.util_pct") is None
    assert GPU.parse("gpu.x.util") is None  # GPU ids are indices
    assert GPU.parse("gpu.0") is None and GPU.parse("gpu..util") is None
    assert GPU.parse("gpu.0.gpm.sm_active") == ("0", "gpm.sm_active")  # fields may hold a dot, ids never do
    assert CPU_CORE.parse("cpu.cores") is None  # a host series, not a core
    assert DISK.parse("disk.dm-0.read_mb_s") == ("dm-0", "read_mb_s")


def test_families_do_not_overlap_and_host_names_belong_to_none():
    for name in HOST:
        assert all(f.parse(name) is None for f in FAMILIES), name
    prefixes = [f.prefix for f in FAMILIES]
    assert not any(a != b and a.startswith(b) for a in prefixes for b in prefixes)


def test_index_lists_ids_in_first_appearance_order_and_numeric_ids_sorted():
    names = ["disk.sdb.util_pct", "gpu.10.util", "disk.sda.util_pct", "gpu.2.util", "gpu.2.power_w", "proc.99.rss_mb"]
    index = SeriesIndex(names)
    assert index.ids(DISK) == ["sdb", "sda"]
    assert index.int_ids(GPU) == [2, 10]  # numerically, not "10" < "2"
    assert index.int_ids(GPU, "power_w") == [2]
    assert index.int_ids(PROC, "rss_mb") == [99] and index.ids(PYSPY) == []


def test_store_rebuilds_its_index_only_when_the_series_set_changes():
    store = Store()
    store.sample(1.0, {GPU.key(0, "util"): 50.0})
    first = store.index()
    store.sample(2.0, {GPU.key(0, "util"): 60.0})
    assert store.index() is first  # same set of series: the cached index
    store.sample(3.0, {GPU.key(1, "util"): 10.0})
    assert store.index() is not first and store.index().int_ids(GPU) == [0, 1]


def test_gpu_fields_split_into_nvml_and_gpm_reads():
    assert set(GPU_NVML_FIELDS) | set(GPM_METRIC_IDS) == set(GPU.fields)
    assert not set(GPU_NVML_FIELDS) & set(GPM_METRIC_IDS)


def test_one_throttle_table_names_limiting_reasons_in_bit_order():
    assert LIMITING_THROTTLE == 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    assert [r.report for r in limiting_reasons(0x1 | 0x40 | 0x4)] == ["sw_power_cap", "hw_thermal"]
    assert [r.short for r in limiting_reasons(0x80 | 0x2)] == ["power brake"]
    assert len({r.bit for r in THROTTLE_REASONS}) == len(THROTTLE_REASONS)


def test_exported_names_follow_prometheus_conventions():
    fields = [*HOST.values(), *(f for family in FAMILIES for f in family.fields.values())]
    exported = [f for f in fields if f.prom is not None]
    assert exported and len({f.prom for f in exported}) == len(exported)
    for f in exported:
        assert f.prom.startswith("trainmon_") and f.help
        if f.unit in ("MiB", "MiB/s"):
            assert "bytes" in f.prom and f.scale == 1024 * 1024, f.prom
