# SPDX-License-Identifier: Apache-2.0
"""``clpin.mpi``: pyopencl arrays across MPI ranks, over mpi4py.

The functions call libclpin-mpi (include/clpin_mpi.h), which moves device
buffers between ranks through clpin's pinned memory, pipelined, and between
ranks of one host through shared memory that both devices reach by DMA.
docs/MPI.md says which call to use when and how fast each runs::

    from mpi4py import MPI
    import clpin.mpi

    clpin.mpi.send(x, dest=1)               # rank 0
    clpin.mpi.recv(y, source=0)             # rank 1
    r = clpin.mpi.irecv(y, source=peer, tag=1)   # both ways at once:
    s = clpin.mpi.isend(x, dest=peer, tag=2)     # one tag each way
    s.wait(); r.wait()
    clpin.mpi.allreduce(grad, op="sum")     # every rank, in place
    clpin.mpi.bcast(weights, root=0)        # every rank, in place
    reqs = [clpin.mpi.iallreduce(g) for g in buckets]  # in order, while
    for r in reqs: r.wait()                 # the device goes on

Every function takes a contiguous ``pyopencl.array.Array``, waits for the
array's ``events`` first, and (``recv``, ``allreduce``, ``bcast``) adds the
event of the upload to them, so later pyopencl work on the array is ordered
after it. ``comm`` is an ``mpi4py.MPI.Comm`` (``None``: ``MPI.COMM_WORLD``).
Errors raise :class:`clpin.Error` with clpin's code and the library's detail
(MPI's own text for a failing MPI call). The collectives agree on their
arguments first: a call refused on one rank, in Python or in C, for any
argument but ``comm`` (which names the ranks to tell), raises on every rank
(``CLPIN_ERR_PEER`` on the others), and no rank hangs. They agree on
``CLPIN_MPI_CHUNK`` too: ranks that set it differently get
``CLPIN_ERR_MISMATCH`` on every rank. A rank may send to itself (a halo
exchange on one rank): the send returns once its bytes are read, whether or
not the receive was made yet.

The library is ``libclpin-mpi.so``, found beside the loaded ``libclpin``
(or named by ``CLPIN_MPI_LIBRARY``). mpi4py must use the MPI the library
was built with.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Optional

import cffi
import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
from mpi4py import MPI

from . import _native
from ._errors import Error

__all__ = ["send", "recv", "isend", "irecv", "Request", "allreduce", "iallreduce", "bcast", "ibcast",
           "release", "stats",
           "library_path"]

# MPI's handle types differ between implementations (Open MPI: pointers,
# MPICH: int); mpi4py says how large they are, and an integer of that size
# travels the same way through the C ABI.
_HANDLE = {8: "intptr_t", 4: "int32_t"}[MPI._sizeof(MPI.Comm)]

ffi = cffi.FFI()
ffi.cdef(
    f"""
    typedef int32_t cl_int;
    typedef uint32_t cl_uint;
    typedef struct _cl_command_queue *cl_command_queue;
    typedef struct _cl_mem *cl_mem;
    typedef struct _cl_event *cl_event;
    typedef {_HANDLE} MPI_Comm;
    typedef {_HANDLE} MPI_Datatype;
    typedef {_HANDLE} MPI_Op;
    struct clpin_mpi_stats {{
      size_t struct_size;
      uint64_t bytes_sent_shm, bytes_sent_p2p, bytes_received_shm, bytes_received_p2p;
      uint64_t allreduce_shm, allreduce_ring, allreduce_small;
      uint64_t bcast_shm, bcast_p2p, segments;
    }};
    cl_int clpin_mpi_send(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                          int dest, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl);
    cl_int clpin_mpi_recv(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                          int source, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                          cl_event *event);
    cl_int clpin_mpi_allreduce(cl_command_queue queue, cl_mem buffer, size_t count,
                               MPI_Datatype type, MPI_Op op, MPI_Comm comm, cl_uint nw,
                               const cl_event *wl, cl_event *event);
    cl_int clpin_mpi_bcast(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                           int root, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                           cl_event *event);
    typedef struct clpin_mpi_request clpin_mpi_request;
    cl_int clpin_mpi_isend(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                           int dest, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                           clpin_mpi_request **request);
    cl_int clpin_mpi_irecv(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                           int source, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                           clpin_mpi_request **request);
    cl_int clpin_mpi_iallreduce(cl_command_queue queue, cl_mem buffer, size_t count,
                                MPI_Datatype type, MPI_Op op, MPI_Comm comm, cl_uint nw,
                                const cl_event *wl, clpin_mpi_request **request);
    cl_int clpin_mpi_ibcast(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                            int root, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                            clpin_mpi_request **request);
    cl_int clpin_mpi_wait(clpin_mpi_request *request, cl_event *event);
    cl_int clpin_mpi_test(clpin_mpi_request *request, int *done);
    cl_int clpin_mpi_release(MPI_Comm comm);
    cl_int clpin_mpi_stats(struct clpin_mpi_stats *stats);
    const char *clpin_mpi_last_error_detail(void);
    """
)


def _candidates() -> list[str]:
    here = os.path.dirname(_native.library_path) if os.sep in _native.library_path else ""
    # The SONAME follows libclpin's (CMakeLists.txt's policy).
    names = [f"libclpin-mpi.so.{_native.SOVERSION}", "libclpin-mpi.so"]
    out = [os.path.join(here, n) for n in names] if here else []
    return out + names + [f"/usr/local/lib/libclpin-mpi.so.{_native.SOVERSION}"]


def _open() -> tuple[Any, str]:
    path = os.environ.get("CLPIN_MPI_LIBRARY")
    if path:
        return ffi.dlopen(path), path
    errors = []
    for name in _candidates():
        try:
            return ffi.dlopen(name), name
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError(
        "clpin.mpi: cannot load libclpin-mpi (" + "; ".join(errors) + "); build clpin with MPI "
        "(CMake -DCLPIN_MPI=ON) or set CLPIN_MPI_LIBRARY to its path"
    )


lib, library_path = _open()

_TYPES = {
    np.dtype(np.float32): MPI.FLOAT,
    np.dtype(np.float64): MPI.DOUBLE,
    np.dtype(np.int32): MPI.INT,
    np.dtype(np.int64): MPI.LONG_LONG,
}
_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def _handle(obj: Any) -> int:
    return MPI._handleof(obj)


def _comm(comm: Optional[MPI.Comm]) -> int:
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py.MPI.Comm, not {type(comm).__name__}")
    return _handle(comm)


def _c_int(name: str, value: Any) -> int:
    """value as a C int, or a TypeError / ValueError naming the argument."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"{name} {v} does not fit a C int (-2**31 ... 2**31 - 1)")
    return v


