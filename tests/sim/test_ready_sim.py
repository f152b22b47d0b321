"""imexctl.imex.ready against the real simulator: every tray's prolog waits and nudges.

Time scale 0.4: back-off retry 6 s after a failed dial, SIGUSR1 window 2 s.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from imexctl.imex.ctl import CtlClient
from imexctl.imex.ready import Member, wait_until_up

from tests.support.sim import poll

SCALE = "0.4"


def members(dom) -> list[Member]:
    return [Member(f"tray{i:02d}", a) for i, a in enumerate(dom.addresses)]


def client(dom, tray) -> CtlClient:
    return CtlClient(Path(dom.ctl_bin), tray.cfg, tray.env(), timeout_s=5)


def wait_all(dom, budget: float, nudging: bool, trays=None) -> dict:
    """Run wait_until_up for each tray in parallel, as each tray's prolog would."""
    out = {}

    def one(t):
        nudge = (lambda: t.signal(signal.SIGUSR1)) if nudging else None
        out[t.idx] = wait_until_up(client(dom, t), members(dom), budget,
                                   local=f"tray{t.idx:02d}", nudge=nudge, poll_s=0.1,
                                   nudge_interval_s=5 * float(SCALE))
    threads = [threading.Thread(target=one, args=(t,)) for t in (trays or dom.trays)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def start_late(dom):
    """Trays 0 and 1 start and connect to each other (one SIGUSR1 each, in case one dialled
    before the other listened), their dials to tray 2 fail; then tray 2 starts."""
    t0, t1, t2 = dom.trays
    t0.start()
    t1.start()
    poll(lambda: t0.query() == t1.query() == "READY", 10)
    for t in (t0, t1):
        t.signal(signal.SIGUSR1)
    for t in (t0, t1):
        poll(lambda t=t: "SIGUSR1 received" in t.log_text() and t.log_text().count(
            f"Reconnecting to node 2 ({t2.addr}) in 6 s") == 2, 10, 0.02)
    poll(lambda: t0.domain_json()["nodes"]["1"]["connections"]["0"]["status"] ==
         t0.domain_json()["nodes"]["0"]["connections"]["1"]["status"] == "CONNECTED", 10)
    started = time.monotonic()
    t2.start()
    return started


def test_nudging_reaches_a_late_peer_before_the_backoff(sim):
    dom = sim(3, time_scale=SCALE)
    started = start_late(dom)
    res = wait_all(dom, 20, nudging=True)
    assert all(r.up for r in res.values()), res
    assert time.monotonic() - started < 15 * float(SCALE)       # before the 6 s retry
    assert res[0].nudges >= 1 and res[1].nudges >= 1
    assert all(r.local_state == "READY" and r.domain_state == "UP" for r in res.values())
    assert "SIGUSR1 received: restarting all outgoing" in dom.trays[0].log_text()


def test_without_nudging_the_wait_times_out_naming_the_links(sim):
    dom = sim(3, time_scale=SCALE)
    start_late(dom)
    poll(lambda: dom.trays[2].query() == "READY", 10)
    res = wait_all(dom, 1.5, nudging=False, trays=dom.trays[:1])[0]
    assert not res.up and res.nudges == 0 and res.checks >= 2
    assert res.reason(1.5) == ("domain DEGRADED after 2s (tray00->tray02 NEVER_CONNECTED; "
                               "tray01->tray02 NEVER_CONNECTED)")


def test_timeout_names_the_missing_tray(sim):
    dom = sim(3, time_scale=SCALE)
    for t in dom.trays[:2]:
        t.start()
    res = wait_all(dom, 1.0, nudging=True, trays=dom.trays[:1])[0]
    assert not res.up and res.local_ready
    assert res.missing == ("tray02 UNAVAILABLE",)
    assert res.reason(60) == "domain DEGRADED after 60s (tray02 UNAVAILABLE)"


def test_cmd_unreachable_tray_is_named(sim):
    dom = sim(3, time_scale=SCALE)
    dom.set_faults({"nodes": {"1": {"cmd_unreachable": True}}})
    dom.start_all()
    res = wait_all(dom, 4.0, nudging=True)
    assert res[0].missing == ("tray01 UNAVAILABLE",)
    assert "tray00->tray01" not in " ".join(res[0].links)   # the peer link itself is up
    assert res[0].reason(4) == "domain DEGRADED after 4s (tray01 UNAVAILABLE)"
    assert res[1].up                  # tray01 reaches everyone's command port itself


def test_local_daemon_down(sim):
    dom = sim(2, time_scale=SCALE)
    res = wait_all(dom, 0.5, nudging=True, trays=dom.trays[:1])[0]
    assert (res.local_state, res.domain_state, res.nudges) == ("UNAVAILABLE", "DOWN", 0)
    assert res.reason(0.5) == "local daemon UNAVAILABLE after 0s"


def test_a_tray_that_dialled_too_early_is_nudged_once_when_every_peer_listens(sim):
    """tray00 starts first: its dials to tray01 and tray02 are refused (6 s back-off).
    Its prolog's wait must not spend its nudge while they are still starting (the daemon
    would then ignore SIGUSR1 for a 2 s window after they listen): one nudge, sent once
    every member is READY, connects it."""
    dom = sim(3, time_scale=SCALE)
    t0, t1, t2 = dom.trays
    t0.start()
    poll(lambda: t0.log_text().count("Reconnecting to node") == 2, 10, 0.02)
    out = {}
    waiter = threading.Thread(target=lambda: out.update(
        wait_all(dom, 20, nudging=True, trays=[t0])))
    started = time.monotonic()
    waiter.start()
    time.sleep(1.2)              # past the fixed 1 s at which a first nudge once went
    t1.start()
    time.sleep(0.3)
    t2.start()
    res = wait_all(dom, 20, nudging=True, trays=[t1, t2])
    waiter.join()
    res[0] = out[0]
    assert all(r.up for r in res.values()), res
    assert time.monotonic() - started < 15 * float(SCALE)       # before tray00's 6 s retry
    assert res[0].nudges == 1
    log = t0.log_text()
    assert log.count("SIGUSR1 received") == 1 and "SIGUSR1 ignored" not in log
