"""Process settings the broker's service maker applies."""

from __future__ import annotations

import gc

from broker_core import tap


def test_a_broker_process_collects_garbage_less_often():
    before = gc.get_threshold()
    try:
        tap.tune_gc()
        assert gc.get_threshold() == tap.BROKER_GC_THRESHOLDS
        young, middle, old = tap.BROKER_GC_THRESHOLDS
        assert young > before[0] and young * middle * old > before[0] * before[1] * before[2]
    finally:
        gc.set_threshold(*before)
