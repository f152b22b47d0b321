"""imexctl.imex.ready with a scripted ctl and a fake clock (the real-simulator tests are
in tests/sim/test_ready_sim.py)."""

from __future__ import annotations

import pytest

from imexctl.imex.ctl import DomainView
from imexctl.imex.ready import (Member, ReadyResult, default_ready_timeout, wait_until_up)

NODES = [Member("tray01", "10.0.0.1"), Member("tray02", "10.0.0.2"),
         Member("tray07", "10.0.0.7")]


def view(status="UP", down=(), links=(), local_state="READY") -> DomainView:
    """A parsed -N -j answer: ``down`` hosts UNAVAILABLE, ``links`` (from, to) not CONNECTED."""
    members = {}
    for i, m in enumerate(NODES):
        state = "UNAVAILABLE" if m.host in down else "READY"
        if m.host == NODES[0].host:
            state = local_state
        conns = {j: {"host": p.host,
                     "status": "NEVER_CONNECTED" if (m.host, p.host) in links else "CONNECTED"}
                 for j, p in enumerate(NODES)}
        members[i] = {"status": state, "host": m.host, "connections": conns}
    return DomainView(status, members)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Script:
    """Answers from a list (the last repeats); each call costs ``cost`` seconds."""

    def __init__(self, clock: Clock, answers, cost: float = 0.02):
        self.clock, self.answers, self.cost, self.calls = clock, list(answers), cost, 0

    def domain(self) -> DomainView:
        self.calls += 1
        self.clock.t += self.cost
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def run(answers, budget=60.0, **kw):
    clock = Clock()
    src = Script(clock, answers)
    nudges = []
    kw.setdefault("nudge", lambda: nudges.append(clock.t))
    res = wait_until_up(src, NODES, budget, local="tray01", clock=clock, sleep=clock.sleep, **kw)
    return res, src, nudges


LATE = view("DEGRADED", down={"10.0.0.7"}, links={("10.0.0.1", "10.0.0.7"),
                                                 ("10.0.0.2", "10.0.0.7")})


def test_up_at_once_one_call_no_nudge():
    res, src, nudges = run([view()])
    assert res.up and res.checks == 1 == src.calls and nudges == [] and res.nudges == 0
    assert (res.local_state, res.domain_state, res.missing, res.links) == ("READY", "UP", (), ())


def test_polls_at_the_fixed_interval_until_up():
    res, src, _ = run([LATE] * 30 + [view()], poll_s=0.1)
    assert res.up and src.calls == 31
    assert res.elapsed_s == pytest.approx(30 * 0.12 + 0.02)


REFUSED = view("DEGRADED", links={("10.0.0.1", "10.0.0.7")})   # all READY, tray01->tray07 down


def test_nudges_at_once_when_it_can_help_then_at_most_once_per_interval():
    res, src, nudges = run([REFUSED] * 200 + [view()], poll_s=0.1)   # ~24 s of DEGRADED
    assert res.up
    assert len(nudges) == res.nudges == 5
    assert nudges[0] < 100.1                     # at the first check
    gaps = [b - a for a, b in zip(nudges, nudges[1:])]
    assert all(5.0 <= g < 5.2 for g in gaps)


def test_no_nudge_while_a_member_does_not_accept_peers_yet():
    # tray07 is still starting (UNAVAILABLE): a nudge now would redial it before it
    # listens and hold the useful one back by 5 s; nudge the moment it is READY
    res, _, nudges = run([LATE] * 30 + [REFUSED] * 3 + [view()], poll_s=0.1)
    assert res.up and res.nudges == 1 == len(nudges)
    assert 100 + 30 * 0.12 <= nudges[0] < 100 + 31 * 0.12
    starting = view("DEGRADED", links={("10.0.0.1", "10.0.0.7")})
    starting.members[2]["status"] = "INITIALIZING"
    res, _, nudges = run([starting] * 30 + [view()], poll_s=0.1)
    assert res.up and nudges == []


