"""Wait until a job's IMEX domain is UP, nudging the local daemon so late peers join fast.

Why nudge: the real ``nvidia-imex`` retries a peer it could not reach after 15, 31, 62,
125 s. A tray whose daemon listens only after its peers dialled it (its prolog started
later, or its daemon was slower to start) is reached by them only at their 15 s retry,
and a tray 20 s late only at the 46 s one. ``SIGUSR1`` makes the daemon restart all
outgoing connections at once, but it is processed at most once per 5 s, so a nudge sent
too early costs a whole window. The local daemon is therefore nudged as soon as a nudge
can work: a link from this tray is down while every member already accepts peers
(READY, or waiting for peers or for recovery: listening). While a member does not, a
nudge is a long shot (that member may listen while this tray cannot reach its command
port), sent ``nudge_interval_s`` (5 s) in and then after gaps that double (5, 15, 35,
75 s), so a late member seldom arrives inside a window it spent. Never more than once
per ``nudge_interval_s``. (With a fixed first nudge one second in, an 18-tray domain on
a loaded harness came UP after 6 s, not 1.3 s: the nudge went while a peer was still
starting.)

Types (the seam with the prolog's wait-ready step):

* :class:`DomainSource` - anything with ``domain() -> ctl.DomainView``; the real one is
  :class:`imexctl.imex.ctl.CtlClient` (one ``nvidia-imex-ctl -N -j`` per call).
* :class:`Member` - ``(name, host)``: Slurm node name and the entry written in
  nodes_config, in node-config order: the i-th member is the answer's node ``i`` (the
  ``-N -j`` keys are nodes_config lines); ``host`` only cross-checks the printed host
  (:func:`member_rows`: ``not listed``, ``listed as <host>``), which for a host-name
  entry may be the entry or its address.
* :func:`wait_until_up` ``(source, nodes, budget_s, *, local, nudge=None, poll_s=0.1,
  nudge_interval_s=5.0, alive=None) -> ReadyResult``. One ctl call per check, at a fixed
  short interval; the local daemon's state is the local member's row of the same answer.
* :class:`ReadyResult` - ``up``, ``elapsed_s``, ``local_state`` (the local row's status,
  ``UNAVAILABLE`` when the ctl could not say), ``domain_state`` (UP, DEGRADED, DOWN,
  UNKNOWN), ``missing`` (``"tray07 UNAVAILABLE"`` per member not READY, ``"tray07 not
  listed"`` per member the answer lacks), ``links``
  (``"tray01->tray07 NEVER_CONNECTED"`` per link not CONNECTED), ``error`` (the ctl's
  complaint when UNKNOWN), ``checks``, ``nudges``, ``daemon_exited``; ``reason()`` gives
  the drain/refusal text, e.g. ``domain DEGRADED after 60s (tray07 UNAVAILABLE)``.
* :func:`nudge_use` ``(view, nodes, me) -> str``: what a nudge of ``me``'s daemon would
  do now (the rule above), from one ``-N -j`` answer: ``"now"``, ``"maybe"`` or ``""``.
* :func:`sigusr1_nudge` ``(ident) -> Callable[[], None]``: SIGUSR1 to the recorded daemon
  only (pid + start time + executable verified, or the systemd unit's main pid).
* :func:`default_ready_timeout` ``(prolog_timeout_s, prolog_epilog_timeout_s) -> float``:
  the back-off-derived wait, capped to fit Slurm's prolog timeout.

Library code: returns data, prints nothing, raises nothing for ctl trouble.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from imexctl.base import log
from imexctl.base.dataclass import dataclass
from imexctl.config import Config
from imexctl.errors import JobFault, NodeFault
from imexctl.tray import jobdir

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Protocol, Sequence

    from imexctl.imex.ctl import DomainView
    from imexctl.slurm.localconf import LocalSlurmConf
    from imexctl.tray.ownership import DaemonIdentity, DomainRecord

    class DomainSource(Protocol):
        def domain(self) -> DomainView: ...

BACKOFF_S = (15.0, 31.0, 62.0, 125.0)
"""The real daemon's reconnect back-off for a peer it could not reach (seconds)."""
NUDGE_INTERVAL_S = 5.0
"""The real daemon processes SIGUSR1 at most once per 5 s; more often is ignored."""
ACCEPTING = frozenset({"READY", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY"})
"""Member states in which a daemon is up and accepts peers: a redial now connects."""
SLURM_INFINITE = 65534
ANSWERED = "not listed"
"""Local state when the ctl reached this tray's daemon (domain UP or DEGRADED) but listed
no row for it: ``-q`` is asked (a real 580.30 answer listed a partial map, fidelity N3)."""
"""Slurm's "no limit" value for PrologEpilogTimeout (its default)."""


@dataclass(frozen=True)
class Member:
    name: str       # Slurm node name, for messages
    host: str       # the nodes_config entry (address) the ctl reports as "host"


@dataclass(frozen=True)
class ReadyResult:
    up: bool
    elapsed_s: float
    local_state: str
    domain_state: str
    missing: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    error: str = ""
    checks: int = 0
    nudges: int = 0
    daemon_exited: bool = False
    ctl_timed_out: bool = False

    @property
    def local_ready(self) -> bool:
        return self.local_state == "READY"

    def reason(self, budget_s: float | None = None, limit: int = 4) -> str:
        """``domain DEGRADED after 60s (tray07 UNAVAILABLE)`` / ``local daemon
        INITIALIZING after 60s`` (empty when the domain is UP); ``budget_s`` names the
        timeout (default: elapsed)."""
        after = f"after {budget_s if budget_s is not None else self.elapsed_s:.0f}s"
        if self.daemon_exited:
            return f"nvidia-imex exited {after}"
        if self.up:
            return ""  # nothing to report: the domain came up
        if not self.local_ready:
            why = f" ({self.error})" if self.ctl_timed_out else ""
            return f"local daemon {self.local_state} {after}{why}"
        detail = list(self.missing) or list(self.links)
        if not detail and self.error:
            detail = [self.error]
        shown = "; ".join(detail[:limit]) + ("; ..." if len(detail) > limit else "")
        return f"domain {self.domain_state} {after}" + (f" ({shown})" if shown else "")


def same_entry(listed: str, written: str) -> bool | None:
    """Cross-check of a member's ``host`` field against the nodes_config entry imexctl
    wrote: True or False when both are addresses (compared canonically) or both names;
    None when one is a name and the other an address (a host-name entry the ctl printed
    resolved: cannot tell without a lookup, and the mapping may change mid-job)."""
    from imexctl.imex.render import canonical_ip

    a, b = canonical_ip(listed), canonical_ip(written)
    if a is not None and b is not None:
        return a == b
    if a is None and b is None:
        return listed.rstrip(".").lower() == written.rstrip(".").lower()
    return None


def member_rows(view: "DomainView", nodes: Sequence[Member]) -> list[tuple[dict | None, str]]:
    """Each member's row of one ``-N -j`` answer, by node index (the answer's keys are
    nodes_config line numbers, and ``nodes`` is in nodes_config order), and its state
    word: the row's status, ``not listed`` (no row), or ``listed as <host>`` (the row's
    ``host`` is another address or name than the entry imexctl wrote: the ctl read
    another node map)."""
    out: list[tuple[dict | None, str]] = []
    for idx, m in enumerate(nodes):
        row = view.members.get(idx)
        if row is None:
            out.append((None, "not listed"))
        elif row.get("host") and same_entry(row["host"], m.host) is False:
            out.append((None, f"listed as {row['host']}"))
        else:
            out.append((row, row.get("status") or "?"))
    return out


def _judge(view: "DomainView", nodes: Sequence[Member], local: Member) -> tuple[bool, dict]:
    """(up, fields for ReadyResult) from one ``-N -j`` answer, members named by node."""
    rows = member_rows(view, nodes)
    local_row = rows[list(nodes).index(local)][0]
    if local_row is not None:
        local_state = local_row.get("status") or "UNAVAILABLE"
    elif view.status in ("UP", "DEGRADED"):
        # the ctl reached this tray's daemon (DOWN is its word for "could not") but
        # printed no usable row for it: ask -q (:func:`wait_until_up`'s local_query)
        local_state = ANSWERED
    else:
        local_state = "UNAVAILABLE"
    missing = [f"{m.name} {word}" for m, (_row, word) in zip(nodes, rows)
               if word != "READY" and view.status != "UNKNOWN"]   # UNKNOWN: the error says
    links = []
    for m, (row, _word) in zip(nodes, rows):
        for peer, conn in sorted((row or {}).get("connections", {}).items()):
            if conn["status"] != "CONNECTED":
                to = nodes[peer].name if 0 <= peer < len(nodes) else (conn["host"]
                                                                         or f"#{peer}")
                links.append(f"{m.name}->{to} {conn['status'] or '?'}")
    up = view.status == "UP" and not missing and not links
    return up, {"local_state": local_state, "domain_state": view.status,
                "missing": tuple(missing), "links": tuple(links), "error": view.error,
                "ctl_timed_out": view.timed_out}


# While the domain is not UP, the prolog logs what it sees this often (issue 28: the log
# was silent for up to the whole ready timeout).
PROGRESS_EVERY_S = 5.0

def wait_until_up(source: DomainSource, nodes: Sequence[Member], budget_s: float, *,
                  local: str, nudge: Callable[[], None] | None = None, poll_s: float = 0.1,
                  nudge_interval_s: float = NUDGE_INTERVAL_S,
                  alive: Callable[[], bool] | None = None,
                  local_query: Callable[[], str] | None = None,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep,
                  progress: Callable[[dict], None] | None = None,
                  progress_every_s: float = PROGRESS_EVERY_S) -> ReadyResult:
    """Poll until the domain is UP (every member READY, every link CONNECTED) or
    ``budget_s`` has passed; return what was seen last.

    ``local``: this tray's node name (one of ``nodes``). ``nudge`` is called as soon as
    it connects something (:func:`nudge_use` says ``"now"``), and as a long shot
    (``"maybe"``) ``nudge_interval_s`` after the start, then after gaps that double; never
    twice within ``nudge_interval_s`` (the daemon's own SIGUSR1 limit). ``alive``
    (optional) is asked before each check: False ends the wait at once with
    ``daemon_exited``. ``local_query`` (``nvidia-imex-ctl -q``, optional) is asked for
    this tray's state when ``-N -j`` timed out (it is known to hang on a broken peer,
    DRA-k8s #1417: the local daemon may well be READY) or answered without this tray's
    row; without it those read ``UNAVAILABLE`` / ``not listed``. ``progress`` (optional)
    is given what was last seen every ``progress_every_s`` while the wait goes on
    (``elapsed_s``, ``checks``, ``nudges``, ``domain_state``, ``local_state``,
    ``missing``, ``links``), so a long wait is never silent.
    """
    me = next((m for m in nodes if m.name == local), None)
    if me is None:
        raise ValueError(f"{local!r} is not a member of the domain")
    start = clock()
    next_nudge = start                          # the daemon's window
    long_shot_at, long_shot_gap = start + nudge_interval_s, nudge_interval_s
    checks = nudges = 0
    seen: dict = {"local_state": "UNAVAILABLE", "domain_state": "UNKNOWN"}
    tell_at = start + progress_every_s
    while True:
        if alive is not None and not alive():
            return ReadyResult(False, clock() - start, checks=checks, nudges=nudges,
                               daemon_exited=True, **seen)
        view = source.domain()
        checks += 1
        up, seen = _judge(view, nodes, me)
        if (not up and local_query is not None
                and (view.timed_out or seen["local_state"] == ANSWERED)):
            seen["local_state"] = local_query()
            if view.timed_out:
                seen["error"] = f"{view.error}; -q answered {seen['local_state']}"
        now = clock()
        if up:
            return ReadyResult(True, now - start, checks=checks, nudges=nudges, **seen)
        if now - start >= budget_s:
            return ReadyResult(False, now - start, checks=checks, nudges=nudges, **seen)
        if progress is not None and now >= tell_at:
            tell_at = now + progress_every_s
            progress({"elapsed_s": round(now - start, 1), "checks": checks, "nudges": nudges,
                      "domain_state": seen.get("domain_state"),
                      "local_state": seen.get("local_state"),
                      "missing": list(seen.get("missing", ())),
                      "links": list(seen.get("links", ()))})
        if nudge is not None and now >= next_nudge:
            use = nudge_use(view, nodes, me)
            if use == "maybe" and now >= long_shot_at:
                long_shot_gap *= 2
                long_shot_at, use = now + long_shot_gap, "now"
            if use == "now":
                next_nudge = now + nudge_interval_s
                try:
                    nudge()
                    nudges += 1
                except OSError:
                    pass    # the daemon is gone: the next check (alive / DOWN) says so
        sleep(max(0.0, min(poll_s, budget_s - (clock() - start))))


def nudge_use(view: "DomainView", nodes: Sequence[Member], me: Member) -> str:
    """What a nudge of ``me``'s daemon would do now, from one ``-N -j`` answer.

    ``"now"``: the domain is DEGRADED, a link from this tray is not CONNECTED, and every
    member (this one included) accepts peers: a redial connects. ``"maybe"``: this
    daemon is READY with a link down, but some member does not accept peers yet: the
    redial fails if it is still starting (and holds the useful nudge back by the daemon's
    5 s window), or connects if it listens and only this tray cannot reach its command
    port. ``""``: no use; links of other trays are their prologs' to nudge (SIGUSR1
    restarts connected links too)."""
    if view.status != "DEGRADED":
        return ""
    rows = [row or {} for row, _word in member_rows(view, nodes)]
    mine = rows[list(nodes).index(me)]
    if all(conn.get("status") == "CONNECTED" for conn in mine.get("connections", {}).values()):
        return ""
    if all(row.get("status") in ACCEPTING for row in rows):
        return "now"
    return "maybe" if mine.get("status") == "READY" else ""


def sigusr1_nudge(ident: "DaemonIdentity") -> Callable[[], None]:
    """A nudge that sends SIGUSR1 to the recorded daemon and to nothing else."""

    def nudge() -> None:
        import signal

        from imexctl.imex import launcher

        if ident.launcher == "systemd":
            pid = launcher.systemd_main_pid(ident.unit or "")
            if pid > 0:
                os.kill(pid, signal.SIGUSR1)
            return
        found = launcher.find_process(ident)
        if found is not None:
            os.kill(found, signal.SIGUSR1)

    return nudge


def default_ready_timeout(prolog_timeout_s: float | None,
                          prolog_epilog_timeout_s: float | None, *,
                          reserve_s: float = 15.0,
                          schedule: Sequence[float] = BACKOFF_S,
                          nudge_interval_s: float = NUDGE_INTERVAL_S) -> float:
    """How long the prolog waits for UP when the site did not say.

    Wanted: the first three back-off steps (15 + 31 + 62 = 108 s, by which an
    un-nudged daemon has retried a peer that came up to 46 s late) plus one nudge
    window, rounded up to ten seconds: 120 s. Capped to Slurm's limit for the prolog
    (``PrologTimeout`` when set, else ``PrologEpilogTimeout``; 0, None or 65534 mean
    none) minus ``reserve_s`` for the other steps and the failure path (undo, drain),
    so the prolog reports its own reason before slurmd kills it. Never below 1 s.
    """
    want = math.ceil((sum(schedule[:3]) + nudge_interval_s) / 10.0) * 10.0
    limit = next((t for t in (prolog_timeout_s, prolog_epilog_timeout_s)
                  if t is not None and 0 < t < SLURM_INFINITE), None)
    if limit is None:
        return want
    return max(1.0, min(want, limit - reserve_s))


def effective_ready_timeout(cfg: Config, conf: LocalSlurmConf | None) -> float:
    """``imex.ready_timeout_s`` when the site set it, else derived from the local
    PrologTimeout / PrologEpilogTimeout (``imex.ready.default_ready_timeout``)."""
    if cfg.imex.ready_timeout_s is not None:
        return cfg.imex.ready_timeout_s
    if conf is None:
        return default_ready_timeout(None, None)
    return default_ready_timeout(conf.timeout_s("PrologTimeout"),
                                 conf.timeout_s("PrologEpilogTimeout"))


def wait_ready(cfg: Config, record: DomainRecord, nodes: list[str], budget_s: float,
               local: str) -> None:
    """Wait (``imex.ready.wait_until_up``: one ctl call per check, SIGUSR1 nudges) until
    the domain is UP. NodeFault when this tray's daemon fails; JobFault when this tray
    is READY but a peer is not (the peer's own prolog drains the peer)."""
    from imexctl.imex import launcher
    from imexctl.imex.ctl import CtlClient

    daemon = record.daemon
    if daemon is None:
        raise NodeFault("no daemon recorded for this domain: nothing to wait for")
    client = CtlClient(cfg.paths.imex_ctl_binary, Path(record.job_dir) / jobdir.CONFIG,
                       launcher.environment_file(cfg.imex.environment_file))
    members = [Member(n, a) for n, a in zip(nodes, record.addresses)]
    res = wait_until_up(client, members, budget_s, local=local,
                        nudge=sigusr1_nudge(daemon),
                        alive=lambda: launcher.is_alive(daemon),
                        local_query=CtlClient(client.ctl, client.config, client.env, 3.0).local,
                        progress=lambda seen: log.get_logger().info(
                            "waiting for the IMEX domain", budget_s=round(budget_s, 1),
                            members_ready=len(nodes) - len(seen["missing"]),
                            members=len(nodes), **seen))
    log.get_logger().info("wait-ready result", up=res.up, checks=res.checks,
                          nudges=res.nudges, elapsed_ms=round(res.elapsed_s * 1000, 1))
    if res.up:
        return
    if res.daemon_exited:
        raise NodeFault("nvidia-imex exited during start-up")
    if not res.local_ready:
        raise NodeFault(res.reason(budget_s))
    tls = launcher.tls_failure(Path(record.job_dir)) if cfg.imex.auth.on else ""
    raise JobFault(f"IMEX {res.reason(budget_s)}" + (f"; the daemon logged: {tls}" if tls
                                                     else ""))
