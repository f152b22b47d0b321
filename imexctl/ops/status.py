"""``imexctl status`` on one node: what imexctl believes, what is live, and what is wrong.

The ownership record says what imexctl believes; the live checks (daemon pid + start
time, ``nvidia-imex-ctl -N -j``, channel nodes, Slurm's node record) say whether that is
still true. Every source may be broken at 3 a.m. (daemon dead, record corrupt, ctl
hanging, slurmctld away): each failure becomes a line in ``problems`` or ``notes``, never
a traceback. The JSON shape is documented in docs/status-json.md (``schema``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from imexctl import __version__
from imexctl.tray import jobdir
from imexctl.tray.channels import channel_path, list_channels
from imexctl.base.clock import when
from imexctl.config import Config
from imexctl.rules.cliques import identity_from_extra
from imexctl.base.fsutil import read_json, write_json
from imexctl.tray.ownership import JOB, PERSISTENT, RECORD, DomainRecord, StateStore
from imexctl.slurm import states

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.base.jsontypes import Json

SCHEMA = "imexctl.status/1"
SEEN = "status-seen.json"   # first time each live problem of a domain was seen
MISMATCH = {"NODE_MAP_MISMATCH": "!M!", "VERSION_MISMATCH": "!V!", "!M!": "!M!", "!V!": "!V!"}
LIVE_PHASES = ("preparing", "starting", "ready")
# Phases whose daemon is neither asked (a frozen one would hang the ctl; one being stopped
# has nothing to say) nor called "not running" (stuck_record_view says it; the epilog
# stops it)
QUIET_PHASES = ("stuck", "tearing-down")
# A teardown takes the stop grace, SIGKILL's 5 s and the ports' 5 s at most: a record still
# "tearing-down" this long after that was left by an epilog killed midway.
TEARDOWN_SLACK_S = 60.0


def collect(cfg: Config, live: bool = True, slurm: SlurmAdapter | None = None,
            now: float | None = None) -> Json:
    """The node view as a JSON-ready dict. ``slurm`` (an adapter) adds the drain, the
    published identity and whether the owning job still runs; None skips Slurm."""
    now = time.time() if now is None else now
    store = StateStore(cfg.paths.state_dir)
    problems: list[str] = []
    notes: list[str] = []
    raw, record = _load_record(cfg, problems)
    channels = _channels(cfg, problems)
    out: Json = {
        "schema": SCHEMA, "view": "node", "node": cfg.node, "generated_at": round(now, 3),
        "imexctl_version": __version__,
        "channel_mode": cfg.channels.mode, "domain": None, "decision": None,
        "channels_present": sorted(channels), "last_outcome": _last_outcome(store, notes),
        "slurm": None,
    }
    out["stuck"] = None
    held = _persistent_record(store, problems)
    if record is not None:
        job_view = _domain(cfg, record, live and held is None, problems, now)
        out["domain"] = job_view
        out["decision"] = _decision(raw, record) if isinstance(raw, dict) else None
        if record.phase == "stuck":
            out["stuck"] = stuck_record_view(record, job_view["daemon"])
            problems.insert(0, out["stuck"]["problem"])
    if held is not None:     # the tray's persistent domain serves every job's channel here
        out["domain"] = _domain(cfg, held, live, problems, now)
    if out["domain"] is not None:
        persistent = held is not None or (record is not None and record.on_persistent)
        out["domain"]["lifetime"] = PERSISTENT if persistent else JOB
        out["domain"]["jobs"] = [job_holding(record)] if record is not None else []
        if held is None and record is not None and record.on_persistent:
            problems.append(f"job {record.job_id}'s channel is served by a persistent domain, "
                            "but this tray has none recorded (`imexctl recover` brings it up)")
    owned = {record.channel} if record is not None and record.channel is not None else set()
    warning = _channel0(cfg, problems)
    if warning:
        problems.append(warning)
    unowned = [n for n in sorted(channels) if n not in owned]
    if raw is not None and record is None and unowned:   # the record may own one of them
        problems.append("channel" + ",".join(map(str, unowned)) + " present; whose is unknown "
                        "while the record is unreadable (health leaves them)")
    else:
        problems += [f"leaked channel{n}" for n in unowned]
    if record is not None and record.channel is not None and record.channel not in channels:
        problems.append(f"channel{record.channel} missing "
                        f"({channel_path(cfg.paths.channel_dir, record.channel)})")
    clique, imex_tray = _local_fabric(cfg, problems, notes) if live else (None, None)
    out["fabric"] = {"clique": clique, "imex_tray": imex_tray}
    out["channel_owner"] = channel_owner(cfg, imex_tray, problems, notes)
    if slurm is not None:
        out["slurm"] = _slurm_facts(cfg, slurm, record, clique, problems, notes)
    if held is None and cfg.imex.lifetime.value == PERSISTENT and imex_tray is not False:
        problems.append("imex.lifetime = persistent but no persistent domain is recorded on "
                        "this tray: jobs here are drained at prolog/persistent-ready "
                        "(`imexctl recover` brings it up)")
    out["expected"] = _expected(cfg, record, raw, out["last_outcome"], imex_tray)
    out["auth"] = {"mode": cfg.imex.auth, "certificates": []}
    if cfg.imex.auth.on:   # imports cryptography: only with auth on
        from imexctl.ops import authinfo
        out["auth"] = authinfo.status_view(cfg, record, now)
        faults, warnings = authinfo.problems(cfg, record, now)
        problems += faults
        notes += warnings
    if raw is not None and record is None:
        out["state"] = "record-unreadable"
    elif record is None and held is not None:   # a persistent domain with no job now
        out["state"] = "degraded" if problems else held.phase
    elif record is None:
        out["state"] = "idle"
    elif record.phase == "stuck":
        out["state"] = "stuck"      # a problem of its own kind, never just "degraded"
    else:
        out["state"] = "degraded" if problems else record.phase
    out["problems"] = problems
    out["notes"] = notes
    return out


def job_holding(record: DomainRecord) -> Json:
    """A job holding a channel on this tray, as status, metrics and doctor name it."""
    return {"job_id": record.job_id, "user": record.user, "uid": record.uid,
            "channel": record.channel, "phase": record.phase}


# --------------------------------------------------------------------------- sources
def _persistent_record(store: StateStore, problems: list[str]) -> DomainRecord | None:
    """The tray's persistent domain (issue 37; ``persistent.json``), None when there is
    none; an unreadable one is a problem."""
    from imexctl.tray.ownership import RecordUnreadable

    try:
        return store.load_persistent()
    except RecordUnreadable as exc:
        problems.append(f"persistent domain record: {exc}")
        return None


def _load_record(cfg: Config, problems: list[str]) -> tuple[object, DomainRecord | None]:
    """(raw JSON, record); a record that does not load is a problem, not a crash."""
    path = cfg.paths.state_dir / RECORD
    try:
        raw = read_json(path)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        problems.append(f"ownership record {path} is unreadable: {exc}")
        return {"unreadable": str(exc)}, None
    if raw is None:
        return None, None
    try:
        if not isinstance(raw, dict) or not raw:
            raise TypeError(f"not a record object: {str(raw)[:60]!r}")
        record = DomainRecord.from_dict(raw)
        int(record.job_id)
        return raw, record
    except (TypeError, ValueError, KeyError) as exc:
        problems.append(f"ownership record {path} is corrupt ({exc}); stop any nvidia-imex "
                        "of an ended job, move the record away, then `imexctl health` "
                        "(docs/runbook.md, health/record)")
        return {"unreadable": str(exc)}, None


def _last_outcome(store: StateStore, notes: list[str]) -> dict | None:
    """The last hook outcome; a file there that does not read as one is a note."""
    from imexctl.tray.ownership import LAST

    last = store.last_outcome()
    if last is None and os.path.lexists(store.dir / LAST):
        notes.append(f"last outcome {store.dir / LAST} is unreadable (ignored)")
    return last


def _channels(cfg: Config, problems: list[str]) -> dict[int, os.stat_result]:
    try:
        return list_channels(cfg.paths.channel_dir)
    except OSError as exc:
        problems.append(f"cannot list {cfg.paths.channel_dir}: {exc.strerror or exc}")
        return {}


def _channel0(cfg: Config, problems: list[str]) -> str | None:
    """The driver's world-usable channel0 (NVreg_CreateImexChannel0=1): never a job's."""
    from imexctl.tray.channels import channel0_warning
    try:
        return channel0_warning(cfg.paths.channel_dir)
    except OSError:
        return None  # an unsafe channel_dir is already a problem (_channels)


def _domain(cfg: Config, record: DomainRecord, live: bool, problems: list[str],
            now: float) -> Json:
    from imexctl.imex import launcher

    dom: Json = {
        "job_id": record.job_id, "user": record.user, "uid": record.uid,
        "phase": record.phase, "nodes": record.nodes, "node_id": record.node_id,
        "digest": record.digest, "server_port": record.server_port,
        "cmd_port": record.cmd_port, "channel": record.channel,
        "channel_rule": record.channel_rule, "job_dir": record.job_dir,
        "steps_ms": record.steps_ms, "started_at": record.started_at,
        "updated_at": record.updated_at, "daemon": None,
        "imexctl_version": record.imexctl_version,
    }
    alive = False
    if record.daemon:
        try:
            alive = launcher.is_alive(record.daemon)
        except Exception as exc:  # systemctl missing, psutil denied: say so
            problems.append(f"daemon state unknown: {exc}")
        dom["daemon"] = {"pid": record.daemon.pid, "launcher": record.daemon.launcher,
                         "unit": record.daemon.unit, "alive": alive}
        if not alive and record.phase not in QUIET_PHASES:
            problems.append(f"daemon pid {record.daemon.pid} is not running")
    elif record.phase in ("starting", "ready") and not record.on_persistent:
        # (a job on a persistent tray has no daemon of its own: persistent.json's serves it)
        problems.append(f"record of job {record.job_id} names no daemon (phase {record.phase})")
    overdue = now - (record.updated_at or now) - cfg.imex.stop_grace_s - TEARDOWN_SLACK_S
    if record.phase == "tearing-down" and overdue > 0:
        problems.append(f"record of job {record.job_id} has been tearing-down for "
                        f"{now - record.updated_at:.0f}s: a teardown was cut short "
                        "(`imexctl health` finishes it once the job has ended)")
    if live and alive and record.phase not in QUIET_PHASES:
        _live_view(cfg, record, dom, problems, now)
    return dom


RUNBOOK_STUCK = "docs/runbook.md#stuck-daemon"


def stuck_record_view(record: DomainRecord, daemon: dict | None) -> Json:
    """What a record in phase ``stuck`` means (audit F-02): the epilog could not verify the
    job's nvidia-imex gone, so a root process may still hold the job's ports; which pid,
    which job, and what the admin does about it."""
    pid = daemon["pid"] if daemon else None
    alive = bool(daemon and daemon.get("alive"))
    ports = f"{record.server_port}/{record.cmd_port}"
    if pid is None:
        problem = (f"stuck daemon of job {record.job_id}: the epilog could not verify its "
                   f"nvidia-imex stopped and the record names no pid; find it with "
                   f"`pgrep -af {record.job_dir}/{jobdir.CONFIG}`, kill it, then `imexctl health` "
                   f"({RUNBOOK_STUCK})")
        action = "find the daemon by its config in argv, kill it, then run imexctl health"
    elif alive:
        problem = (f"stuck daemon: nvidia-imex pid {pid} of job {record.job_id} could not be "
                   f"stopped by the epilog and may hold ports {ports}; "
                   f"`ps -o pid,stat,wchan -p {pid}` (state D: the driver or a reboot), "
                   f"kill it, then `imexctl health` ({RUNBOOK_STUCK})")
        action = f"ps -o pid,stat,wchan -p {pid}; kill it; then imexctl health"
    else:
        problem = (f"stuck record: the epilog could not verify nvidia-imex pid {pid} of job "
                   f"{record.job_id} stopped; it is gone now: `imexctl health` clears the "
                   f"record ({RUNBOOK_STUCK})")
        action = "imexctl health"
    return {"job_id": record.job_id, "pid": pid, "alive": alive,
            "ports": [record.server_port, record.cmd_port], "since": record.updated_at,
            "action": action, "runbook": RUNBOOK_STUCK, "problem": problem}


def _live_view(cfg: Config, record: DomainRecord, dom: dict, problems: list[str],
               now: float) -> None:
    """Members, states, connections and !M!/!V! from nvidia-imex-ctl, named by tray."""
    from imexctl.imex import ctl

    config = Path(record.job_dir) / jobdir.CONFIG
    try:
        dom["local_state"] = ctl.query_local(cfg.paths.imex_ctl_binary, config)
        view = ctl.query_domain(cfg.paths.imex_ctl_binary, config)
    except Exception as exc:  # malformed output must not take status down
        dom["local_state"], dom["domain_state"] = "UNKNOWN", "UNKNOWN"
        problems.append(f"nvidia-imex-ctl answer unusable: {exc}")
        return
    dom["domain_state"] = view.status
    if view.error:
        problems.append(view.error)
        return
    from imexctl.imex.ready import same_entry

    # members by node index (the -N -j keys are nodes_config lines; the host field of a
    # host-name entry may be printed resolved): fidelity N1
    nodes, addrs = list(record.nodes), list(record.addresses)

    def name_of(idx: int) -> str:
        return nodes[idx] if 0 <= idx < len(nodes) else f"#{idx}"

    members: list[Json] = []
    missing: list[Json] = []
    mismatches: list[Json] = []
    links: list[str] = []
    for idx, m in sorted(view.members.items()):
        if not isinstance(m, dict):
            continue
        host = str(m.get("host") or (addrs[idx] if idx < len(addrs) else f"#{idx}"))
        node = name_of(idx)
        conns = []
        raw = m.get("connections")
        raw_conns: dict = raw if isinstance(raw, dict) else {}
        for peer, c in sorted(raw_conns.items(), key=lambda kv: str(kv[0])):
            c = c if isinstance(c, dict) else {}
            phost = str(c.get("host", peer))
            status = str(c.get("status", "?"))
            pname = name_of(peer) if isinstance(peer, int) else phost
            conns.append({"peer": pname, "host": phost, "status": status})
            if status in MISMATCH:
                mismatches.append({"from": node, "to": pname, "marker": MISMATCH[status]})
            elif status != "CONNECTED":
                links.append(f"{node}->{pname} {status}")
        status = str(m.get("status", "?"))
        if idx < len(addrs) and m.get("host") and same_entry(host, addrs[idx]) is False:
            status = f"listed as {host}"    # the ctl read another node map
        members.append({"index": idx, "node": node, "host": host, "status": status,
                        "version": m.get("version", ""), "connections": conns})
        if status != "READY":
            missing.append({"node": node, "host": host, "status": status})
    if view.status in ("UP", "DEGRADED"):
        for idx, node in enumerate(nodes):      # a partial map (a real 580.30 answer)
            if idx not in view.members:
                missing.append({"node": node, "host": addrs[idx] if idx < len(addrs) else "",
                                "status": "not listed"})
    seen = _first_seen(cfg, record.job_id,
                       [f"{x['node']} {x['status']}" for x in missing]
                       + [f"{x['from']}->{x['to']} {x['marker']}" for x in mismatches], now)
    for x in missing:
        x["since"] = seen.get(f"{x['node']} {x['status']}")
        problems.append(f"{x['node']} ({x['host']}) {x['status']} since "
                        f"{when(x['since'])}")
    for x in mismatches:
        x["since"] = seen.get(f"{x['from']}->{x['to']} {x['marker']}")
        kind = "node map" if x["marker"] == "!M!" else "version"
        problems.append(f"{x['marker']} {kind} mismatch {x['from']}->{x['to']}: the trays "
                        "rendered different domains or run different IMEX versions")
    dom["members"], dom["missing"], dom["mismatches"] = members, missing, mismatches
    if view.status != "UP" and not missing and not mismatches:
        detail = "; ".join(links[:4]) + ("; ..." if len(links) > 4 else "")
        problems.append(f"domain {view.status}: " + (
            detail or "every member READY and every link CONNECTED, yet the ctl says so"))


def _first_seen(cfg: Config, job_id: int, keys: list[str], now: float) -> dict[str, float]:
    """When each live problem of this job's domain was first seen by a status or health
    run. Kept (best effort, root only) beside the record; cleared when problems go."""
    path = cfg.paths.state_dir / SEEN
    try:
        old = read_json(path) or {}
    except (OSError, ValueError):
        old = {}
    prev = old.get("seen", {}) if isinstance(old, dict) and old.get("job_id") == job_id else {}
    seen = {k: float(prev[k]) if isinstance(prev.get(k), (int, float)) else now for k in keys}
    if seen != prev and os.geteuid() == 0:
        try:
            write_json(path, {"job_id": job_id, "seen": seen}, 0o600, durable=False)
        except OSError:
            pass
    return seen


def _decision(raw: dict, record: DomainRecord) -> Json:
    """The group/channel decision of this domain and where it came from."""
    rule = record.channel_rule or ""
    source = raw.get("decision_source")
    if not source:
        if rule.startswith("slurm"):
            source = "slurm"            # switch/nvidia_imex owns the channel
        elif rule in ("controller", "decision") or rule.startswith("controller"):
            source = "controller"
        else:
            source = "fallback"         # node-local rule (job id), no controller decision
    return {"source": source, "channel": record.channel, "channel_rule": rule,
            "group": raw.get("group") or record.nodes, "clique": raw.get("clique")}


def _slurm_facts(cfg: Config, slurm: SlurmAdapter, record: DomainRecord | None, clique: str | None,
                 problems: list[str], notes: list[str]) -> Json | None:
    """This node's drain and published identity, and whether the record's job still runs
    here: one node query, plus one job query when a domain is recorded."""
    try:
        node = slurm.nodes([cfg.node]).get(cfg.node)
    except Exception as exc:
        notes.append(f"Slurm not asked about {cfg.node}: {exc}")
        return None
    if node is None:
        notes.append(f"Slurm does not know node {cfg.node!r}")
        return None
    facts: Json = {"state": node.state, "reason": node.reason,
                             "drained": node.drained, "drain_ours": node.drained and node.ours,
                             "backend": slurm.name, "backend_selection": slurm.selection or None}
    if facts["drain_ours"]:
        problems.append(f"drained by imexctl: {node.reason} (see docs/runbook.md)")
    published = identity_from_extra(node.extra)
    facts["published_clique"] = published.clique if published is not None else None
    if clique and facts["published_clique"] and clique != facts["published_clique"]:
        problems.append(f"identity drift: live clique {clique} but Slurm "
                        f"holds {facts['published_clique']} (run `imexctl identity publish`)")
    elif clique and not facts["published_clique"]:
        # transient in a full install (imexctl-recover at boot, health and the first
        # prolog publish it), so a note; meanwhile the controller cannot group this tray
        notes.append(f"fabric identity (clique {clique}) not published in Slurm: "
                     "PrologSlurmctld leaves jobs on this tray to the node prologs' fallback "
                     "until it is (`imexctl identity publish`)")
    if record is not None:
        try:
            owner = slurm.job(record.job_id)
            running = (states.base_state(owner.state) in states.OWNER_LIVE
                       and cfg.node in owner.nodes)
        except Exception as exc:
            from imexctl.slurm.records import SlurmNotFound
            if not isinstance(exc, SlurmNotFound):
                notes.append(f"owner job {record.job_id} not checked: {exc}")
                return facts
            running = False
        facts["owner_running"] = running
        if not running and record.phase != "stuck":  # stuck: its own problem, not "stale"
            problems.append(f"stale domain: job {record.job_id} no longer runs here "
                            "(`imexctl health` tears it down)")
        elif (record.channel_rule or "").startswith("slurm"):
            facts["slurm_channel"] = _slurm_channel(cfg, slurm, record.job_id, notes)
    return facts


def _slurm_channel(cfg: Config, slurm: SlurmAdapter, job_id: int, notes: list[str]) -> int | None:
    """The channel switch/nvidia_imex allocated to the job on this node, as Slurm reports
    it (`scontrol show resources`, 25.11+); None, with a note, where Slurm cannot say."""
    try:
        channels = slurm.job_channels(job_id)
    except Exception as exc:  # noqa: BLE001 - status answers whatever Slurm does
        notes.append(f"Slurm's channel for job {job_id} not read: {exc}")
        return None
    if channels is None:
        notes.append("this Slurm does not report its IMEX channel "
                     "(`scontrol show resources` needs 25.11+)")
        return None
    if cfg.node not in channels:
        notes.append(f"Slurm reports no IMEX channel for job {job_id} on {cfg.node}")
    return channels.get(cfg.node)


def channel_owner(cfg: Config, imex_tray: bool | None, problems: list[str],
                  notes: list[str]) -> Json:
    """Who makes this tray's IMEX channel (decided as the prolog decides it) and whether
    that can work here. Slurm's switch/nvidia_imex needs the ``nvidia-caps-imex-channels``
    major in the /proc/devices slurmd reads; without it slurmd logs "major device not
    found, plugin disabled" and runs jobs with no channel, so the prolog drains this tray
    (``prolog/channel``). Say so before a job finds out; a tray that is not an IMEX tray
    needs no major."""
    from imexctl.tray.channels import read_major
    from imexctl.rules.groups import ChannelError
    from imexctl.slurm import localconf

    out: Json = {"owner": None, "why": None, "major": None, "usable": None}
    try:
        owner = localconf.channel_owner(cfg)
        slurm_owns, out["why"] = owner.slurm, owner.why
    except localconf.LocalConfError as exc:
        notes.append(f"channel owner unknown: cannot read slurm.conf for SwitchType ({exc})")
        return out
    out["owner"] = "slurm" if slurm_owns else "imexctl"
    try:
        out["major"] = read_major(cfg.paths.proc_devices)
    except (ChannelError, OSError) as exc:
        out["usable"] = False
        if imex_tray is not False:
            who = ("Slurm's switch/nvidia_imex is disabled on this tray (slurmd: \"major "
                   "device not found, plugin disabled\") and makes no channel" if slurm_owns
                   else "imexctl cannot make IMEX channels on this tray")
            problems.append(f"{who}: {exc}; the prolog drains this tray (prolog/channel) "
                            "rather than run a job with no channel")
        return out
    out["usable"] = True
    return out


def _local_fabric(cfg: Config, problems: list[str], notes: list[str]
                  ) -> tuple[str | None, bool | None]:
    """(live clique or None, whether this is an IMEX tray at all: None when unknown).

    A tray without NVLink fabric (no GPU, or every GPU NOT_SUPPORTED) is not an IMEX
    tray: it never gets a domain and must never be reported as failing one. An unfit
    fabric is a problem: the prolog and health drain such a tray."""
    from imexctl.tray.fabric import local_verdict

    try:
        verdict = local_verdict(cfg)
    except Exception as exc:  # an NVML binding failing in a way nobody foresaw
        notes.append(f"live fabric identity unavailable: {type(exc).__name__}: {exc}")
        return None, None
    if verdict.kind == "not_imex":
        return None, False
    if verdict.kind == "unfit":
        problems.append(f"fabric unfit: {verdict.detail} (the prolog and health drain this "
                        "tray: docs/runbook.md, prolog/fabric)")
        return None, True
    if verdict.degraded:
        notes.append(verdict.detail)
    return (verdict.clique.clique if verdict.clique else None), True


def _expected(cfg: Config, record: DomainRecord | None, raw: object, last: dict | None,
              imex_tray: bool | None) -> Json:
    """Whether an IMEX daemon should run here now (what DCGM/NVSentinel must know): the
    published expected-state file (docs/health.md) when there is one, else derived from
    the record, the last outcome and the fabric, with the same states."""
    from imexctl.tray import expected as exp

    published = exp.read(cfg)
    if published is not None:
        return {**published.to_json(), "source": "file"}
    out: Json
    if raw is not None and record is None:
        out = {"imex_expected": None, "state": "unknown", "reason": "ownership record unreadable"}
    elif record is not None and record.phase in LIVE_PHASES:
        up = record.phase == "ready"
        out = {"imex_expected": True, "state": exp.UP if up else exp.STARTING,
               "job_id": record.job_id, "since": record.updated_at if up else record.started_at}
    elif record is not None:
        out = {"imex_expected": False, "state": record.phase, "job_id": record.job_id}
    elif last and last.get("result") == "node-fault":
        out = {"imex_expected": False, "state": exp.FAILED, "job_id": last.get("job_id"),
               "reason": last.get("reason", ""), "since": last.get("finished_at")}
    elif imex_tray is False:
        out = {"imex_expected": False, "state": exp.NOT_IMEX}
    else:
        out = {"imex_expected": False, "state": exp.IDLE}
    if exp.persistent_here(cfg) and out["imex_expected"] is False:
        out["imex_expected"] = exp.imex_expected(str(out["state"]), True)
    return {**out, "persistent": exp.persistent_here(cfg), "source": "derived"}