def test_long_shots_while_a_member_does_not_accept_peers_come_at_doubling_gaps():
    # tray07 stays UNAVAILABLE to this tray (its command port may be unreachable from
    # here while it listens for peers): a READY daemon with a link down is nudged 5 s in,
    # then after gaps of 10, 20 s ... (15, 35, 75 s in)
    res, _, nudges = run([LATE] * 700 + [view()], budget=120, poll_s=0.1)    # ~84 s
    assert res.up and len(nudges) == res.nudges == 4
    assert [round(t - 100) for t in nudges] == [5, 15, 35, 75]
    # a member up 20 s in finds the daemon's window free: nudged at once, UP
    res, _, nudges = run([LATE] * 167 + [REFUSED] * 3 + [view()], poll_s=0.1)
    assert res.up and len(nudges) == 3
    assert [round(t - 100) for t in nudges[:2]] == [5, 15] and 20.0 <= nudges[2] - 100 < 20.2


def test_a_member_starting_within_the_first_interval_costs_no_window():
    res, _, nudges = run([LATE] * 25 + [REFUSED] * 3 + [view()], poll_s=0.1)
    assert res.up and len(nudges) == 1 and 103.0 <= nudges[0] < 103.2


def test_a_member_waiting_for_recovery_accepts_peers():
    # tray07 waits for its former importers, this tray among them: nudge so it reconnects
    waiting = view("DEGRADED", links={("10.0.0.1", "10.0.0.7")})
    waiting.members[2]["status"] = "WAITING_FOR_RECOVERY"
    res, _, nudges = run([waiting] * 3 + [view()], poll_s=0.1)
    assert res.up and res.nudges == 1 and nudges[0] < 100.1


def test_no_nudge_when_only_links_of_other_trays_are_down():
    # SIGUSR1 restarts every outgoing link of this daemon, connected ones included: no
    # reason to when all of this tray's links are up (tray02's prolog nudges tray02)
    res, _, nudges = run([view("DEGRADED", links={("10.0.0.2", "10.0.0.7")})] * 60 + [view()],
                         poll_s=0.1)
    assert res.up and nudges == []


def test_no_nudge_while_local_not_ready_or_domain_down():
    init = view("DEGRADED", links={("10.0.0.1", "10.0.0.7")}, local_state="INITIALIZING")
    down = DomainView("DOWN", {i: {"status": "UNAVAILABLE", "host": m.host, "connections": {}}
                               for i, m in enumerate(NODES)})
    res, _, nudges = run([init] * 60 + [down] * 60 + [view()])
    assert res.up and nudges == []


def test_timeout_reports_what_was_last_seen():
    res, src, _ = run([LATE], budget=60)
    assert not res.up and res.elapsed_s >= 60 and res.elapsed_s < 60.2
    assert res.local_ready and res.domain_state == "DEGRADED"
    assert res.missing == ("tray07 UNAVAILABLE",)
    assert res.links == ("tray01->tray07 NEVER_CONNECTED", "tray02->tray07 NEVER_CONNECTED")
    assert res.reason(60) == "domain DEGRADED after 60s (tray07 UNAVAILABLE)"


def test_timeout_with_local_daemon_not_ready():
    res, _, _ = run([view("DEGRADED", local_state="INITIALIZING")], budget=10)
    assert not res.local_ready
    assert res.reason(10) == "local daemon INITIALIZING after 10s"


def test_unknown_answer_keeps_the_error():
    bad = DomainView("UNKNOWN", error="unexpected nvidia-imex-ctl -N -j output: not JSON")
    res, _, nudges = run([bad], budget=3)
    assert res.domain_state == "UNKNOWN" and res.local_state == "UNAVAILABLE" and nudges == []
    assert res.reason(3) == "local daemon UNAVAILABLE after 3s"
    res2 = ReadyResult(False, 3, "READY", "UNKNOWN", error="boom")
    assert res2.reason(3) == "domain UNKNOWN after 3s (boom)"


def test_links_only_problem_and_member_missing_from_answer():
    only_link = view("DEGRADED", links={("10.0.0.2", "10.0.0.1")})
    res, _, _ = run([only_link], budget=1)
    assert res.reason(1) == "domain DEGRADED after 1s (tray02->tray01 NEVER_CONNECTED)"
    short = DomainView("UP", {0: view().members[0], 1: view().members[1]})
    res, _, _ = run([short], budget=1)
    assert not res.up and res.missing == ("tray07 not listed",)


