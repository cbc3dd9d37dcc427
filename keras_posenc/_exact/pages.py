"""Host constants in pages of their own, given back to the system when freed.

The exact engine (Vaswani et al., 2017, section 3.5,
https://arxiv.org/abs/1706.03762; `_exact.engine`) holds per configuration
a few host arrays (`phase_constants`: the fine tables are 32 KiB at RoPE
head dim 64), and the layers of that configuration hold the engine.
Keras's layers are cyclic garbage: a dropped layer is freed at Python's
next collection of the generation it reached, often a full collection,
long after. Constants that live that long on the heap (`malloc`) sit
among the allocations made after them, and the heap freed in between stays
resident: 250 RoPE configurations used once grew the process by 1.1 MiB,
4x keras-hub's layers (issue 47; 0.1 MiB once trimmed). In an anonymous
mapping of their own they go back to the system the moment they are freed,
and the heap freed around them is reused (0.51 MiB with 0.5.3's other
cuts, keras-hub 0.27).

Example:

>>> fine, rests = empty_in_own_pages(((64, 64), np.float32), ((3,), np.int32))
>>> fine[...] = 1.0
>>> fine.shape, fine.dtype.name, float(fine.sum()), fine.flags.c_contiguous
((64, 64), 'float32', 4096.0, True)
>>> int(rests.ctypes.data - fine.ctypes.data)  # one mapping, after the table
16384
"""

import mmap

import numpy as np

# Arrays smaller than this in all stay on the heap: they pin little of it,
# and a mapping costs a page at least (and one of the process's limited
# count of mappings).
OWN_PAGES_BYTES = 16 * 1024
_ALIGNMENT = 64  # each array's start: a cache line, as malloc's large chunks
# Private (copy-on-write after a fork: a DataLoader worker's pages are its
# own), where the platform has the flag; Windows' anonymous maps take none.
_PRIVATE = (
    {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS}
    if hasattr(mmap, "MAP_PRIVATE")
    else {}
)


def empty_in_own_pages(*specs):
    """Empty C-contiguous arrays of `specs` (``(shape, dtype)`` pairs),
    together in one anonymous memory mapping that goes with the last of
    them (on the heap when they hold fewer than `OWN_PAGES_BYTES` in all).

    The caller fills them in place: nothing is built twice.
    """
    arrays = [(tuple(shape), np.dtype(dtype)) for shape, dtype in specs]
    sizes = [int(np.prod(shape)) * dtype.itemsize for shape, dtype in arrays]
    starts = np.cumsum([0] + [-(-size // _ALIGNMENT) * _ALIGNMENT for size in sizes])
    if starts[-1] < OWN_PAGES_BYTES:
        return tuple(np.empty(shape, dtype) for shape, dtype in arrays)
    # One array over the mapping, and views of it: one buffer export (two
    # objects on the heap) per mapping, not one per array.
    pages = np.frombuffer(mmap.mmap(-1, int(starts[-1]), **_PRIVATE), np.uint8)
    return tuple(
        pages[start : start + size].view(dtype).reshape(shape)
        for (shape, dtype), start, size in zip(arrays, starts[:-1], sizes, strict=True)
    )
