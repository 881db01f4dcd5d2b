# SPDX-License-Identifier: Apache-2.0
"""Worker processes of :class:`clpin.Loader` (``worker_method="process"``).

The slots of the loader are one anonymous shared memory file (``memfd_create``,
``MAP_SHARED``) of exactly slots x batch bytes, which the parent registers as
pinned (``clpin_host_register``) and hands to the C loader as its slot memory
(``clpin_loader_desc.slot_memory``). Each worker process maps the same file
and writes every batch it is given into a numpy view of its slot: no pickling
of batches, no second copy. The C loader keeps doing what it does for threads
(order, depth, sharding, uploads, epochs, cancel): its fill callback, on a
clpin thread, sends ``(slot, index)`` to an idle worker over a pipe and waits
for the answer with the GIL released. Workers never touch OpenCL.

A worker is watched by its process, never by waiting forever: the parent
waits on the worker's answer pipe *and* its sentinel (closed by the kernel
when the process ends), bounded by ``timeout``. A worker watches its parent:
``PR_SET_PDEATHSIG`` where the kernel can tie it to the parent (the main
thread forked it), and a thread polling ``getppid()`` every half second.

Nothing here runs at import in a worker beyond the package's own import: a
spawned worker imports :mod:`clpin` (pyopencl is imported, OpenCL is not
called).
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import mmap
import os
import pickle
import random
import signal
import threading
import time
import traceback
import warnings
import weakref
from multiprocessing import connection as mp_connection
from multiprocessing import get_context, reduction
from typing import Any, Callable, Optional

import numpy as np

from . import _loader as _L

# multiprocessing registered its exit handler (terminate daemonic children,
# then join them without a bound) when imported just now: clpin's, which
# closes every loader and SIGKILLs busy workers, must run before it, so it
# is registered again, last (atexit runs handlers last in, first out).
atexit.unregister(_L._close_all)
atexit.register(_L._close_all)

#: What :func:`worker_info` returns inside a worker process.
WorkerInfo = collections.namedtuple("WorkerInfo", ["id", "num_workers", "seed"])
WorkerInfo.__doc__ = """A worker process of a :class:`clpin.Loader`: ``id`` in
0 .. ``num_workers`` - 1, and ``seed``, the loader's seed + ``id``, with which
the worker seeded :mod:`random` and ``numpy.random``."""

_info: Optional[WorkerInfo] = None

START_METHODS = ("fork", "forkserver", "spawn")
_PR_SET_PDEATHSIG = 1
#: How long close() lets idle workers leave by themselves before SIGKILL.
_GRACE_S = 1.0


def worker_info() -> Optional[WorkerInfo]:
    """In a fill running in a worker process of a :class:`clpin.Loader`
    (``worker_method="process"``): ``WorkerInfo(id, num_workers, seed)``.
    Anywhere else (the parent, a threaded fill): None."""
    return _info


# ------------------------------------------------------------- the worker


class _Fd:
    """A file descriptor that travels to a spawned or forkserver child (as
    multiprocessing's connections do: duplicated for the child); under fork
    it is simply inherited."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _rebuild_fd, (reduction.DupFd(self.fd),)


def _rebuild_fd(dup: Any) -> _Fd:
    return _Fd(dup.detach())


def _watch_parent(ppid: int) -> None:
    """A worker thread: end the process once its parent is gone."""
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(0)


def _error_message(kind: str, exc: BaseException) -> tuple:
    try:
        blob = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot travel: its text does
        blob = None
    return (kind, type(exc).__name__, str(exc), traceback.format_exc(), blob)


def _worker_main(wid: int, nworkers: int, seed: int, memfd: _Fd, total: int, batch_bytes: int,
                 shape: tuple, dtype: str, fns: Any, task: Any, result: Any, close_fds: list,
                 pdeathsig: bool, ppid: int) -> None:
    """The body of worker process `wid`: map the slots, seed, worker_init,
    then fill (slot, index) requests until the pipe closes or says None."""
    global _info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # A handler inherited from a library of the parent (a C handler that
    # takes a lock some thread of the parent held at fork) must not keep a
    # worker alive when it is told to end (multiprocessing's exit sends
    # SIGTERM and then waits without a bound).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if pdeathsig:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    ppid = ppid or os.getppid()
    if os.getppid() != ppid:  # the parent died before prctl
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(ppid,), name="clpin-parent-watch",
                     daemon=True).start()
    for fd in close_fds:  # fork: the parent's ends of the pipes, so EOF means it
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        mem = mmap.mmap(memfd.fd, total, flags=mmap.MAP_SHARED,
                        prot=mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(memfd.fd)
        _L._huge_pages(mem)
        if isinstance(fns, bytes):
            fill, init = pickle.loads(fns)
        else:
            fill, init = fns
        _info = WorkerInfo(wid, nworkers, seed + wid)
        random.seed(seed + wid)
        np.random.seed((seed + wid) % (1 << 32))
        if init is not None:
            init(wid)
    except BaseException as exc:  # noqa: B902 - reported to the parent, which raises it
        result.send(_error_message("init_error", exc))
        return
    dt = np.dtype(dtype)
    result.send(("ready", os.getpid()))
    while True:
        try:
            msg = task.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        slot, index = msg
        try:
            out = np.ndarray(shape, dt, buffer=mem, offset=slot * batch_bytes)
            r = fill(out, index)
            del out
            if r is None or r is True:
                reply = ("ok", index)
            elif r is False or (isinstance(r, np.bool_) and not r):
                reply = ("end", index)
            elif isinstance(r, np.bool_):
                reply = ("ok", index)
            else:
                raise TypeError(f"fill must return None, True or False, not {type(r).__name__}")
        except BaseException as exc:  # noqa: B902 - every exception goes to the iteration
            reply = _error_message("error", exc)
        result.send(reply)


# ------------------------------------------------------------- the parent


def _rebuild(blob: Optional[bytes]) -> Optional[BaseException]:
    if blob is None:
        return None
    try:
        exc = pickle.loads(blob)
    except Exception:  # noqa: BLE001 - its type cannot be rebuilt here: the text says it
        return None
    return exc if isinstance(exc, BaseException) else None


def _how_it_ended(proc: Any) -> tuple:
    """(exitcode, signal number or None, words) of a finished process."""
    code = proc.exitcode
    if code is None:
        return None, None, "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = " (the OOM killer, or kill -9)" if -code == signal.SIGKILL else ""
        return code, -code, f"was killed by {name} ({-code}){why}"
    return code, None, f"exited with code {code}"


class _Worker:
    __slots__ = ("id", "proc", "task", "result", "pid")

    def __init__(self, wid: int, proc: Any, task: Any, result: Any) -> None:
        self.id, self.proc, self.task, self.result = wid, proc, task, result
        self.pid = proc.pid

    def stop(self, wait: float = 5.0) -> None:
        """SIGKILL (if still running), reap, close the pipes."""
        try:
            if self.proc.exitcode is None:
                self.proc.kill()
            self.proc.join(wait)
        except (OSError, ValueError, AssertionError):
            pass
        for c in (self.task, self.result):
            try:
                c.close()
            except OSError:
                pass


def _reap(procs: list) -> None:
    for w in procs:
        if w is not None:
            w.stop(1.0)


class Workers:
    """The worker processes of one loader, and the dispatch the C loader's
    fill callback runs (:meth:`fill`)."""

    def __init__(self, n: int, start_method: str, fill: Callable, worker_init: Optional[Callable],
                 seed: int, timeout: Optional[float], memfd: int, total: int, batch_bytes: int,
                 shape: tuple, dtype: np.dtype) -> None:
        self.n = n
        self.method = start_method
        self.mp = get_context(start_method)
        if start_method == "fork":
            self.fns: Any = (fill, worker_init)
        else:
            try:
                self.fns = pickle.dumps((fill, worker_init))
            except Exception as exc:  # noqa: BLE001 - any pickling failure says the same
                raise TypeError(
                    f"fill and worker_init must be picklable for start_method="
                    f"{start_method!r} (the worker process imports them by name: define them "
                    f"at module level), or use start_method='fork': {exc}") from exc
        self.seed = seed
        self.timeout = timeout
        self.memfd, self.total, self.batch_bytes = memfd, total, batch_bytes
        self.shape, self.dtype = shape, dtype.str
        self.ppid = os.getpid()
        self.cv = threading.Condition(threading.Lock())
        self.procs: list = [None] * n  # _Worker, or None: to start before its next batch
        self.idle = list(range(n - 1, -1, -1))
        self.closed = False
        self.restarts = 0
        # Workers dropped without close() (a loader that failed half made):
        # their processes end with the object. Interpreter exit is the atexit
        # hook's (clpin._loader._close_all), which closes in order.
        self._finalizer = weakref.finalize(self, _reap, self.procs)
        self._finalizer.atexit = False

    # -- lifecycle

    def start(self) -> None:
        """Start every worker, then wait until each is ready (worker_init
        done): a failing start raises here, at creation."""
        for k in range(self.n):
            w = self._start(k)  # the next ones, forked, close its pipes' parent ends
            with self.cv:
                self.procs[k] = w
        for w in list(self.procs):
            self._ready(w, None)

    def _start(self, k: int) -> _Worker:
        task_r, task_w = self.mp.Pipe(duplex=False)
        res_r, res_w = self.mp.Pipe(duplex=False)
        close_fds: list = []
        if self.method == "fork":
            with self.cv:
                others = [w for w in self.procs if w is not None]
            for w in others:
                close_fds += [w.task.fileno(), w.result.fileno()]
            close_fds += [task_w.fileno(), res_r.fileno()]
        # PR_SET_PDEATHSIG fires when the *thread* that forked the worker
        # ends: tie it only to the main thread (or the forkserver's).
        pdeath = (self.method == "forkserver"
                  or threading.current_thread() is threading.main_thread())
        # The parent it watches: this process, or under forkserver the
        # forkserver (which ends when this process does).
        ppid = 0 if self.method == "forkserver" else self.ppid
        proc = self.mp.Process(
            target=_worker_main, name=f"clpin-worker-{k}", daemon=True,
            args=(k, self.n, self.seed, _Fd(self.memfd), self.total, self.batch_bytes,
                  self.shape, self.dtype, self.fns, task_r, res_w, close_fds, pdeath, ppid))
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns of fork() in a threaded process: the
                # worker only runs Python and numpy, never OpenCL or clpin.
                warnings.simplefilter("ignore", DeprecationWarning)
                proc.start()
        finally:
            task_r.close()
            res_w.close()
        return _Worker(k, proc, task_w, res_r)

    def _ready(self, w: _Worker, index: Optional[int]) -> None:
        """Wait for worker w's first message; raise WorkerError if it failed."""
        # A start (an interpreter under spawn, worker_init) may take longer
        # than a batch: bounded by timeout, but never below a minute.
        limit = None if self.timeout is None else max(self.timeout, 60.0)
        msg = self._answer(w, index, limit, "before it was ready: under start_method="
                           f"{self.method!r} its stderr says why (an import of fill, or of "
                           "__main__ without an `if __name__ == '__main__':` guard)"
                           if self.method != "fork" else "before it was ready")
        if msg[0] == "ready":
            return
        _, tname, text, tb, blob = msg
        w.stop()
        err = _L.WorkerError(
            f"worker {w.id} (pid {w.pid}) failed to start: {tname}: {text}\n"
            f"(under start_method={self.method!r} fill and worker_init are loaded in the "
            f"worker by name: they must be importable there)\n--- worker traceback ---\n{tb}",
            index=index, pid=w.pid, worker=w.id)
        cause = _rebuild(blob)
        if cause is not None:
            err.__cause__ = cause
        raise err

    def _answer(self, w: _Worker, index: Optional[int], limit: Optional[float],
                doing: str) -> tuple:
        """The next message of w, or WorkerError when it died or ran past
        `limit` seconds (then it is stopped)."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = mp_connection.wait([w.result, w.proc.sentinel], timeout=left)
            if w.result in ready:
                try:
                    return w.result.recv()
                except (EOFError, OSError):
                    pass  # the pipe closed: the process is ending
                w.proc.join(2.0)
                break
            if w.proc.sentinel in ready:
                w.proc.join(2.0)
                break
            if deadline is not None and time.monotonic() >= deadline:
                w.stop()
                what = f"batch {index}" if index is not None else "its start"
                raise _L.WorkerError(
                    f"worker {w.id} (pid {w.pid}) did not finish {what} within {limit} s "
                    f"(timeout={self.timeout}); the worker was stopped (SIGKILL)",
                    index=index, pid=w.pid, worker=w.id, timed_out=True)
        code, sig, words = _how_it_ended(w.proc)
        w.stop()
        if self.closed:
            raise _L.WorkerError(f"the Loader was closed (worker {w.id}, pid {w.pid})",
                                 index=index, pid=w.pid, worker=w.id, exitcode=code, signal=sig)
        at = f" at batch {index}" if index is not None else ""
        raise _L.WorkerError(f"worker {w.id} (pid {w.pid}) {words}{at} ({doing})",
                             index=index, pid=w.pid, worker=w.id, exitcode=code, signal=sig)

    def close(self) -> None:
        """End every worker: idle ones are told to leave, busy ones (their
        batch is dropped) and any still there after a grace are SIGKILLed."""
        with self.cv:
            self.closed = True
            ws = [w for w in self.procs if w is not None]
            busy = [w for w in ws if w.id not in self.idle]
            self.cv.notify_all()
        for w in ws:
            if w in busy:
                try:
                    w.proc.kill()
                except (OSError, ValueError):
                    pass
            else:
                try:
                    w.task.send(None)
                except (OSError, ValueError):
                    pass
        end = time.monotonic() + _GRACE_S
        for w in ws:
            try:
                w.proc.join(max(0.0, end - time.monotonic()))
            except (OSError, ValueError, AssertionError):
                pass
        for w in ws:
            w.stop()

    def pids(self) -> list:
        with self.cv:
            return [w.pid if w is not None else None for w in self.procs]

    # -- dispatch (a clpin thread, in the fill callback)

    def fill(self, slot: int, index: int) -> bool:
        """Have a worker fill `slot` with batch `index`. True: filled; False:
        fill ended the epoch. Raises LoaderError / WorkerError."""
        with self.cv:
            while not self.idle and not self.closed:
                self.cv.wait()
            if self.closed:
                raise _L.LoaderError(index, None, detail="the Loader was closed")
            k = self.idle.pop()
            w = self.procs[k]
        try:
            if w is None:  # died or timed out earlier: a new one takes its place
                w = self._start(k)
                with self.cv:
                    self.procs[k] = w
                    self.restarts += 1
                    if self.closed:
                        w.stop()
                        raise _L.LoaderError(index, None, detail="the Loader was closed")
                self._ready(w, index)
            try:
                w.task.send((slot, index))
            except (OSError, ValueError):
                pass  # it died: _answer says how
            msg = self._answer(w, index, self.timeout, "while filling it")
        except _L.WorkerError:
            with self.cv:
                if self.procs[k] is w:
                    self.procs[k] = None
            raise
        finally:
            with self.cv:
                self.idle.append(k)
                self.cv.notify()
        kind = msg[0]
        if kind == "ok":
            return True
        if kind == "end":
            return False
        _, tname, text, tb, blob = msg
        cause = _rebuild(blob)
        err = _L.LoaderError(index, cause, detail=f"{tname}: {text}\n--- worker {k} (pid "
                             f"{w.pid}) traceback ---\n{tb}")
        if cause is not None:
            err.__cause__ = cause
        raise err