def _check(err: int, call: str) -> None:
    if err != 0:
        detail = ffi.string(lib.clpin_mpi_last_error_detail()).decode(errors="replace")
        raise Error(err, call, detail)


def _array(array: Any) -> tuple[Any, Any, int, int, tuple[int, Any]]:
    """(queue, cl_mem, byte offset, bytes, (n, wait list)) of a device array."""
    if not isinstance(array, cl_array.Array):
        raise TypeError(f"array must be a pyopencl.array.Array, not {type(array).__name__}")
    if not array.flags.forc:
        raise ValueError("a non-contiguous pyopencl.array.Array cannot be sent")
    if array.queue is None:
        raise ValueError("the array has no queue: create it with one (or use with_queue)")
    if array.base_data is None:
        # An empty Array has no buffer, and the C calls need one (as OpenCL's
        # do): a one-byte stand-in moves the empty message.
        array._clpin_empty = getattr(array, "_clpin_empty", None) or cl.Buffer(
            array.queue.context, cl.mem_flags.READ_WRITE, 1)
        mem = ffi.cast("cl_mem", array._clpin_empty.int_ptr)
    else:
        mem = ffi.cast("cl_mem", array.base_data.int_ptr)
    events = [e for e in array.events]
    wl = ffi.new("cl_event[]", [ffi.cast("cl_event", e.int_ptr) for e in events]) if events else ffi.NULL
    q = ffi.cast("cl_command_queue", array.queue.int_ptr)
    return q, mem, int(array.offset), int(array.nbytes), (len(events), wl)


