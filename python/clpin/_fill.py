# SPDX-License-Identifier: Apache-2.0
"""What the loader (``_loader``) and its worker processes (``_workers``)
share, beneath both: the errors an iteration raises for a batch, what a
fill's return value means, where a process loader's slots lie, and the
registry of open loaders that an exit hook closes. ``_workers`` imports
this module, never ``_loader``, so the loader's modules form no circle.
"""

from __future__ import annotations

import atexit
import mmap
import threading
from typing import Any, Optional

import numpy as np

from ._errors import CODES

#: clpin's code for "no batch at this index: the epoch ends before it".
END = CODES["END"]

_tls = threading.local()  # .in_fill: this thread is running a fill callback


def _printed(exc: BaseException) -> str:
    """str(exc), or what its printing raised (an exception must never hide
    the one it reports)."""
    try:
        return str(exc)
    except BaseException as err:  # noqa: B902
        return f"<cannot be printed: its __str__ raised {type(err).__name__}>"


class LoaderError(RuntimeError):
    """``fill`` (or, for :func:`prefetch`, the iterable) raised for a batch.

    Raised by the iteration step that reaches that batch; the batches before
    it were delivered, and the iteration may go on with the next one.

    Attributes
    ----------
    index : int or None
        The batch's index in the epoch (None: no batch, e.g. a worker
        process that failed to start).
    __cause__ : BaseException or None
        The exception ``fill`` raised, with its traceback. From a worker
        process: an exception of the same type, rebuilt from its pickle
        where that works (else None); the worker's traceback text is then
        in the message.
    """

    def __init__(self, index: Optional[int], exc: Optional[BaseException],
                 detail: Optional[str] = None) -> None:
        self.index = None if index is None else int(index)
        if detail is not None:
            what = detail
        elif exc is None:
            what = "an exception (lost)"
        else:
            what = f"{type(exc).__name__}: {_printed(exc)}"
        at = f"batch {index}" if index is not None else "the loader"
        super().__init__(f"fill failed for {at}: {what}")


class WorkerError(LoaderError):
    """A worker process of a :class:`Loader` (``worker_method="process"``)
    died (a signal, ``os._exit``, the OOM killer) or ran past ``timeout``.

    Raised by the iteration step that reaches the batch it was filling (or
    by the constructor when a worker fails to start). The worker is replaced
    by a new process (its ``worker_init`` runs again) before its next batch;
    the batches after this one keep coming.

    Attributes
    ----------
    index : int or None
        The batch it was filling (None: at its start).
    pid : int
        The worker's process id.
    worker : int
        The worker's id (:func:`worker_info`).
    exitcode : int or None
        Its exit code; negative: the signal that ended it (as
        ``multiprocessing.Process.exitcode``). None: still running (timeout).
    signal : int or None
        The signal that ended it, if one did.
    timed_out : bool
        It ran past ``timeout`` (and was stopped with SIGKILL).
    """

    def __init__(self, message: str, *, index: Optional[int], pid: int, worker: int,
                 exitcode: Optional[int] = None, signal: Optional[int] = None,
                 timed_out: bool = False) -> None:
        RuntimeError.__init__(self, message)
        self.index = index
        self.pid, self.worker = pid, worker
        self.exitcode, self.signal, self.timed_out = exitcode, signal, timed_out


class _FillFailed(Exception):
    """Raised by a fill of clpin's own (DatasetLoader's) to say in its
    message what failed (the sample, the field); ``__cause__`` is the
    exception the caller's code raised (or a ValueError / TypeError), which
    the :class:`LoaderError` carries as its own ``__cause__``."""


def _fill_result(r: Any) -> int:
    """What a fill's return value means: 0 (deliver) or END."""
    if r is None or r is True:
        return 0
    if r is False or (isinstance(r, np.bool_) and not r):
        return END
    if isinstance(r, np.bool_):
        return 0
    raise TypeError(f"fill must return None, True or False, not {type(r).__name__}")


def _slot_stride(batch_bytes: int) -> int:
    """From one slot of a process loader's memory to the next: the batch
    rounded up to whole pages, so that a worker can map each slot by itself
    with a guard page after it (_workers._Slots)."""
    page = mmap.PAGESIZE
    return -(-batch_bytes // page) * page


def _huge_pages(m: mmap.mmap) -> None:
    """Ask for transparent huge pages on a shared mapping (fewer TLB misses
    on batches of many MiB); a no-op where the kernel's shmem_enabled says
    never."""
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError, ValueError):
        pass


_live_lock = threading.Lock()
_live: set = set()  # states not closed yet


def _open_loaders(context: int) -> int:
    """How many loaders on the context (its int_ptr) are open."""
    with _live_lock:
        return sum(1 for st in _live if context in st.contexts)


@atexit.register
def _close_all() -> None:
    """Close every live loader before the interpreter finalizes: after that,
    a worker thread calling fill could not take the GIL and the exit would
    hang."""
    with _live_lock:
        states = [st for st in _live if not st.inherited()]
    for st in states:
        try:
            st.close()
        except Exception:  # noqa: BLE001 - at exit, close the others all the same
            pass