def test_dead_daemon_ends_the_wait_at_once():
    alive = iter([True, True, False])
    res, src, _ = run([LATE], alive=lambda: next(alive))
    assert res.daemon_exited and not res.up and src.calls == 2
    assert res.reason().startswith("nvidia-imex exited after")


def test_failing_nudge_does_not_stop_the_wait():
    tries = []

    def nudge():
        tries.append(1)
        raise ProcessLookupError("gone")
    res, _, _ = run([REFUSED] * 100 + [view()], nudge=nudge)
    assert res.up and res.nudges == 0 and len(tries) >= 2


def test_local_must_be_a_member():
    with pytest.raises(ValueError):
        wait_until_up(Script(Clock(), [view()]), NODES, 1, local="tray99")


def test_default_ready_timeout():
    # 15 + 31 + 62 s of back-off plus one 5 s nudge window, rounded up to 10 s
    assert default_ready_timeout(None, None) == 120
    assert default_ready_timeout(None, 65534) == 120        # Slurm's "unlimited"
    assert default_ready_timeout(0, 300) == 120
    assert default_ready_timeout(None, 60) == 45            # 60 s minus the 15 s reserve
    assert default_ready_timeout(90, 60) == 75              # PrologTimeout wins
    assert default_ready_timeout(None, 10) == 1
    assert default_ready_timeout(None, 60, reserve_s=30) == 30


# --- fidelity 2026-11b N1-N3: members by node index, -q when -N hangs -----------------

NAMED = [Member("tray01", "tray01.ib"), Member("tray02", "tray02.ib"),
         Member("tray07", "tray07.ib")]


def hostname_view(hosts) -> DomainView:
    """Every member READY and connected, ``host`` printed as ``hosts`` says."""
    return DomainView("UP", {i: {"status": "READY", "host": h,
                                 "connections": {j: {"host": hosts[j], "status": "CONNECTED"}
                                                 for j in range(len(hosts))}}
                             for i, h in enumerate(hosts)})


@pytest.mark.parametrize("hosts", [
    ["tray01.ib", "tray02.ib", "tray07.ib"],          # the entry, as the real -N prints it
    ["10.0.0.1", "10.0.0.2", "10.0.0.7"],             # or resolved: still the same member
    ["TRAY01.ib.", "tray02.ib", "10.0.0.7"],
])
def test_host_name_entries_are_matched_by_node_index(hosts):
    # before: members were keyed by the entry string, a ctl that printed the resolved
    # address left the local tray "not listed" -> local daemon UNAVAILABLE, tray drained
    clock = Clock()
    res = wait_until_up(Script(clock, [hostname_view(hosts)]), NAMED, 10, local="tray01",
                        clock=clock, sleep=clock.sleep)
    assert res.up and res.local_ready and res.missing == () and res.links == ()


def test_a_member_listed_under_another_address_is_not_taken_for_it():
    # the host string is a cross-check: the ctl read another node map
    odd = view()
    odd.members[1]["host"] = "10.9.9.9"
    res, _, _ = run([odd], budget=1)
    assert not res.up and res.local_ready
    assert res.missing == ("tray02 listed as 10.9.9.9",)
    assert res.reason(1) == "domain UP after 1s (tray02 listed as 10.9.9.9)"


def test_link_names_come_from_the_peer_index():
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.7"]
    v = hostname_view(hosts)
    v.members[0]["connections"][2]["status"] = "NEVER_CONNECTED"
    clock = Clock()
    res = wait_until_up(Script(clock, [DomainView("DEGRADED", v.members)]), NAMED, 1,
                        local="tray01", clock=clock, sleep=clock.sleep)
    assert res.links == ("tray01->tray07 NEVER_CONNECTED",)


def test_local_tray_missing_from_a_degraded_answer_asks_q():
    # N3 (a real 580.30 answer listed a partial map): DEGRADED means the ctl reached this
    # tray's daemon, so it is not UNAVAILABLE; -q says what it is
    partial = DomainView("DEGRADED", {1: view().members[1], 2: view().members[2]})
    asked = []
    res, _, _ = run([partial], budget=5, local_query=lambda: asked.append(1) or "READY")
    assert asked and res.local_ready and res.local_state == "READY"
    assert res.missing == ("tray01 not listed",)
    assert res.reason(5) == "domain DEGRADED after 5s (tray01 not listed)"
    # a DOWN answer is the ctl's word for "the local daemon did not answer": no -q
    asked.clear()
    down = DomainView("DOWN", {1: view().members[1]})
    res, _, _ = run([down], budget=1, local_query=lambda: asked.append(1) or "READY")
    assert asked == [] and res.local_state == "UNAVAILABLE"