def _adopt(array: cl_array.Array, out: Any) -> Optional[cl.Event]:
    if out[0] == ffi.NULL:
        return None
    ev = cl.Event.from_int_ptr(int(ffi.cast("uintptr_t", out[0])), retain=False)
    array.add_event(ev)
    return ev


def send(array: cl_array.Array, dest: int, tag: int = 0, comm: Optional[MPI.Comm] = None) -> None:
    """Send the array's bytes to rank ``dest`` of ``comm``.

    Returns when the array may be changed again (its bytes were read from
    the device). The receiver calls :func:`recv` with an array of the same
    number of bytes; a multi-chunk message of another size raises
    ``CLPIN_ERR_MISMATCH`` on both sides. ``dest`` may be this rank: the
    bytes then wait in host memory for the matching :func:`recv`.
    """
    q, mem, off, n, (nw, wl) = _array(array)
    _check(lib.clpin_mpi_send(q, mem, off, n, _c_int("dest", dest), _c_int("tag", tag), _comm(comm),
                              nw, wl), "clpin_mpi_send")


def recv(array: cl_array.Array, source: int, tag: int = 0,
         comm: Optional[MPI.Comm] = None) -> Optional[cl.Event]:
    """Receive ``array.nbytes`` from rank ``source`` of ``comm`` into the array.

    Returns once every byte arrived and its upload is enqueued; the
    returned ``pyopencl.Event`` (also added to ``array.events``) completes
    with the upload.
    """
    q, mem, off, n, (nw, wl) = _array(array)
    out = ffi.new("cl_event *")
    _check(lib.clpin_mpi_recv(q, mem, off, n, _c_int("source", source), _c_int("tag", tag),
                              _comm(comm), nw, wl, out), "clpin_mpi_recv")
    return _adopt(array, out)


class Request:
    """A send, receive or collective running while the caller goes on
    (:func:`isend`, :func:`irecv`, :func:`iallreduce`, :func:`ibcast`).
    :meth:`wait` ends it and raises what the blocking call would have
    raised; a request dropped without a wait is waited for (its thread may
    be using the array), and its error is then lost."""

    def __init__(self, handle: Any, array: cl_array.Array, call: str) -> None:
        self._handle, self._array, self._call = handle, array, call
        self._result: Optional[cl.Event] = None

    @property
    def done(self) -> bool:
        """Whether :meth:`wait` would return at once."""
        return self._handle is None or self.test()

    def test(self) -> bool:
        """True once the request has ended (then :meth:`wait` returns at once)."""
        if self._handle is None:
            return True
        flag = ffi.new("int *")
        _check(lib.clpin_mpi_test(self._handle, flag), "clpin_mpi_test")
        return bool(flag[0])

    def wait(self) -> Optional[cl.Event]:
        """Wait for the end. A receive or a collective returns the upload's
        ``pyopencl.Event`` (also added to the array's ``events``), a send
        None. Raises
        :class:`clpin.Error` as :func:`send` / :func:`recv` would; a second
        call returns what the first did."""
        if self._handle is None:
            return self._result
        handle, self._handle = self._handle, None
        out = ffi.new("cl_event *")
        _check(lib.clpin_mpi_wait(handle, out), self._call)
        self._result = _adopt(self._array, out)
        return self._result

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            if exc[0] is None:
                self.wait()
            else:  # already unwinding: end it, keep the first error
                lib.clpin_mpi_wait(self._handle, ffi.NULL)
                self._handle = None

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self._handle = None
            try:
                lib.clpin_mpi_wait(handle, ffi.NULL)
            except Exception:  # noqa: BLE001 - interpreter exit: the module may be gone
                pass


