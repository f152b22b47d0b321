"""One retry policy for both Slurm backends: which failures are slurmctld passing through
a bad moment, and how often and how long to try again."""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, TypeVar

    T = TypeVar("T")

# What Slurm's client library and CLI say when slurmctld is busy, failing over or out of
# reach: worth another attempt. Anything else is an answer.
TRANSIENT = (r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|"
             r"Connection refused|Connection timed out|Resource temporarily unavailable|"
             r"Slurm backup controller in standby mode|slurmctld is busy|"
             r"Communication connection failure")


class Transient(Exception):
    """A failure worth another attempt."""


def is_transient(text: str) -> bool:
    return re.search(TRANSIENT, text or "", re.IGNORECASE) is not None


def with_retries(once: Callable[[], T], attempts: int) -> T:
    """``once()`` until it returns, at most ``attempts`` times, waiting 0.1 s doubling to
    2 s after each :class:`Transient`; the last Transient propagates.

    The first attempt runs without tenacity, which is imported only when there is
    something to retry (most calls succeed at once); tenacity counts it as attempt 1."""
    try:
        return once()
    except Transient as exc:
        if attempts <= 1:
            raise
        first: list[Transient] = [exc]

    def attempt() -> T:
        if first:
            raise first.pop()
        return once()

    import tenacity

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=0.2, min=0.1, max=2.0),
        retry=tenacity.retry_if_exception_type(Transient), reraise=True)
    return retrying(attempt)
