# SPDX-License-Identifier: Apache-2.0
"""Worker processes of :class:`clpin.Loader` (``worker_method="process"``).

The slots of the loader are one anonymous shared memory file (``memfd_create``,
``MAP_SHARED``) of exactly slots x batch bytes, which the parent registers as
pinned (``clpin_host_register``) and hands to the C loader as its slot memory
(``clpin_loader_desc.slot_memory``). Each worker process maps the same file
and writes every batch it is given into a numpy view of its slot: no pickling
of batches, no second copy. The C loader keeps doing what it does for threads
(order, depth, sharding, uploads, epochs, cancel) on ``QUEUE`` clpin threads
per worker: its fill callback, on a clpin thread, writes ``(channel, slot,
index)`` to the task pipe of the least busy worker and waits for the answer
on that channel's result pipe with the GIL released. Each worker thus has
the next batch queued while the parent takes the answer of the last (which
needs the GIL, maybe held by the iteration), so it never idles between
batches. Raw pipes and fixed records keep the parent's share small: one
write, one select, one read per batch; only errors are pickled. Workers
never touch OpenCL.

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
import importlib
import mmap
import os
import pickle
import random
import select
import signal
import struct
import threading
import time
import traceback
import warnings
import weakref
from multiprocessing import get_context, reduction
from typing import Any, Callable, Optional

import numpy as np

from . import _layout
from . import _fill as _F

# multiprocessing's Process.start() first polls every child it still lists,
# and Process.close() clears a child's handle before it takes the child off
# that list: a start() on one loader thread beside a close() on another
# raised AttributeError ('NoneType' object has no attribute 'poll') out of
# start(). Every start() and close() of a worker process takes this lock.
_PROCESS_LOCK = threading.Lock()

# multiprocessing registered its exit handler (terminate daemonic children,
# then join them without a bound) when imported just now: clpin's, which
# closes every loader and SIGKILLs busy workers, must run before it, so it
# is registered again, last (atexit runs handlers last in, first out).
importlib.import_module("multiprocessing.util")  # its exit handler: registered before ours
atexit.unregister(_F._close_all)
atexit.register(_F._close_all)

#: What :func:`worker_info` returns inside a worker process.
WorkerInfo = collections.namedtuple("WorkerInfo", ["id", "num_workers", "seed"])
WorkerInfo.__doc__ = """A worker process of a :class:`clpin.Loader`: ``id`` in
0 .. ``num_workers`` - 1, and ``seed``, the loader's seed + ``id``, with which
the worker seeded :mod:`random` and ``numpy.random``."""

_info: Optional[WorkerInfo] = None

START_METHODS = ("fork", "forkserver", "spawn")
_PR_SET_PDEATHSIG = 1
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
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


def _drop_forkserver_alive() -> None:
    """Close this process's copy of the forkserver's "alive" pipe (every
    process the forkserver starts holds its write end; the forkserver ends
    when all are closed). A worker holding it would keep the forkserver, so
    itself (its PR_SET_PDEATHSIG is tied to the forkserver), alive after the
    loader's process died, for as long as its fill runs: a fill that holds
    the GIL lets no watching thread run. Workers start no processes."""
    try:
        from multiprocessing import forkserver
        server = forkserver._forkserver
        fd, server._forkserver_alive_fd = server._forkserver_alive_fd, None
    except (ImportError, AttributeError):
        return
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _watch_parent(ppid: int) -> None:
    """A worker thread: end the process once its parent is gone."""
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(0)


#: Tasks a worker has at once (clpin threads feeding it): while the parent
#: takes one answer and uploads it, the worker already fills the next batch.
QUEUE = 2

# Records on the raw pipes (the fast path: one write, one select, one read
# of a few bytes per batch in the parent, no pickling).
_TASK = struct.Struct("=qqq")  # channel (-1: leave), slot, index
_REPLY = struct.Struct("=qq")  # kind, bytes of pickled payload that follow
_OK, _END, _ERROR, _INIT_ERROR, _READY = range(5)
# The state memory: one word per worker, index + 1 of the batch it fills (0:
# none), so that when it dies the parent knows which of its queued batches
# it was filling (that one fails) and which it never began (they go to
# another worker).
_WORD = struct.Struct("=q")


def _state_bytes(n: int) -> int:
    return max(8 * n, 8)


def _error_payload(exc: BaseException) -> bytes:
    """(type name, text, traceback, pickle or None, words or None): words
    replace "type: text" in the parent's message (a fill of clpin's own that
    names the sample; the exception is then its cause)."""
    words = None
    tb = _traceback_text(exc)
    if isinstance(exc, _F._FillFailed):
        words = _text(exc)
        exc = exc.__cause__ if exc.__cause__ is not None else exc
    try:
        blob = pickle.dumps(exc)
    except BaseException:  # noqa: B902 - an exception that cannot travel: its text does
        blob = None
    return pickle.dumps((_type_name(exc), _text(exc), tb, blob, words))


def _type_name(exc: BaseException) -> str:
    try:
        return str(type(exc).__name__)
    except Exception:  # noqa: BLE001 - a metaclass that hides its name
        return "an exception"


def _text(exc: BaseException) -> str:
    """str(exc); an exception whose __str__ (or __repr__) raises is still
    reported, by its type and what its printing raised."""
    try:
        return str(exc)
    except BaseException as err:  # noqa: B902 - its printing fails: say so, never die of it
        try:
            why = f"{type(err).__name__}: {err}"
        except BaseException:  # noqa: B902
            why = type(err).__name__
        return f"<cannot be printed: its __str__ raised {why}>"


def _traceback_text(exc: BaseException) -> str:
    try:
        return traceback.format_exc()
    except BaseException:  # noqa: B902 - format_exc prints exc: it may raise too
        try:
            lines = traceback.format_tb(exc.__traceback__)
        except BaseException:  # noqa: B902
            lines = []
        return ("Traceback (most recent call last):\n" + "".join(lines)
                + f"{_type_name(exc)}: {_text(exc)}\n")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> Optional[bytes]:
    """n bytes of fd, or None at EOF."""
    data = os.read(fd, n)
    if len(data) == n:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        if not data:
            return None
        data = os.read(fd, n - got)
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _reply(fd: int, kind: int, payload: bytes = b"") -> None:
    _write_all(fd, _REPLY.pack(kind, len(payload)) + payload)


def _worker_main(wid: int, nworkers: int, seed: int, memfd: _Fd, total: int, batch_bytes: int,
                 layout: tuple, index: Optional[tuple], fns: Any, task: _Fd, results: list,
                 statefd: _Fd, close_fds: list, pdeathsig: bool, ppid: int) -> None:
    """The body of worker process `wid`: map the slots, seed, worker_init,
    then fill (channel, slot, index) tasks until the pipe closes or says
    channel -1; each answer goes to the result pipe of its channel."""
    global _info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # A handler inherited from a library of the parent (a C handler that
    # takes a lock some thread of the parent held at fork) must not keep a
    # worker alive when it is told to end (multiprocessing's exit sends
    # SIGTERM and then waits without a bound).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    ppid = ppid or os.getppid()  # before prctl: a parent gone meanwhile is seen below
    _drop_forkserver_alive()
    if pdeathsig:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != ppid:  # the parent died before prctl
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(ppid,), name="clpin-parent-watch",
                     daemon=True).start()
    for fd, ino in close_fds:  # fork: the parent's ends of the pipes, so EOF means it
        # Only if fd is still that pipe: a thread of the parent may have
        # closed it before the fork, and the number gone to a new pipe (the
        # sentinel multiprocessing makes for this very process, whose end
        # closed here would tell the parent this worker died).
        try:
            if os.fstat(fd).st_ino == ino:
                os.close(fd)
        except OSError:
            pass
    tfd = task.fd
    rfds = [r.fd for r in results]
    try:
        # Mapped whole now (MAP_POPULATE): otherwise each worker takes a
        # page fault on every page of every slot it first writes, a cost the
        # fill pays for many epochs with large batches.
        slots = _Slots(memfd.fd, total, batch_bytes)
        os.close(memfd.fd)
        state = mmap.mmap(statefd.fd, _state_bytes(nworkers), flags=mmap.MAP_SHARED,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(statefd.fd)
        samples = None
        if index is not None:  # a dataset: each slot's sample indices (_SlotMemory.index)
            ifd, isize, rows = index
            imap = mmap.mmap(ifd.fd, isize, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            os.close(ifd.fd)
            samples = np.ndarray((isize // 8 // (rows + 1), rows + 1), np.int64, buffer=imap)
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
        _reply(rfds[0], _INIT_ERROR, _error_payload(exc))
        return
    _reply(rfds[0], _READY)
    size = _TASK.size
    while True:
        try:
            msg = _read_exact(tfd, size)
        except OSError:
            return
        if msg is None:
            return
        channel, slot, index = _TASK.unpack(msg)
        if channel < 0:
            return
        _WORD.pack_into(state, wid * 8, index + 1)  # filling it (the parent reads this)
        try:
            out = _layout.views(layout, slots[slot])
            if samples is None:
                r = fill(out, index)
            else:
                rec = samples[slot]
                r = fill(out, index, rec[1:1 + int(rec[0])].copy())
            del out
            slots.check(slot)
            kind = _OK if _F._fill_result(r) == 0 else _END
            payload = b""
        except BaseException as exc:  # noqa: B902 - every exception goes to the iteration
            kind, payload = _ERROR, _error_payload(exc)
        try:
            _reply(rfds[channel], kind, payload)
        except OSError:
            return
        _WORD.pack_into(state, wid * 8, 0)


_PROT_NONE, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 0, 0x02, 0x10, 0x20, 0x4000
_MADV_HUGEPAGE = 14
_HUGE = 2 << 20  # a huge page (x86-64, arm64 with 4 KiB pages)


class _Slots:
    """The slots as a worker maps them: each slot by itself (the memfd's
    slots are _fill._slot_stride apart, whole pages), followed by an
    inaccessible page, so that a fill writing past its batch faults (the
    worker dies: WorkerError) instead of changing another batch; what it
    writes into the rest of its slot's last page is found after the fill
    (check: LoaderError). slots[s] is slot s's batch bytes, nothing more."""

    def __init__(self, fd: int, total: int, batch_bytes: int) -> None:
        self.stride = _F._slot_stride(batch_bytes)
        self.batch_bytes = batch_bytes
        page = mmap.PAGESIZE
        n = total // self.stride
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        # Slot k at base + k * step: each slot on an address of 2 MiB (so
        # that huge pages, where the kernel gives shared memory any, map
        # it as the parent's one mapping does), a guard after it. Only
        # address space: the gaps are never backed.
        step = -(-(self.stride + page) // _HUGE) * _HUGE
        span = n * step + _HUGE
        base = libc.mmap(None, span, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE,
                         -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {span} bytes for the slots failed")
        base = -(-base // _HUGE) * _HUGE
        self.views: list = []
        self.tails: list = []
        for k in range(n):
            addr = base + k * step
            got = libc.mmap(addr, self.stride, mmap.PROT_READ | mmap.PROT_WRITE,
                            mmap.MAP_SHARED | _MAP_FIXED | _MAP_POPULATE, fd, k * self.stride)
            if got != addr:
                raise OSError(ctypes.get_errno(), f"mmap of slot {k} of the loader failed")
            libc.madvise(addr, self.stride, _MADV_HUGEPAGE)  # as the parent's mapping
            self.views.append(memoryview((ctypes.c_ubyte * batch_bytes).from_address(addr))
                              .cast("B"))
            pad = self.stride - batch_bytes
            self.tails.append(np.ctypeslib.as_array((ctypes.c_ubyte * pad).from_address(
                addr + batch_bytes)) if pad else None)

    def __getitem__(self, slot: int) -> memoryview:
        return self.views[slot]

    def check(self, slot: int) -> None:
        """Raise if the fill wrote past its batch, into the rest of the
        slot's last page (cleared again: nothing reads it)."""
        tail = self.tails[slot]
        if tail is not None and tail.any():
            last = int(np.flatnonzero(tail)[-1]) + 1
            tail[:] = 0
            raise BufferError(f"fill wrote past the end of out: {last} byte(s) after its "
                              f"{self.batch_bytes} (a write further than the page would have "
                              "killed the worker); the batch is not delivered")


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


class _Requeue(Exception):
    """A queued batch whose worker ended before beginning it."""


class _Worker:
    """One worker process and the parent's ends of its pipes: one task pipe,
    QUEUE result pipes (one per channel: each task in flight has its own, so
    the clpin threads feeding one worker never read each other's answers)."""

    __slots__ = ("id", "proc", "task", "results", "pid", "busy", "users", "dead", "why",
                 "filling", "lock")

    def __init__(self, wid: int, proc: Any, task: int, results: list) -> None:
        self.id, self.proc, self.task, self.results = wid, proc, task, results
        self.pid = proc.pid
        self.busy = [False] * len(results)  # channels with a task in flight
        self.users = 0  # clpin threads using the pipes now (under Workers.cv)
        self.dead = False  # stopped, or to be: no new task
        self.why: Optional[str] = None  # set when the parent stopped it (timeout)
        self.filling: Optional[int] = None  # when it ended: the batch it was filling, or -1
        # Reaping: one thread at a time (two waitpid()s race: the loser would
        # see no exit code).
        self.lock = threading.Lock()

    def kill(self) -> None:
        try:
            if self.proc.exitcode is None:
                self.proc.kill()
        except (OSError, ValueError, AttributeError):
            pass

    def stop(self, wait: float = 5.0) -> None:
        """SIGKILL (if still running) and reap; the pipes stay open (closed
        by close_fds once no thread uses them)."""
        self.dead = True
        self.kill()
        self.join(wait)

    def join(self, wait: float) -> None:
        # Polled (exitcode is a WNOHANG waitpid), never multiprocessing's
        # join: once the sentinel says "ended" that waits without a bound,
        # and a worker must never hang the parent, whatever its state.
        end = time.monotonic() + wait
        with self.lock:
            try:
                while self.proc.exitcode is None and time.monotonic() < end:
                    time.sleep(0.005)
            except (OSError, ValueError, AssertionError):
                pass

    def close_fds(self) -> None:
        self.release()
        fds, self.task, self.results = [self.task] + self.results, -1, []
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


    def release(self) -> None:
        """Free what multiprocessing keeps of an ended process (its
        sentinel pipe's fds) now, not when the object is collected; a
        process still running keeps them."""
        try:
            with _PROCESS_LOCK:
                if self.proc.exitcode is not None:
                    self.proc.join(0)  # off multiprocessing's list first
                    self.proc.close()
        except (OSError, ValueError, AttributeError):
            pass


def _long_lived_thread() -> bool:
    """Whether this thread lives as long as the workers it starts, so that
    PR_SET_PDEATHSIG (which fires when the thread that forked the worker
    ends) fires only with the process: the main thread, or a clpin thread
    of the loader (in a fill: it restarts a worker; clpin joins its threads
    only after the workers ended, in close())."""
    return (threading.current_thread() is threading.main_thread()
            or getattr(_F._tls, "in_fill", False))


def _inode(fd: int) -> Optional[int]:
    """The inode of open descriptor fd (a pipe's identity); None if closed."""
    if fd < 0:
        return None
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return None


def _reap(procs: list, fds: list, pid: int) -> None:
    if os.getpid() != pid:
        return  # collected in a forked worker: the processes and fds are the parent's
    for w in procs:
        if w is not None:
            w.stop(1.0)
            w.close_fds()
    for fd in fds:
        os.close(fd)
    fds[:] = []


class Workers:
    """The worker processes of one loader, and the dispatch the C loader's
    fill callback runs (:meth:`fill`) on QUEUE x n clpin threads: each
    worker has up to QUEUE tasks at once."""

    def __init__(self, n: int, start_method: str, fill: Callable, worker_init: Optional[Callable],
                 seed: int, timeout: Optional[float], memfd: int, total: int, batch_bytes: int,
                 layout: tuple, nshards: int = 1, index_fd: int = -1, index_size: int = 0,
                 what: Optional[str] = None) -> None:
        self.n = n
        self.nshards = max(1, nshards)  # batch i is the (i // nshards)-th of its shard
        self.method = start_method
        self.mp = get_context(start_method)
        if start_method == "fork":
            self.fns: Any = (fill, worker_init)
        else:
            try:
                self.fns = pickle.dumps((fill, worker_init))
            except Exception as exc:  # noqa: BLE001 - any pickling failure says the same
                if what is not None:  # DatasetLoader: its fill is clpin's, the dataset is not
                    raise TypeError(
                        f"the {what} and worker_init must be picklable for start_method="
                        f"{start_method!r} (the worker process rebuilds them from a pickle: a "
                        f"class defined at module level, no open files or lambdas), or use "
                        f"start_method='fork': {exc}") from exc
                raise TypeError(
                    f"fill and worker_init must be picklable for start_method="
                    f"{start_method!r} (the worker process imports them by name: define them "
                    f"at module level), or use start_method='fork': {exc}") from exc
        self.seed = seed
        self.timeout = timeout
        self.memfd, self.total, self.batch_bytes = memfd, total, batch_bytes
        self.layout = layout
        self.index_fd, self.index_size = index_fd, index_size
        self.statefd = os.memfd_create("clpin-worker-state", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.statefd, _state_bytes(n))
            self.state = mmap.mmap(self.statefd, _state_bytes(n), flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.statefd)
            raise
        self.ppid = os.getpid()
        self.cv = threading.Condition(threading.Lock())
        self.procs: list = [None] * n  # _Worker, or None: to start before its next batch
        self.inflight = [0] * n  # tasks given to worker k and not answered
        self.last = [-1] * n  # the index of the last of them
        self.waiting: set = set()  # indices of batches waiting for a worker
        self.starting = [False] * n  # a clpin thread is starting worker k again
        self.closed = False
        self.restarts = 0
        # Workers dropped without close() (a loader that failed half made):
        # their processes end with the object. Interpreter exit is the atexit
        # hook's (clpin._fill._close_all), which closes in order.
        self.fds = [self.statefd]  # closed by close()
        self._finalizer = weakref.finalize(self, _reap, self.procs, self.fds, os.getpid())
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
        with self.cv:
            if not self.fds:  # closed
                raise _F.LoaderError(-1, None, detail="the Loader was closed")
        _WORD.pack_into(self.state, k * 8, 0)
        task_r, task_w = os.pipe()
        res = [os.pipe() for _ in range(QUEUE)]
        close_fds: list = []
        if self.method == "fork":
            with self.cv:
                others = [w for w in self.procs if w is not None]
            for w in others:
                close_fds += [w.task] + list(w.results)
            close_fds += [task_w] + [r for r, _ in res]
            close_fds = [(fd, ino) for fd, ino in ((fd, _inode(fd)) for fd in close_fds)
                         if ino is not None]
        # PR_SET_PDEATHSIG fires when the *thread* that forked the worker
        # ends: tie it only to the main thread (or the forkserver's).
        pdeath = self.method == "forkserver" or _long_lived_thread()
        # The parent it watches: this process, or under forkserver the
        # forkserver (which ends when this process does).
        ppid = 0 if self.method == "forkserver" else self.ppid
        proc = self.mp.Process(
            target=_worker_main, name=f"clpin-worker-{k}", daemon=True,
            args=(k, self.n, self.seed, _Fd(self.memfd), self.total, self.batch_bytes,
                  self.layout, self._index(), self.fns, _Fd(task_r), [_Fd(w) for _, w in res],
                  _Fd(self.statefd), close_fds, pdeath, ppid))
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns of fork() in a threaded process: the
                # worker only runs Python and numpy, never OpenCL or clpin.
                warnings.simplefilter("ignore", DeprecationWarning)
                with _PROCESS_LOCK:
                    proc.start()
        except BaseException:
            for fd in [task_w] + [r for r, _ in res]:
                os.close(fd)
            raise
        finally:
            os.close(task_r)
            for _, w in res:
                os.close(w)
        return _Worker(k, proc, task_w, [r for r, _ in res])

    def _index(self) -> Optional[tuple]:
        """What a worker needs to read each slot's sample indices, or None."""
        if self.index_fd < 0:
            return None
        per_slot = self.index_size // 8 // max(1, self._slots())
        return (_Fd(self.index_fd), self.index_size, per_slot - 1)

    def _slots(self) -> int:
        return self.total // _F._slot_stride(self.batch_bytes)

    def _ready(self, w: _Worker, index: Optional[int]) -> None:
        """Wait for worker w's first message; raise WorkerError if it failed."""
        # A start (an interpreter under spawn, worker_init) may take longer
        # than a batch: bounded by timeout, but never below a minute.
        limit = None if self.timeout is None else max(self.timeout, 60.0)
        kind, payload = self._answer(w, 0, index, limit, "before it was ready: under "
                                     f"start_method={self.method!r} its stderr says why (an "
                                     "import of fill, or of __main__ without an `if __name__ == "
                                     "'__main__':` guard)"
                                     if self.method != "fork" else "before it was ready")
        if kind == _READY:
            return
        tname, text, tb, blob, _words = pickle.loads(payload)
        w.stop()
        err = _F.WorkerError(
            f"worker {w.id} (pid {w.pid}) failed to start: {tname}: {text}\n"
            f"(under start_method={self.method!r} fill and worker_init are loaded in the "
            f"worker by name: they must be importable there)\n--- worker traceback ---\n{tb}",
            index=index, pid=w.pid, worker=w.id)
        cause = _rebuild(blob)
        if cause is not None:
            err.__cause__ = cause
        raise err

    def _filling(self, w: _Worker) -> int:
        """The batch w is filling now (-1: none, or the loader closed), as it says."""
        try:
            return _WORD.unpack_from(self.state, w.id * 8)[0] - 1
        except ValueError:  # unmapped by close()
            return -1

    def _answer(self, w: _Worker, channel: int, index: Optional[int], limit: Optional[float],
                doing: str, task: bool = False) -> tuple:
        """The next answer (kind, payload) of w on `channel`, or WorkerError
        when it died or ran past `limit` seconds (then it is stopped). A task
        (`task`) the worker had not begun when it ended raises _Requeue."""
        fd = w.results[channel]
        sentinel = w.proc.sentinel
        deadline = None if limit is None else time.monotonic() + limit
        poller = select.poll()  # not select(): descriptors above 1023 happen
        poller.register(fd, select.POLLIN)
        poller.register(sentinel, select.POLLIN)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready = [f for f, _ in poller.poll(None if left is None else
                                                   max(1, int(left * 1000 + 0.999)))]
            except (OSError, ValueError):
                ready = [sentinel]
            if fd in ready:
                try:
                    head = _read_exact(fd, _REPLY.size)
                    if head is not None:
                        kind, size = _REPLY.unpack(head)
                        payload = _read_exact(fd, size) if size else b""
                        if payload is not None:
                            return kind, payload
                except OSError:
                    pass  # the pipe closed: the process is ending
                w.join(2.0)
                break
            if sentinel in ready:
                w.join(2.0)
                break
            if deadline is not None and time.monotonic() >= deadline:
                if task and self._filling(w) != index:
                    deadline = time.monotonic() + limit  # queued behind another: from its start
                    continue
                with self.cv:
                    if w.filling is None:
                        w.filling = index if task else -1
                what = f"batch {index}" if index is not None else "its start"
                w.why = (f"worker {w.id} (pid {w.pid}) did not finish {what} within {limit} s "
                         f"(timeout={self.timeout}); the worker was stopped (SIGKILL)")
                w.stop()
                raise _F.WorkerError(w.why, index=index, pid=w.pid, worker=w.id,
                                     timed_out=True)
        with self.cv:
            if w.filling is None:
                w.filling = self._filling(w)
        code, sig, words = _how_it_ended(w.proc)
        w.stop()
        if task and not self.closed and w.filling != index:
            raise _Requeue()  # it never began this batch: another worker fills it
        if self.closed:
            raise _F.WorkerError(f"the Loader was closed (worker {w.id}, pid {w.pid})",
                                 index=index, pid=w.pid, worker=w.id, exitcode=code, signal=sig)
        if w.why is not None:  # a batch before this one ran past timeout
            raise _F.WorkerError(f"{w.why}, at batch {index}, which it had queued", index=index,
                                 pid=w.pid, worker=w.id, exitcode=code, signal=sig,
                                 timed_out=True)
        at = f" at batch {index}" if index is not None else ""
        raise _F.WorkerError(f"worker {w.id} (pid {w.pid}) {words}{at} ({doing})",
                             index=index, pid=w.pid, worker=w.id, exitcode=code, signal=sig)

    def close(self) -> None:
        """End every worker: idle ones are told to leave, busy ones (their
        batch is dropped) and any still there after a grace are SIGKILLed."""
        with self.cv:
            self.closed = True
            ws = [w for w in self.procs if w is not None]
            busy = [w for w in ws if self.inflight[w.id]]
            for w in ws:
                w.dead = True
            self.cv.notify_all()
        for w in ws:
            if w in busy:
                w.kill()
            else:
                try:
                    os.write(w.task, _TASK.pack(-1, 0, 0))
                except (OSError, ValueError):
                    pass
        end = time.monotonic() + _GRACE_S
        for w in ws:
            w.join(max(0.0, end - time.monotonic()))
        for w in ws:
            w.stop()
        with self.cv:  # pipes a clpin thread still reads are closed by it
            for w in ws:
                if not w.users:
                    w.close_fds()
            fds, self.fds[:] = list(self.fds), []
        for fd in fds:
            os.close(fd)
        self._close_state()

    def _close_state(self) -> None:
        """Unmap the state memory (its mapping holds an fd of its own) once
        no clpin thread can read it: the loader's threads are joined, or
        none is in a fill (they read it only there, under users)."""
        with self.cv:
            if any(w is not None and w.users for w in self.procs) or any(self.starting):
                return  # the last user's close (feed.release) does it
            try:
                self.state.close()
            except (BufferError, ValueError):
                pass

    def pids(self) -> list:
        with self.cv:
            return [w.pid if w is not None else None for w in self.procs]

    # -- dispatch (a clpin thread, in the fill callback)

    def _usable(self, k: int) -> bool:
        """Whether worker k can take a task now (under cv)."""
        if self.starting[k] or self.inflight[k] >= QUEUE:
            return False
        w = self.procs[k]
        return w is None or not w.dead  # a dead one's threads are still reading it

    def _take(self, index: int) -> tuple:
        """(k, worker or None to start again) with a free channel; under cv.
        A batch goes to its own worker (the n-th batch of the shard to
        worker n % workers, every epoch, as DataLoader deals them) when that
        one can take it; else an idle worker goes to the earliest batch
        waiting for one. A batch is queued only behind an earlier one (which
        in order comes first anyway), never behind a later one."""
        # The same batch on the same worker every epoch: a forked worker
        # copies (copy-on-write) only the pages of the data its own batches
        # touch, once, and keeps them in its caches. Dealt to whichever
        # worker is free, every worker ends up copying all of the parent's
        # Python objects, page by page, epoch after epoch: measured on 16
        # cores, 38% more CPU a batch in the workers of a per-sample Python
        # fill (docs/PYTHON.md, "Which worker_method").
        own = (index // self.nshards) % self.n
        self.waiting.add(index)
        try:
            while True:
                if self.closed:
                    return -1, None
                if self._usable(own) and (not self.inflight[own] or self.last[own] < index):
                    return own, self.procs[own]
                idle = queued = -1
                for k in range(self.n):
                    if not self._usable(k):
                        continue
                    if not self.inflight[k]:
                        if idle < 0:
                            idle = k
                    elif self.last[k] < index and queued < 0:
                        queued = k
                if idle >= 0 and index == min(self.waiting):
                    return idle, self.procs[idle]
                if queued >= 0:
                    return queued, self.procs[queued]
                if idle >= 0 and self.waiting_woken(index):
                    return idle, self.procs[idle]
                self.cv.wait()
        finally:
            self.waiting.discard(index)

    def waiting_woken(self, index: int) -> bool:
        """Whether the idle worker a later batch sees may be its own: the
        earlier batches waiting are as many as idle workers, or fewer."""
        earlier = sum(1 for i in self.waiting if i < index)
        idle = sum(1 for k in range(self.n) if not self.inflight[k] and not self.starting[k]
                   and not (self.procs[k] is not None and self.procs[k].dead))
        return earlier < idle

    def fill(self, slot: int, index: int) -> bool:
        """Have a worker fill `slot` with batch `index`. True: filled; False:
        fill ended the epoch. Raises LoaderError / WorkerError."""
        while True:
            try:
                return self._fill(slot, index)
            except _Requeue:
                pass  # its worker ended before it began this batch

    def _fill(self, slot: int, index: int) -> bool:
        with self.cv:
            k, w = self._take(index)
            if k < 0:
                raise _F.LoaderError(index, None, detail="the Loader was closed")
            self.inflight[k] += 1
            self.last[k] = index
            if w is None:
                self.starting[k] = True
            else:  # in the same hold as _take: w cannot be closed meanwhile
                w.users += 1
                c = w.busy.index(False)
                w.busy[c] = True
        if w is None:  # died or timed out earlier: a new one takes its place
            try:
                w = self._start(k)
            except BaseException:
                with self.cv:
                    self.starting[k] = False
                    self.inflight[k] -= 1
                    self.cv.notify_all()
                raise
            with self.cv:
                self.procs[k] = w
                self.restarts += 1
                w.users += 1
                if self.closed:
                    w.dead = True
            try:
                if w.dead:
                    w.stop()
                    raise _F.LoaderError(index, None, detail="the Loader was closed")
                self._ready(w, index)
            except BaseException:
                with self.cv:
                    w.dead = True
                    self.starting[k] = False
                    self.inflight[k] -= 1
                    if self.procs[k] is w:
                        self.procs[k] = None
                    w.users -= 1
                    if not w.users:
                        w.close_fds()
                    self.cv.notify_all()
                raise
            with self.cv:
                self.starting[k] = False
                self.cv.notify_all()
                c = w.busy.index(False)
                w.busy[c] = True
        try:
            try:
                os.write(w.task, _TASK.pack(c, slot, index))
            except (OSError, ValueError):
                pass  # it died: _answer says how
            kind, payload = self._answer(w, c, index, self.timeout, "while filling it", True)
        except (_F.WorkerError, _Requeue):
            with self.cv:
                w.dead = True
                if self.procs[k] is w:
                    self.procs[k] = None
            raise
        finally:
            with self.cv:
                w.busy[c] = False
                w.users -= 1
                self.inflight[k] -= 1
                if w.dead and not w.users:
                    w.close_fds()
                self.cv.notify_all()
        if kind == _OK:
            return True
        if kind == _END:
            return False
        tname, text, tb, blob, words = pickle.loads(payload)
        cause = _rebuild(blob)
        err = _F.LoaderError(index, cause, detail=f"{words or f'{tname}: {text}'}\n--- worker "
                             f"{k} (pid {w.pid}) traceback ---\n{tb}")
        if cause is not None:
            err.__cause__ = cause
        raise err
