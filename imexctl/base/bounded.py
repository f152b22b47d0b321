"""A call that may hang (an NVML query), run under a deadline.

A hung NVML query would otherwise hold the hook until Slurm's PrologEpilogTimeout drains
the tray with a reason that names nothing (NVML and DCGM calls do hang on real trays,
NVSentinel #1748). The call runs in a daemon thread and tells what it is about to call
(``progress``), so a hang ends in an error that names the call while the hook goes on:
ctypes releases the GIL for the C call, and a thread stuck in it never keeps the process
from exiting (hooks leave with ``os._exit``). A thread, not a child process: NVML's
handle and a test's stand-in of its C layer stay in this process.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    _T = TypeVar("_T")


class Hung(Exception):
    """The call did not answer within its deadline; ``doing`` is its last progress."""

    def __init__(self, doing: str, timeout_s: float):
        self.doing, self.timeout_s = doing, timeout_s
        super().__init__(f"{doing or 'the call'} did not answer in {timeout_s:g}s")


def call(fn: Callable[[Callable[[str], None]], _T], timeout_s: float,
         name: str = "imexctl-bounded") -> _T:
    """``fn(progress)`` under ``timeout_s``: its result, or its exception re-raised here;
    Hung when it has not returned in time (the thread is left to finish or hang alone)."""
    state: dict[str, Any] = {"doing": ""}
    done = threading.Event()

    def progress(text: str) -> None:
        state["doing"] = str(text)

    def run() -> None:
        try:
            state["result"] = fn(progress)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            state["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(timeout_s):
        raise Hung(state["doing"], timeout_s)
    if "error" in state:
        raise state["error"]
    return state["result"]


__all__ = ["call", "Hung"]