HUNG = DomainView("UNKNOWN", error="nvidia-imex-ctl -N -j timed out after 6s", timed_out=True)


def test_hanging_N_with_a_ready_local_daemon_is_not_blamed_on_it():
    # N2 (DRA-k8s #1417: -N may hang): before, every check read local UNAVAILABLE and the
    # prolog drained a tray whose own daemon was READY
    res, _, nudges = run([HUNG], budget=20, local_query=lambda: "READY")
    assert not res.up and res.local_ready and res.domain_state == "UNKNOWN" and nudges == []
    assert res.reason(20) == ("domain UNKNOWN after 20s (nvidia-imex-ctl -N -j timed out "
                              "after 6s; -q answered READY)")


def test_hanging_N_and_q_name_the_ctl_timeout():
    res, _, _ = run([HUNG], budget=20, local_query=lambda: "UNAVAILABLE")
    assert not res.local_ready
    assert res.reason(20) == ("local daemon UNAVAILABLE after 20s (nvidia-imex-ctl -N -j "
                              "timed out after 6s; -q answered UNAVAILABLE)")
    # no -q seam: the old behaviour, still naming the timeout
    res, _, _ = run([HUNG], budget=20)
    assert res.reason(20) == ("local daemon UNAVAILABLE after 20s (nvidia-imex-ctl -N -j "
                              "timed out after 6s)")


def test_nudges_find_their_members_by_index_with_host_name_entries():
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.7"]      # the ctl printed resolved addresses
    down = hostname_view(hosts)
    down.members[0]["connections"][2]["status"] = "NEVER_CONNECTED"
    clock, nudges = Clock(), []
    res = wait_until_up(Script(clock, [DomainView("DEGRADED", down.members)] * 3
                               + [hostname_view(hosts)]),
                        NAMED, 10, local="tray01", nudge=lambda: nudges.append(clock.t),
                        clock=clock, sleep=clock.sleep)
    assert res.up and len(nudges) == 1 and nudges[0] < 100.1


def test_a_long_wait_reports_what_it_sees_every_few_seconds():
    """The prolog's log is never silent while it waits for UP (issue 28): every
    PROGRESS_EVERY_S it is told who is missing and which links are down."""
    told = []
    res, _src, _ = run([LATE] * 200 + [view()], poll_s=0.1, progress=told.append,
                       progress_every_s=5.0)
    assert res.up
    assert len(told) == int(res.elapsed_s // 5.0), (len(told), res.elapsed_s)
    first = told[0]
    assert 5.0 <= first["elapsed_s"] < 5.2 and first["domain_state"] == "DEGRADED"
    assert first["missing"] == ["tray07 UNAVAILABLE"]
    assert "tray01->tray07 NEVER_CONNECTED" in first["links"]
    assert [t["elapsed_s"] for t in told] == sorted(t["elapsed_s"] for t in told)
    quiet = []
    run([view()], progress=quiet.append)
    assert quiet == []          # UP at once: nothing to report


def test_a_real_ctl_that_hangs_on_N_but_answers_q(tmp_path):
    # the fidelity review's stand-in: -q READY, -N hangs; through the real CtlClient (the
    # ctl executable is the system boundary), as the prolog wires it
    import stat

    from imexctl.imex.ctl import CtlClient

    ctl = tmp_path / "nvidia-imex-ctl"
    ctl.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -q ] && { echo READY; exit 0; }; done\n'
                   "exec sleep 30\n")
    ctl.chmod(ctl.stat().st_mode | stat.S_IXUSR)
    client = CtlClient(ctl, tmp_path / "config.cfg", {}, 0.5)
    res = wait_until_up(client, NODES, 0.8, local="tray01", local_query=client.local)
    assert not res.up and res.local_ready and res.ctl_timed_out
    assert res.reason(0.8) == ("domain UNKNOWN after 1s (nvidia-imex-ctl -N -j timed out "
                               "after 0.5s; -q answered READY)")
