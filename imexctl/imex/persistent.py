"""The persistent IMEX domain of a clique (issue 37, ``imex.lifetime = "persistent"``).

One daemon per tray, owned by imexctl, living across jobs. Its members are every tray
whose published identity is in the tray's clique and publishes the persistent lifetime
(``rules.cliques.persistent_members``), in natural node-name order, so each tray of the
clique renders a byte-identical ``nodes_config.cfg`` on its own, as the trays of a job do
(the same ``imex.render`` functions; only where the members come from differs). Its files
live in ``<run_dir>/persistent`` (``tray.jobdir.PERSISTENT``), its record in the state
dir's ``persistent.json`` (``tray.ownership.PERSISTENT_RECORD``).

``nvidia-imex`` reads ``nodes_config.cfg`` only at start: a membership change needs every
daemon of the clique restarted (``imexctl maintain``, ops/maintain.py), so nothing here
restarts a live daemon whose members changed; it reports the change.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from imexctl import __version__
from imexctl.base.dataclass import dataclass
from imexctl.base.fsutil import atomic_write, ensure_secure_dir, read_bytes
from imexctl.config import AuthMode, Lifetime
from imexctl.errors import NodeFault
from imexctl.imex.ctl import CtlClient
from imexctl.imex.launcher import (PERSISTENT_UNIT, environment_file, forget_importers,
                                   is_alive, refresh_exe, start_direct, start_unit,
                                   stop_unit)
from imexctl.imex.render import (Ports, RenderError, domain_digest, load_template,
                                 node_entries, persistent_grace_time, persistent_ports,
                                 render_daemon_config, render_nodes_config,
                                 system_resolver)
from imexctl.tray import jobdir
from imexctl.tray.ownership import DomainRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Sequence

    from imexctl.config import Config
    from imexctl.imex.ctl import DomainView
    from imexctl.imex.render import Resolver
    from imexctl.tray.ownership import DaemonIdentity

READY = "READY"
LOCAL_POLL_S = 0.2
ANSWER_WITHIN_S = 5.0
"""How long health lets a live persistent daemon take to answer ``-q`` READY before it
counts as hung (OCI's health check allows 5 s)."""


@dataclass(frozen=True)
class PersistentDomain:
    """The persistent domain as this tray renders it: members, files and digest."""
    members: tuple[str, ...]      # Slurm node names, natural order (nodes_config.cfg's)
    entries: tuple[str, ...]      # nodes_config.cfg's lines (addresses or host names)
    node_id: int                  # this tray's line
    nodes_config: str
    config: str                   # config.cfg
    ports: Ports
    digest: str                   # imex.render.domain_digest: alike on every tray


def render(cfg: Config, clique: str, members: Sequence[str], addrs: Sequence[str],
           *, resolver: Resolver | None = None) -> PersistentDomain:
    """The persistent domain's files for this tray (``cfg.node``), rendered, not written.
    ``members``: the clique's persistent trays in natural order, ``addrs`` their NodeAddrs.
    NodeFault when this tray is not a member or the members cannot be rendered."""
    members = list(members)
    if cfg.node not in members:
        raise NodeFault(f"{cfg.node} is not in the persistent domain of clique {clique} "
                        "(its identity is not published as persistent there)")
    node_id = members.index(cfg.node)
    try:
        got = node_entries(list(addrs), node_id, labels=members,
                           host_names=cfg.imex.node_entries == "hostname",
                           resolver=resolver or system_resolver)
        nodes_cfg = render_nodes_config(got.entries)
    except RenderError as exc:
        raise NodeFault(str(exc)) from None
    ports = persistent_ports(cfg.imex.server_port_base, cfg.imex.cmd_port_base)
    pdir = jobdir.persistent_path(cfg.paths.run_dir)
    auth = _auth_settings(cfg, got.entries[node_id]) if cfg.imex.auth.on else None
    config = render_daemon_config(
        load_template(cfg.paths.imex_config_template, auth=cfg.imex.auth.on),
        nodes_config=pdir / jobdir.NODES_CONFIG, ports=ports,
        log_file=pdir / jobdir.DAEMON_LOG, wait_for_quorum=cfg.imex.wait_for_quorum,
        cmd_bind_ip=got.cmd_bind_ip,
        grace_time=persistent_grace_time(cfg.imex.node_disconnected_grace_time), auth=auth)
    return PersistentDomain(members=tuple(members), entries=tuple(got.entries),
                            node_id=node_id, nodes_config=nodes_cfg, config=config,
                            ports=ports, digest=domain_digest(nodes_cfg, ports, None))


def _auth_settings(cfg: Config, address: str) -> dict[str, str]:
    """config.cfg's authentication keys: a persistent domain takes ``auth = "site"`` only
    (config check refuses ``auth = "job"`` with it: the daemon outlives jobs)."""
    from imexctl.imex import auth
    from imexctl.imex.render import auth_settings

    if cfg.imex.auth != AuthMode.SITE:   # pragma: no cover - config check refuses it
        raise NodeFault(f"imex.auth = {cfg.imex.auth.value!r} cannot serve a persistent domain")
    try:
        site = auth.load_site(cfg.imex, address=address)
    except auth.AuthError as exc:
        raise NodeFault(str(exc)) from None
    return auth_settings(key=site.key, cert=site.cert.path, ca=site.ca.path,
                         target=cfg.imex.auth_target)


def write(cfg: Config, domain: PersistentDomain) -> Path:
    """Write the domain's nodes_config.cfg and config.cfg into ``<run_dir>/persistent``
    (root's, 0700: no job's user reads the persistent domain's files)."""
    ensure_secure_dir(cfg.paths.run_dir)
    pdir = jobdir.persistent_path(cfg.paths.run_dir)
    ensure_secure_dir(pdir, 0o700)
    atomic_write(pdir / jobdir.NODES_CONFIG, domain.nodes_config, 0o600, durable=False)
    atomic_write(pdir / jobdir.CONFIG, domain.config, 0o600, durable=False)
    return pdir


def new_record(cfg: Config, clique: str, domain: PersistentDomain, boot_id: str
               ) -> DomainRecord:
    """The ownership record of a persistent domain: no job (job_id 0), no user, no channel."""
    return DomainRecord(
        job_id=0, uid=0, user="", nodes=list(domain.members), addresses=list(domain.entries),
        node_id=domain.node_id, digest=domain.digest, server_port=domain.ports.server,
        cmd_port=domain.ports.cmd, channel=None, channel_rule="",
        job_dir=str(jobdir.persistent_path(cfg.paths.run_dir)), phase="starting",
        boot_id=boot_id, decision_source="", clique=clique, imexctl_version=__version__,
        lifetime=Lifetime.PERSISTENT.value)


def start(cfg: Config) -> DaemonIdentity:
    """Start the persistent daemon on ``<run_dir>/persistent/config.cfg``: spawned
    (``imex.launcher = "direct"``) or as ``imexctl-imex-persistent.service`` (``"systemd"``;
    ``Restart=no``: health restarts it, after forgetting persist.dat). NodeFault when the
    daemon cannot start. The caller holds the node lock and no persistent daemon runs: a
    persist.dat its predecessor left after an unclean stop would hold the new one in
    WAITING_FOR_RECOVERY (until every former importer reconnected, or for ever when the
    clique's other daemons restart after it), so it goes first
    (``launcher.forget_importers``)."""
    pdir = jobdir.persistent_path(cfg.paths.run_dir)
    forget_importers(cfg)
    if cfg.imex.launcher == "systemd":
        try:
            return start_unit(PERSISTENT_UNIT)
        except NodeFault:
            stop_unit(PERSISTENT_UNIT, cfg.imex.stop_grace_s)   # not left half up, untracked
            raise
    return start_direct(cfg.paths.imex_binary, pdir / jobdir.CONFIG, pdir / jobdir.STDIO,
                        environment_file(cfg.imex.environment_file))


def ctl(cfg: Config, timeout_s: float = 3.0) -> CtlClient:
    """``nvidia-imex-ctl`` on the persistent domain's config."""
    return CtlClient(cfg.paths.imex_ctl_binary,
                     jobdir.persistent_path(cfg.paths.run_dir) / jobdir.CONFIG,
                     environment_file(cfg.imex.environment_file), timeout_s)


def local_state(cfg: Config, within_s: float | None = None,
                sleep: Callable[[float], None] = time.sleep) -> str:
    """This tray's ``-q`` answer: READY as soon as it says so, else its last word after
    ``within_s`` (default ``ANSWER_WITHIN_S``; UNAVAILABLE when the daemon does not answer
    at all)."""
    deadline = time.monotonic() + (ANSWER_WITHIN_S if within_s is None else within_s)
    state = "UNAVAILABLE"
    while True:
        left = deadline - time.monotonic()
        state = ctl(cfg, timeout_s=max(0.5, min(3.0, left))).local()
        if state == READY or time.monotonic() + LOCAL_POLL_S >= deadline:
            return state
        sleep(LOCAL_POLL_S)


NUDGED = "nudged"     # <run_dir>/persistent/nudged: its mtime is the last SIGUSR1 sent


def nudge(cfg: Config, record: DomainRecord,
          sleep: Callable[[float], None] = time.sleep) -> str:
    """SIGUSR1 to this tray's persistent daemon when it would connect a link now
    (``imex.ready.nudge_use``: the domain is DEGRADED, a link of this tray is down and
    every member accepts peers): the daemon restarts its outgoing connections instead of
    waiting out its back-off (15, 31, 62 s). The daemon ignores a SIGUSR1 within 5 s of
    the last one, so a nudge sent less than 5 s after the previous one (a health run
    right after another) waits out the rest of that window first. What was done, or ""
    (one ``-N -j``)."""
    from imexctl.imex.ready import NUDGE_INTERVAL_S, Member, nudge_use, sigusr1_nudge

    if record.daemon is None:
        return ""
    members = [Member(n, a) for n, a in zip(record.nodes, record.addresses)]
    view = ctl(cfg).domain()
    if nudge_use(view, members, members[record.node_id]) != "now":
        return ""
    stamp = jobdir.persistent_path(cfg.paths.run_dir) / NUDGED
    try:
        since = time.time() - stamp.stat().st_mtime
    except OSError:
        since = NUDGE_INTERVAL_S
    if 0 <= since < NUDGE_INTERVAL_S:
        sleep(NUDGE_INTERVAL_S - since + 0.1)
    try:
        sigusr1_nudge(record.daemon)()
        atomic_write(stamp, f"{record.daemon.pid}\n", 0o600, durable=False)
    except OSError as exc:
        return f"SIGUSR1 to the persistent nvidia-imex (pid {record.daemon.pid}) failed: {exc}"
    links = (view.members.get(record.node_id) or {}).get("connections", {})
    down = [members[i].name for i, conn in sorted(links.items())
            if conn["status"] != "CONNECTED" and 0 <= i < len(members)]
    return (f"sent SIGUSR1 to the persistent nvidia-imex (pid {record.daemon.pid}): "
            f"its links to {', '.join(down) or 'a peer'} were down while every member "
            "accepts peers")


JOB_POLL_S = 0.2
_IMPORTER = re.compile(r"Node\s*#?\s*(\d+)\s*:\s*(\S+)")


def importers(path: Path) -> list[str]:
    """The importers persist.dat lists ("Node #: ip address of the imported nodes", IMEX
    guide; only the nodes_config key when none is outstanding), as ``"Node N: addr"``.
    Per node, not per channel: NVIDIA documents nothing that tells which channel, or which
    job, an import belongs to. The file's exact format is not documented: lines in the
    guide's words are read, and a JSON object's ``importers`` map (the simulator's).
    Empty when the file is missing, lists none, or is no regular file (never a symlink
    or FIFO followed) of at most MAX_STATE_FILE bytes."""
    try:
        data_bytes = read_bytes(path)
    except (OSError, ValueError):
        return []
    if data_bytes is None:
        return []
    text = data_bytes.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        found = data.get("importers")
        return [f"Node {k}: {v}" for k, v in sorted(found.items())] \
            if isinstance(found, dict) else []
    return [f"Node {m.group(1)}: {m.group(2)}" for m in _IMPORTER.finditer(text)]


def job_trays_lacking(view: DomainView, record: DomainRecord, job_nodes: Sequence[str]
                      ) -> list[str]:
    """What keeps a job's trays from being UP in one ``-N -j`` answer of the persistent
    domain: a job tray that is no member, not listed or not READY, or a link between two
    of the job's trays that is not CONNECTED. Trays of the clique outside the job are not
    looked at (a rebooting tray elsewhere must not hold this job). Empty: the job's trays
    are UP."""
    if view.status == "UNKNOWN":
        return [view.error or "nvidia-imex-ctl -N gave no answer"]
    index = {name: i for i, name in enumerate(record.nodes)}
    out = [f"{n} is not a member of the persistent domain" for n in job_nodes
           if n not in index]
    ids = {index[n]: n for n in job_nodes if n in index}
    for idx, name in sorted(ids.items()):
        row = view.members.get(idx)
        if row is None:
            out.append(f"{name} not listed")
            continue
        if row["status"] != READY:
            out.append(f"{name} {row['status'] or '?'}")
        for peer, conn in sorted(row["connections"].items()):
            if peer in ids and peer != idx and conn["status"] != "CONNECTED":
                out.append(f"{name}->{ids[peer]} {conn['status'] or '?'}")
    return out


def wait_job_trays_up(cfg: Config, record: DomainRecord, job_nodes: Sequence[str],
                      budget_s: float, sleep: Callable[[float], None] = time.sleep
                      ) -> list[str]:
    """Poll ``-N -j`` until the job's trays are UP in the persistent domain (one answer per
    poll; this tray's daemon is nudged with SIGUSR1 when that would connect a link now,
    at most once per 5 s); returns what still lacks after ``budget_s`` (empty: UP)."""
    from imexctl.imex.ready import NUDGE_INTERVAL_S, Member, nudge_use, sigusr1_nudge

    members = [Member(n, a) for n, a in zip(record.nodes, record.addresses)]
    client = ctl(cfg)
    deadline = time.monotonic() + budget_s
    last_nudge = -NUDGE_INTERVAL_S
    while True:
        view = client.domain()
        lacking = job_trays_lacking(view, record, job_nodes)
        now = time.monotonic()
        if not lacking or now >= deadline:
            return lacking
        if record.daemon is not None and now - last_nudge >= NUDGE_INTERVAL_S \
                and nudge_use(view, members, members[record.node_id]) == "now":
            last_nudge = now
            try:
                sigusr1_nudge(record.daemon)()
            except OSError:
                pass        # the daemon went: the next answer says so
        sleep(JOB_POLL_S)


def wait_local_ready(cfg: Config, daemon: DaemonIdentity, budget_s: float,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until this tray's daemon answers ``-q`` READY (its peers need not be up: they
    join as their own trays boot). NodeFault when the daemon exits or the budget ends."""
    client = ctl(cfg)
    deadline = time.monotonic() + budget_s
    state = "UNAVAILABLE"
    while True:
        if not is_alive(daemon):
            raise NodeFault(f"the persistent nvidia-imex (pid {daemon.pid}) exited during "
                            "start-up")
        state = client.local()
        if state == READY:
            refresh_exe(daemon)
            return
        if time.monotonic() >= deadline:
            raise NodeFault(f"the persistent nvidia-imex is not READY after {budget_s:g}s "
                            f"(-q: {state})")
        sleep(LOCAL_POLL_S)


__all__ = ["ANSWER_WITHIN_S", "PersistentDomain", "ctl", "importers", "job_trays_lacking",
           "local_state",
           "new_record", "nudge", "render", "start", "wait_job_trays_up", "wait_local_ready",
           "write"]
