"""Sizes a request may ask for: refuse, before any work starts, what cannot fit in memory.

A flag such as `--ratings 1e12` or a file header declaring 10^12 rows used to start allocating
and end in a MemoryError traceback (or swap for minutes). Commands estimate the bytes a request
needs from its sizes alone and call `refuse_unless_fits` first, so the user gets one line naming
the flag or file instead.
"""

from __future__ import annotations

import os

from hamsi.errors import InputError

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")


def available_bytes() -> int:
    """Return the memory this process could still allocate (MemAvailable; psutil when present)."""
    try:
        # why lazy: psutil is optional (it comes with distributed); sysconf is the fallback
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # psutil comes with distributed; POSIX sysconf is the fallback
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def human_bytes(count: float) -> str:
    """Return a byte count as '7.3 TB' (powers of 1024)."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.3g} {_UNITS[unit]}"


def refuse_unless_fits(what: str, nbytes: float) -> None:
    """Raise InputError naming `what` when `nbytes` exceed the memory available now."""
    available = available_bytes()
    if not nbytes <= available:
        raise InputError(
            f"{what} needs about {human_bytes(nbytes)} of memory, more than the "
            f"{human_bytes(available)} available"
        )
