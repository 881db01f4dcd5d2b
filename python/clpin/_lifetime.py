# SPDX-License-Identifier: Apache-2.0
"""Keeping arrays alive while a non-blocking transfer uses them: each event
holds its objects until OpenCL says it completed.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from typing import Any, Optional

import pyopencl as cl

from ._native import CL_COMPLETE, ffi, ocl, ocl_ffi
from ._errors import _check
from ._args import _addr

# ----------------------------------------------- keeping arrays alive (events)

_lock = threading.Lock()
_pending: dict[int, tuple[int, Any]] = {}  # key -> (cl_event we retained, objects)
_graveyard: list[int] = []  # completed events still to release (outside callbacks)
_keys = itertools.count(1)


@ocl_ffi.callback("void(cl_event, cl_int, void *)")
def _on_complete(event: Any, status: int, user_data: Any) -> None:
    # Runs on an OpenCL thread (or inline when the event is already complete).
    # Our reference to the event is not released here: releasing a user event
    # inside its own callback aborts POCL, so it waits in the graveyard.
    key = int(ocl_ffi.cast("uintptr_t", user_data))
    with _lock:
        entry = _pending.pop(key, None)
        if entry is not None:
            _graveyard.append(entry[0])
    del entry  # the arrays go here, outside the lock


def _bury() -> None:
    if not _graveyard:
        return
    with _lock:
        dead = _graveyard[:]
        _graveyard.clear()
    for e in dead:
        ocl.clReleaseEvent(ocl_ffi.cast("cl_event", e))


def _keep_alive(event: int, objects: tuple) -> None:
    """Hold objects until event completes (an OpenCL completion callback)."""
    _bury()
    raw = ocl_ffi.cast("cl_event", event)
    ocl.clRetainEvent(raw)
    key = next(_keys)
    with _lock:
        _pending[key] = (event, objects)
    # Not under _lock: POCL runs the callback inline on a completed event.
    if ocl.clSetEventCallback(raw, CL_COMPLETE, _on_complete, ocl_ffi.cast("void *", key)) != 0:
        ocl.clWaitForEvents(1, ocl_ffi.new("cl_event[1]", [raw]))
        with _lock:
            _pending.pop(key, None)
        ocl.clReleaseEvent(raw)


def pending() -> int:
    """Number of non-blocking transfers whose arrays clpin still holds."""
    with _lock:
        return len(_pending)


def _wait_pending() -> None:
    with _lock:
        events = [e for e, _ in _pending.values()]
    if events:
        ocl.clWaitForEvents(len(events), ocl_ffi.new("cl_event[]", [ocl_ffi.cast("cl_event", e) for e in events]))
    # Completion callbacks may trail the status change by a moment.
    for _ in range(2000):
        if not _pending:
            break
        threading.Event().wait(0.001)
    _bury()


atexit.register(_wait_pending)


def _finish(err: int, call: str, out: Any, objects: tuple) -> Optional[cl.Event]:
    _check(err, call)
    if out is ffi.NULL:
        return None
    event = _addr(out[0])
    _keep_alive(event, objects)
    return cl.Event.from_int_ptr(event, retain=False)