def _start(fn: Any, call: str, array: cl_array.Array, peer: int, tag: int,
           comm: Optional[MPI.Comm]) -> Request:
    q, mem, off, n, (nw, wl) = _array(array)
    who = "source" if call == "clpin_mpi_irecv" else "dest"
    peer, tag, c = _c_int(who, peer), _c_int("tag", tag), _comm(comm)
    req = ffi.new("clpin_mpi_request **")
    _check(fn(q, mem, off, n, peer, tag, c, nw, wl, req), call)
    return Request(req[0], array, call)


def isend(array: cl_array.Array, dest: int, tag: int = 0,
          comm: Optional[MPI.Comm] = None) -> Request:
    """:func:`send` that returns at once, a :class:`Request` to wait for.

    The send runs on a thread of the library; until the wait, change nothing
    in the array. Needs MPI at ``MPI_THREAD_MULTIPLE`` (mpi4py's default).
    Requests with one peer that run at once need tags of their own (one
    each way for an exchange). A bad argument raises here, before anything
    is sent.
    """
    return _start(lib.clpin_mpi_isend, "clpin_mpi_isend", array, dest, tag, comm)


def irecv(array: cl_array.Array, source: int, tag: int = 0,
          comm: Optional[MPI.Comm] = None) -> Request:
    """:func:`recv` that returns at once, a :class:`Request` whose
    :meth:`~Request.wait` returns the upload's event. Until then the array's
    bytes may change at any time."""
    return _start(lib.clpin_mpi_irecv, "clpin_mpi_irecv", array, source, tag, comm)


def _refuse_collective(call: str, c: int) -> None:
    """A collective refused in Python still takes part in the C call's
    agreement (with a NULL queue, which C refuses locally): the other ranks
    then fail with CLPIN_ERR_PEER instead of waiting for this one."""
    if call == "allreduce":
        lib.clpin_mpi_allreduce(ffi.NULL, ffi.NULL, 0, _handle(MPI.FLOAT), _handle(MPI.SUM), c, 0,
                                ffi.NULL, ffi.NULL)
    else:
        lib.clpin_mpi_bcast(ffi.NULL, ffi.NULL, 0, 0, 0, c, 0, ffi.NULL, ffi.NULL)


def _allreduce_args(array: cl_array.Array, op: str, c: int) -> tuple[Any, ...]:
    """The C call's arguments (but comm), or the Python refusal raised after
    this rank told the others (see :func:`_refuse_collective`): every
    argument is converted and checked inside, whatever it raises."""
    try:
        if op not in _OPS:
            raise ValueError(f'op must be "sum", "max" or "min", not {op!r}')
        if not isinstance(array, cl_array.Array):
            raise TypeError(f"array must be a pyopencl.array.Array, not {type(array).__name__}")
        mtype = _TYPES.get(np.dtype(array.dtype))
        if mtype is None:
            raise TypeError(f"dtype must be float32, float64, int32 or int64, not {array.dtype}")
        if array.offset:
            raise ValueError("allreduce needs an array that starts its buffer (offset 0); "
                             "copy a view into its own array first")
        q, mem, _, _, (nw, wl) = _array(array)
        return q, mem, int(array.size), _handle(mtype), _handle(_OPS[op]), nw, wl
    except BaseException:
        _refuse_collective("allreduce", c)
        raise


def allreduce(array: cl_array.Array, op: str = "sum",
              comm: Optional[MPI.Comm] = None) -> cl_array.Array:
    """Combine every rank's array element-wise with ``op``, in place.

    ``op`` is ``"sum"``, ``"max"`` or ``"min"``; the dtype float32, float64,
    int32 or int64. Every rank passes an array of the same size and dtype.
    Returns the array (its ``events`` hold the upload of the result).
    A ``TypeError`` or ``ValueError`` raised here for a bad argument is
    raised after this rank told the others, which raise ``clpin.Error``
    (``CLPIN_ERR_PEER``): no rank is left waiting.
    """
    c = _comm(comm)
    q, mem, count, mtype, mop, nw, wl = _allreduce_args(array, op, c)
    out = ffi.new("cl_event *")
    _check(lib.clpin_mpi_allreduce(q, mem, count, mtype, mop, c, nw, wl, out),
           "clpin_mpi_allreduce")
    _adopt(array, out)
    return array


