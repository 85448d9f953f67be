"""Reading a window's rows off its step table in C-level slices: a byte mask as runs of rows, a column gathered
over those runs, and the stride of an even sample of them (so a long window is never copied whole)."""

from __future__ import annotations

from array import array

MAX_DETAIL = 1024  # the step-time quantiles of a longer window come from an even sample of at most this many

# Sampling strides are primes, so a loop that is slow every 10th, 50th or 100th step is sampled at every phase.
_PRIMES = (
    2,
    3,
    5,
    7,
    11,
    13,
    17,
    19,
    23,
    29,
    31,
    37,
    41,
    43,
    47,
    53,
    59,
    61,
    67,
    71,
    73,
    79,
    83,
    89,
    97,
    101,
    127,
    151,
    199,
    251,
    307,
    401,
    503,
    601,
    701,
    809,
    907,
    1009,
)


def sample_stride(m: int) -> int:
    """The stride of an even sample of at most MAX_DETAIL of ``m`` rows (1: every row)."""
    need = -(-m // MAX_DETAIL)
    if need <= 1:
        return 1
    return next((p for p in _PRIMES if p >= need), need)


def segments_of(mask: bytes) -> list[tuple[int, int]]:
    """The runs of ones in a 0/1 byte mask as [start, stop) pairs (warm-up and loader switches are rare,
    so a window's steady steps are a few long runs)."""
    out = []
    pos, n = 0, len(mask)
    while pos < n:
        a = mask.find(1, pos)
        if a < 0:
            break
        b = mask.find(0, a)
        b = n if b < 0 else b
        out.append((a, b))
        pos = b
    return out


def gather(col: array[float], base: int, segments: list[tuple[int, int]]) -> array[float]:
    """The rows of ``col`` in each [a, b) of ``segments`` from ``base`` on, one array (a slice when one segment)."""
    if len(segments) == 1:
        a, b = segments[0]
        return col[base + a : base + b]
    out: array[float] = array(col.typecode)
    for a, b in segments:
        out += col[base + a : base + b]
    return out
