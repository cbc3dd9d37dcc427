"""Host constants in pages of their own (`keras_posenc._exact.pages`).

The engine's per-configuration arrays live in one anonymous mapping, so
that a layer Python collects late (Keras's layers are cyclic garbage) pins
no heap, and the mapping goes back to the system with the last array
(issue 47 item 9).
"""

import gc
import mmap
import os
import weakref

import numpy as np
import pytest

from keras_posenc._exact import pages
from keras_posenc._exact.phase_constants import FINE_ROWS, phase_constants, turns_of


def _mapping_of(array):
    """The `mmap.mmap` under `array`'s chain of bases, else `None`."""
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base


SPECS = (((3, 2, 32), np.int32), ((3, 1, 32), np.float32), ((64, 64), np.float32))


def test_arrays_share_one_mapping_in_order_aligned_and_apart():
    arrays = pages.empty_in_own_pages(*SPECS)
    assert [(a.shape, a.dtype) for a in arrays] == [(s, np.dtype(d)) for s, d in SPECS]
    mapping = _mapping_of(arrays[0])
    assert isinstance(mapping, mmap.mmap)
    assert all(_mapping_of(a) is mapping for a in arrays)
    starts = [a.ctypes.data for a in arrays]
    assert all(start % 64 == 0 for start in starts)
    for a, next_start in zip(arrays, [*starts[1:], None], strict=True):
        assert a.flags.c_contiguous and a.flags.writeable
        if next_start is not None:
            assert a.ctypes.data + a.nbytes <= next_start
    # Writing one leaves the others as they were.
    for value, a in enumerate(arrays):
        a[...] = value + 1
    assert [float(a.min()) for a in arrays] == [1.0, 2.0, 3.0]
    assert [float(a.max()) for a in arrays] == [1.0, 2.0, 3.0]


def test_a_small_set_stays_on_the_heap():
    # Under OWN_PAGES_BYTES in all: a mapping would cost a page at least.
    small = pages.empty_in_own_pages(((3, 2, 4), np.int32), ((64, 8), np.float32))
    assert sum(a.nbytes for a in small) < pages.OWN_PAGES_BYTES
    assert all(_mapping_of(a) is None for a in small)


def test_the_mapping_goes_with_the_last_array():
    arrays = list(pages.empty_in_own_pages(*SPECS))
    mapping = weakref.ref(_mapping_of(arrays[0]))
    last = arrays.pop()
    del arrays
    gc.collect()
    assert mapping() is not None  # the last array still holds it
    del last
    gc.collect()
    assert mapping() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_s_writes_stay_its_own():
    # The mapping is private: after a fork (a torch DataLoader worker) a
    # child's pages are copied on write, as the heap's would be.
    (fine,) = pages.empty_in_own_pages(((64, 64), np.float32))
    fine[...] = 1.0
    pid = os.fork()
    if pid == 0:  # the child
        fine[...] = 42.0
        os._exit(0)
    os.waitpid(pid, 0)
    assert float(fine.max()) == 1.0


def test_phase_constants_live_in_one_mapping_with_the_formula_s_fine_tables():
    # RoPE head dim 64: the arrays layers hold (36 KiB) share one mapping,
    # and the fine tables are sin and cos of l * w, each rounded once.
    frequencies = 10000.0 ** (-np.arange(32) / 32)
    consts = phase_constants(turns_of(frequencies), 64, "concatenated")
    arrays = (consts.chunk_turns, consts.chunk_rests, consts.fine_u, consts.fine_v)
    assert _mapping_of(consts.fine_u) is not None
    assert all(_mapping_of(a) is _mapping_of(consts.fine_u) for a in arrays)
    angle = np.arange(FINE_ROWS)[:, None] * frequencies[None, :]
    sin, cos = np.sin(angle), np.cos(angle)
    np.testing.assert_allclose(consts.fine_u, np.concatenate([sin, cos], 1), atol=6e-8)
    np.testing.assert_allclose(consts.fine_v, np.concatenate([cos, -sin], 1), atol=6e-8)
    # The turn splits read back from the chunk arrays.
    assert consts.turn_hi.shape == consts.turn_mid.shape == consts.turn_lo.shape
    np.testing.assert_array_equal(consts.turn_hi, consts.chunk_turns[:, 0])
    np.testing.assert_array_equal(consts.turn_lo[1:], -consts.chunk_rests[1:, 0])