def iallreduce(array: cl_array.Array, op: str = "sum",
               comm: Optional[MPI.Comm] = None) -> Request:
    """:func:`allreduce` that returns at once, a :class:`Request` whose
    :meth:`~Request.wait` returns the upload's event.

    Collectives on one communicator run in the order this rank made them,
    blocking ones included, so several may be outstanding (one per bucket
    of gradients, say, while the device computes the next). Until the wait,
    read nothing of the array. A refusal in C (another rank's, or a size
    that differs) is raised by the wait; a ``TypeError`` or ``ValueError``
    raised here has told the other ranks first, as :func:`allreduce`'s.
    Needs MPI at ``MPI_THREAD_MULTIPLE``.
    """
    c = _comm(comm)
    q, mem, count, mtype, mop, nw, wl = _allreduce_args(array, op, c)
    req = ffi.new("clpin_mpi_request **")
    _check(lib.clpin_mpi_iallreduce(q, mem, count, mtype, mop, c, nw, wl, req),
           "clpin_mpi_iallreduce")
    return Request(req[0], array, "clpin_mpi_iallreduce")


def _bcast_args(array: cl_array.Array, root: Any, c: int) -> tuple[Any, ...]:
    """As :func:`_allreduce_args`, for bcast: root too is converted to a C
    int inside (a root of another type, or past a C int, on one rank once
    raised there before the others heard of it, and they waited for ever)."""
    try:
        q, mem, off, n, (nw, wl) = _array(array)
        return q, mem, off, n, _c_int("root", root), nw, wl
    except BaseException:
        _refuse_collective("bcast", c)
        raise


def bcast(array: cl_array.Array, root: int = 0,
          comm: Optional[MPI.Comm] = None) -> cl_array.Array:
    """Copy root's array into every rank's array (same number of bytes on
    every rank), in place. Returns the array. A bad argument on one rank
    (``root`` included: not an int, or past a C int, raises ``TypeError`` /
    ``ValueError`` there) raises there and ``clpin.Error``
    (``CLPIN_ERR_PEER``) on the others."""
    c = _comm(comm)
    q, mem, off, n, root, nw, wl = _bcast_args(array, root, c)
    out = ffi.new("cl_event *")
    _check(lib.clpin_mpi_bcast(q, mem, off, n, root, c, nw, wl, out), "clpin_mpi_bcast")
    _adopt(array, out)
    return array


def ibcast(array: cl_array.Array, root: int = 0,
           comm: Optional[MPI.Comm] = None) -> Request:
    """:func:`bcast` that returns at once, as :func:`iallreduce` is to
    :func:`allreduce`, in order with the communicator's other collectives."""
    c = _comm(comm)
    q, mem, off, n, root, nw, wl = _bcast_args(array, root, c)
    req = ffi.new("clpin_mpi_request **")
    _check(lib.clpin_mpi_ibcast(q, mem, off, n, root, c, nw, wl, req), "clpin_mpi_ibcast")
    return Request(req[0], array, "clpin_mpi_ibcast")


def release(comm: Optional[MPI.Comm] = None) -> None:
    """Free the shared segments cached for ``comm`` now (local, no
    communication); they are set up again when next needed."""
    _check(lib.clpin_mpi_release(_comm(comm)), "clpin_mpi_release")


def stats() -> dict[str, int]:
    """This process's bytes and calls per path (``struct clpin_mpi_stats``)."""
    s = ffi.new("struct clpin_mpi_stats *")
    s.struct_size = ffi.sizeof("struct clpin_mpi_stats")
    _check(lib.clpin_mpi_stats(s), "clpin_mpi_stats")
    return {f: int(getattr(s, f)) for f, _ in ffi.typeof("struct clpin_mpi_stats").fields
            if f != "struct_size"}
