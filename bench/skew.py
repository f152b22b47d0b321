"""How long a late tray keeps a domain from UP, with and without imexctl's nudging.

N simulated trays (default 4) each run what the prolog's wait-ready step runs: start the
daemon, then :func:`imexctl.imex.ready.wait_until_up` through the simulated ctl, either
with no nudge (the daemon's own back-off: 15, 31, 62, 125 s) or nudging its own daemon
with SIGUSR1 once every member accepts peers while a link of its own is down, at most
once per 5 s. The last tray starts ``skew`` seconds after the others.
Printed: seconds from the last tray's start until every tray's wait has seen UP, for
skews 0, 5, 20 and 50 s. Time runs scaled (``--scale``, default 0.25: a 15 s back-off
step lasts 3.75 s) and the figures are shown both as measured and unscaled (measured /
scale); the poll interval is wall-clock, so the unscaled resolution is poll_s / scale.

Usage: .venv/bin/python bench/skew.py [--trays 4] [--scale 0.25] [--skews 0,5,20,50]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

# this checkout's imexctl and its simulator (sim/, a distribution of its own)
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "sim")]

from imexctl.imex.ctl import CtlClient  # noqa: E402
from imexctl.imex.ready import BACKOFF_S, NUDGE_INTERVAL_S, Member, wait_until_up  # noqa: E402
from imexctl_sim.loopback import SimDomain  # noqa: E402


def backoff_bound(skew: float) -> float:
    """Without nudging, the early trays reach the late one at their first retry after it
    started: the first cumulative back-off sum >= skew, minus the skew."""
    t = 0.0
    for step in BACKOFF_S:
        t += step
        if t >= skew:
            return t - skew
    return float("nan")


def run(root: Path, n: int, scale: float, skew: float, nudging: bool,
        poll_s: float) -> tuple[float | None, int]:
    """(scaled seconds from the last start until every tray saw UP, nudges sent)."""
    dom = SimDomain(root, n, time_scale=f"{scale:g}")
    members = [Member(f"tray{i:02d}", a) for i, a in enumerate(dom.addresses)]
    budget = (sum(BACKOFF_S) + skew) * scale + 10
    done: dict[int, float] = {}
    nudges: dict[int, int] = {}
    t0 = time.monotonic()
    last_start = t0 + skew * scale

    def prolog(tray) -> None:
        time.sleep(max(0.0, (last_start if tray.idx == n - 1 else t0) - time.monotonic()))
        tray.start()
        client = CtlClient(Path(dom.ctl_bin), tray.cfg, tray.env(), timeout_s=5)
        nudge = (lambda: tray.signal(signal.SIGUSR1)) if nudging else None
        res = wait_until_up(client, members, budget, local=members[tray.idx].name,
                            nudge=nudge, poll_s=poll_s,
                            nudge_interval_s=NUDGE_INTERVAL_S * scale)
        nudges[tray.idx] = res.nudges
        if res.up:
            done[tray.idx] = time.monotonic()

    threads = [threading.Thread(target=prolog, args=(t,)) for t in dom.trays]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        dom.cleanup()
    if len(done) < n:
        return None, sum(nudges.values())
    return max(done.values()) - last_start, sum(nudges.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trays", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--skews", default="0,5,20,50")
    ap.add_argument("--poll", type=float, default=0.2, help="wall-clock poll interval (s)")
    args = ap.parse_args()
    skews = [float(s) for s in args.skews.split(",")]
    s = args.scale
    print(f"{args.trays} trays, time scale {s:g} (back-off "
          f"{'/'.join(f'{b * s:g}' for b in BACKOFF_S)} s, SIGUSR1 window "
          f"{NUDGE_INTERVAL_S * s:g} s), poll {args.poll:g} s = {args.poll / s:g} s unscaled")
    print("seconds from the last tray's start until every tray saw UP "
          "(measured -> unscaled; 'schedule' = the back-off alone predicts)")
    print(f"{'skew':>6} {'schedule':>9} | {'alone':>16} | {'nudged':>16} {'nudges':>6} | ratio")
    with tempfile.TemporaryDirectory(prefix="imexctl-skew-") as tmp:
        for skew in skews:
            row = []
            for nudging in (False, True):
                got, sent = run(Path(tmp) / f"{skew:g}-{nudging}", args.trays, s, skew,
                                nudging, args.poll)
                row.append((got, sent))
            cells = [f"{g:6.2f} -> {g / s:6.1f}s" if g is not None else "   never        "
                     for g, _ in row]
            ratio = (f"{row[0][0] / row[1][0]:5.1f}x" if row[0][0] and row[1][0] else "   -")
            print(f"{skew:5g}s {backoff_bound(skew):8.0f}s | {cells[0]:>16} | {cells[1]:>16} "
                  f"{row[1][1]:>6} | {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
