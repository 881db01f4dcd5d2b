# SPDX-License-Identifier: Apache-2.0
"""Pools: their counters (stats) and their release (release_context).
"""

from __future__ import annotations

import gc

from ._native import ffi, has_host_register, lib
from ._errors import _check
from ._args import QueueOrContext, _context, _pool
from ._lifetime import _lock, _wait_pending
from ._memory import _owners, _registered

# -------------------------------------------------------- stats and release

STATS_FIELDS: tuple[str, ...] = tuple(
    name for name, _ in ffi.typeof("clpin_stats").fields if name != "struct_size")


def stats(queue: QueueOrContext) -> dict[str, int]:
    """A consistent snapshot of the context's pool counters (``clpin_pool_stats``).

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the pool (created if the context has none yet).

    Returns
    -------
    dict of str to int
        Every ``clpin_stats`` field but ``struct_size``, e.g. ``hits``,
        ``bytes_staged``, ``bytes_pipelined``, ``bytes_pinned_direct``,
        ``bytes_unpinned``, ``bytes_registered``, ``bytes_zero_copy``,
        ``bytes_file_read``, ``bytes_file_written``. A library older than a
        field leaves it 0.
    """
    ctx = _context(queue)
    s = ffi.new("clpin_stats *")
    s.struct_size = ffi.sizeof("clpin_stats")
    _check(lib.clpin_pool_stats(_pool(ctx), s), "clpin_pool_stats")
    return {name: int(getattr(s, name)) for name in STATS_FIELDS}


def release_context(context: QueueOrContext) -> None:
    """Free the context's pool (``clpin_pool_release_context``).

    Waits for clpin's transfers still in flight, unregisters the context's
    registered arrays, frees every pinned buffer and forgets the context.
    Call it before the context goes; clpin may create a new pool later.

    Parameters
    ----------
    context : pyopencl.Context or pyopencl.CommandQueue
        The context (or a queue on it).

    Raises
    ------
    RuntimeError
        :func:`empty_pinned` / :func:`pin_memory` arrays of this context are
        still alive: their memory would be freed under them. Delete them
        first (nothing is released then). The same while a :class:`Loader`
        on the context is open: close it first.
    Error
        clpin failed.
    """
    ctx = _context(context)
    key = ctx.int_ptr
    _wait_pending()
    with _lock:
        live = len(_owners.get(key, ()))
    if live:
        gc.collect()
        with _lock:
            live = len(_owners.get(key, ()))
    if live:
        raise RuntimeError(f"{live} pinned array(s) of this context are still alive; "
                           "delete them before release_context")
    from ._loader import _open_loaders  # the loader sits above the pools

    loaders = _open_loaders(key)
    if loaders:
        raise RuntimeError(f"{loaders} clpin.Loader(s) on this context are open (their pinned "
                           "slots are the pool's); close them before release_context")
    with _lock:
        mine = [p for p, (_, c) in _registered.items() if c == key]
    for p in mine:
        if has_host_register():
            lib.clpin_host_unregister(ffi.cast("void *", p))
        with _lock:
            _registered.pop(p, None)
    _check(lib.clpin_pool_release_context(ffi.cast("cl_context", key)),
           "clpin_pool_release_context")
    with _lock:
        _owners.pop(key, None)
