# SPDX-License-Identifier: Apache-2.0
"""clpin's status codes and the exception that carries them: every code of
clpin.h's CLPIN_ERROR_TABLE and CLPIN_STATUS_TABLE, named as the library
names them (clpin_strerror), so the two can never disagree.
"""

from __future__ import annotations


from ._native import ffi, lib

def _table() -> dict[str, int]:
    """Every code of clpin.h's CLPIN_ERROR_TABLE and CLPIN_STATUS_TABLE, by the
    name the library gives it (clpin_strerror), without the CLPIN_ prefix:
    {"ERR_INVALID_ARGUMENT": -20000, ..., "END": -20019, ...}."""
    out = {}
    for code in range(-20000, -20100, -1):
        text = ffi.string(lib.clpin_strerror(code)).decode()
        name = text.split(":", 1)[0]
        if name.startswith("CLPIN_") and name != "CLPIN_ERR__LAST":
            out[name[len("CLPIN_"):]] = code
    return out


#: clpin's own codes by name (``ERR_INVALID_ARGUMENT``, ..., ``END``), read
#: from the loaded library, so every code it has is here. Each is also a
#: module constant: ``clpin.ERR_INVALID_ARGUMENT``, ``clpin.END`` ...
CODES: dict[str, int] = _table()
globals().update(CODES)
# The ones the package itself names (the loader's, and the MPI library's,
# which a libclpin without MPI still names: the codes share one table).
ERR_INVALID_ARGUMENT: int = CODES["ERR_INVALID_ARGUMENT"]
END: int = CODES["END"]
ERR_CANCELLED: int = CODES["ERR_CANCELLED"]


def strerror(code: int) -> str:
    """Name and describe a clpin or OpenCL status code.

    Parameters
    ----------
    code : int
        Any ``CL_*`` or ``CLPIN_ERR_*`` code, or 0.

    Returns
    -------
    str
        ``"NAME: description"`` (``clpin_strerror``); never empty.
    """
    return ffi.string(lib.clpin_strerror(int(code))).decode()


def version() -> str:
    """The loaded library's version, ``"MAJOR.MINOR.PATCH"``."""
    return ffi.string(lib.clpin_version_string()).decode()


class Error(RuntimeError):
    """A clpin or OpenCL call failed.

    ``str(error)`` shows the call, the code's name and number, and the
    detail (or, without one, the code's description), e.g.
    ``clpin_host_lend: CLPIN_ERR_FOREIGN_POINTER (-20005): ...: no live pool
    block ... holds the whole range (CLPIN_ERR_FOREIGN_POINTER)``.

    Attributes
    ----------
    code : int
        The negative status code (``CL_*`` or ``CLPIN_ERR_*``).
    name : str
        The code's name, ``"CLPIN_ERR_INVALID_ARGUMENT"``, ``"CL_INVALID_VALUE"``
        ...; ``""`` for a code clpin does not know.
    text : str
        ``clpin_strerror(code)``: ``"NAME: description"``.
    detail : str
        What C callers get from ``clpin_last_error_detail()`` right after
        the failing call: which argument is wrong and why, e.g.
        ``"clpin_tensor_host_data: access is 0: pass CLPIN_READ and/or
        CLPIN_WRITE (CLPIN_ERR_INVALID_ARGUMENT)"``. ``""`` when the
        failure came from the driver (no argument check of clpin failed).
    call : str
        The C function that failed.
    """

    def __init__(self, code: int, call: str = "", detail: str = "") -> None:
        self.code = int(code)
        self.text = strerror(code)
        self.name = self.text.split(":", 1)[0] if ":" in self.text else ""
        self.detail = detail
        self.call = call
        what = f"{self.name} ({self.code})" if self.name else f"code {self.code}"
        why = detail or (self.text.split(": ", 1)[1] if self.name else self.text)
        super().__init__(f"{call}: {what}: {why}" if call else f"{what}: {why}")


def _last_detail(code: int) -> str:
    """This thread's clpin_last_error_detail(), if it is code's: the C text
    ends with the code's name in parentheses (libclpin-mpi's with the whole
    clpin_strerror text). A failure that came from the driver leaves an
    older failure's text there, which this rejects."""
    d = ffi.string(lib.clpin_last_error_detail()).decode(errors="replace")
    text = strerror(code)
    name = text.split(":", 1)[0] if ":" in text else f"code {code}"
    return d if d.endswith(f"({name})") or d.endswith(f"({text})") else ""


def _check(err: int, call: str) -> None:
    if err != 0:
        # Read right away, on this thread: the detail is thread-local and the
        # next failing clpin call (any thread's own) replaces it.
        raise Error(err, call, _last_detail(err))
