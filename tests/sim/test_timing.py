"""The simulator keeps the real daemon's time: back-off, no wake-on-hello, SIGUSR1.

Time scale 0.4: the first retry comes 15 x 0.4 = 6 s after a failed dial and SIGUSR1 is
honoured once per 5 x 0.4 = 2 s. Assertions are lower bounds on waits (load only makes
them longer) or have seconds of slack.
"""

from __future__ import annotations

import re
import signal
import time

from tests.support.sim import poll

SCALE = "0.4"
FIRST_RETRY = 15 * 0.4


def late_second_tray(sim, faults=None):
    """Tray 0 starts alone and fails its first dial to tray 1; then tray 1 starts."""
    dom = sim(2, time_scale=SCALE)
    if faults:
        dom.set_faults(faults)
    t0, t1 = dom.trays
    t0.start()
    poll(lambda: f"Reconnecting to node 1 ({t1.addr}) in 6 s (attempt 1)." in t0.log_text(),
         10, 0.02, "tray 0's failed first dial")
    failed_at = time.monotonic()
    t1.start()
    poll(lambda: t1.query() == "READY" and t1.domain_json()["nodes"]["1"]["connections"]["0"]
         ["status"] == "CONNECTED", 10, 0.05, "tray 1 connected to tray 0")
    return dom, failed_at


def link(dom, frm: int, to: int) -> str:
    return dom.trays[0].domain_json()["nodes"][str(frm)]["connections"][str(to)]["status"]


def test_late_peer_is_reached_only_at_the_next_backoff_step(sim):
    dom, failed_at = late_second_tray(sim)
    # tray 1 said hello to tray 0, but tray 0 does not dial back before its retry
    assert link(dom, 0, 1) == "NEVER_CONNECTED"
    assert dom.trays[0].domain_json()["status"] == "DEGRADED"
    dom.wait_up(timeout=20)
    assert time.monotonic() - failed_at >= FIRST_RETRY - 0.3
    log = dom.trays[0].log_text()
    assert "announced itself" not in log
    assert f"Connection to node 1 ({dom.addresses[1]}) established." in log


def test_wake_on_hello_only_when_a_test_asks(sim):
    dom, failed_at = late_second_tray(sim, {"wake_on_hello": True})
    dom.wait_up(timeout=FIRST_RETRY)
    assert time.monotonic() - failed_at < FIRST_RETRY
    assert "(simulator setting wake_on_hello)" in dom.trays[0].log_text()


def test_sigusr1_restarts_outgoing_links_at_most_once_per_window(sim):
    dom, failed_at = late_second_tray(sim)
    t0 = dom.trays[0]
    t0.signal(signal.SIGUSR1)
    dom.wait_up(timeout=FIRST_RETRY)
    assert time.monotonic() - failed_at < FIRST_RETRY          # before the back-off retry
    t0.signal(signal.SIGUSR1)                                   # inside the 2 s window
    poll(lambda: "SIGUSR1 ignored: processed less than 5 s ago." in t0.log_text(), 5)
    time.sleep(2.2)
    t0.signal(signal.SIGUSR1)
    poll(lambda: t0.log_text().count("SIGUSR1 received: restarting all outgoing") == 2, 5)
    dom.wait_up(timeout=5)          # restarted sessions come back at once
    # one session after the first honoured SIGUSR1, a new one after the second
    assert t0.log_text().count(f"Connection to node 1 ({dom.addresses[1]}) established.") == 2


def test_backoff_steps_grow_on_the_real_schedule(sim):
    dom = sim(2, time_scale="0.01")
    t0 = dom.trays[0]
    t0.start()                                     # node 1 never starts
    poll(lambda: "(attempt 4)." in t0.log_text(), 10)
    delays = re.findall(r"Reconnecting to node 1 \(\S+\) in ([\d.]+) s \(attempt (\d)\)",
                        t0.log_text())
    assert delays[:4] == [("0.15", "1"), ("0.31", "2"), ("0.62", "3"), ("1.25", "4")]
