"""``imexctl status``: this node's IMEX domain from the ownership record plus a live check.

The record says what imexctl believes; the live check (daemon pid + start time, ctl
query, channel node present) says whether that is still true. Human table or JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from imexctl.channels import channel_path, list_channels
from imexctl.config import Config
from imexctl.imex import ctl, launcher
from imexctl.state import RecordUnreadable, StateStore


def collect(cfg: Config, live: bool = True) -> dict[str, Any]:
    store = StateStore(cfg.paths.state_dir)
    channels = sorted(list_channels(cfg.paths.channel_dir))
    try:
        record = store.load()
    except RecordUnreadable as exc:  # a finding to show, never a traceback
        return {"node": cfg.node, "channel_mode": cfg.channels.mode, "domain": None,
                "channels_present": channels, "last_outcome": store.last_outcome(),
                "state": "unreadable", "problems": [str(exc)]}
    out: dict[str, Any] = {
        "node": cfg.node,
        "channel_mode": cfg.channels.mode,
        "domain": None,
        "channels_present": channels,
        "last_outcome": store.last_outcome(),
    }
    if record is None:
        out["state"] = "idle"
        out["problems"] = [f"leaked channel{n}" for n in channels]
        return out
    dom: dict[str, Any] = {
        "job_id": record.job_id, "user": record.user, "uid": record.uid,
        "phase": record.phase, "nodes": record.nodes, "node_id": record.node_id,
        "digest": record.digest, "server_port": record.server_port,
        "cmd_port": record.cmd_port, "channel": record.channel,
        "channel_rule": record.channel_rule, "job_dir": record.job_dir,
        "steps_ms": record.steps_ms, "started_at": record.started_at,
        "daemon": None,
    }
    problems: list[str] = []
    if record.daemon:
        alive = launcher.is_alive(record.daemon)
        dom["daemon"] = {"pid": record.daemon.pid, "launcher": record.daemon.launcher,
                         "alive": alive}
        if not alive:
            problems.append(f"daemon pid {record.daemon.pid} is not running")
    if record.channel is not None and record.channel not in channels:
        problems.append(f"channel{record.channel} missing "
                        f"({channel_path(cfg.paths.channel_dir, record.channel)})")
    for n in channels:
        if n != record.channel:
            problems.append(f"leaked channel{n}")
    if live and dom["daemon"] and dom["daemon"]["alive"]:
        config = Path(record.job_dir) / "config.cfg"
        dom["local_state"] = ctl.query_local(cfg.paths.imex_ctl_binary, config)
        view = ctl.query_domain(cfg.paths.imex_ctl_binary, config)
        dom["domain_state"] = view.status
        names = dict(zip([m.get("host") for _, m in sorted(view.members.items())],
                         record.nodes))
        dom["members"] = [
            {"node": names.get(m.get("host"), m.get("host")), "host": m.get("host"),
             "status": m.get("status")} for _, m in sorted(view.members.items())]
        if view.error:
            problems.append(view.error)
        elif not view.up:
            problems.append(f"domain {view.status}: " + "; ".join(view.problems()[:4]))
    out["domain"] = dom
    out["state"] = "degraded" if problems else record.phase
    out["problems"] = problems
    return out


def render_table(status: dict[str, Any]) -> str:
    lines = [f"node:          {status['node']}",
             f"state:         {status['state']}",
             f"channel mode:  {status['channel_mode']}"]
    dom = status.get("domain")
    if dom:
        daemon = dom.get("daemon") or {}
        alive = "alive" if daemon.get("alive") else "NOT RUNNING"
        lines += [
            f"job:           {dom['job_id']} (user {dom['user']}, uid {dom['uid']})",
            f"phase:         {dom['phase']}",
            f"nodes:         {','.join(dom['nodes'])} (this node is #{dom['node_id']})",
            f"digest:        {dom['digest']}",
            f"ports:         server {dom['server_port']}, cmd {dom['cmd_port']}",
            f"channel:       {dom['channel']} (rule {dom['channel_rule']})",
            f"daemon:        pid {daemon.get('pid', '-')} via {daemon.get('launcher', '-')}: "
            f"{alive}" if daemon else "daemon:        none",
        ]
        if "domain_state" in dom:
            lines.append(f"domain:        {dom['domain_state']} (local {dom['local_state']})")
            for m in dom.get("members", []):
                lines.append(f"  {m['node']:<12} {m['host']:<16} {m['status']}")
        if dom.get("steps_ms"):
            steps = ", ".join(f"{k} {v:.0f}ms" for k, v in dom["steps_ms"].items())
            lines.append(f"step timings:  {steps}")
    else:
        lines.append("domain:        none")
    last = status.get("last_outcome")
    if last:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last.get("finished_at", 0)))
        reason = f": {last['reason']}" if last.get("reason") else ""
        lines.append(f"last outcome:  job {last.get('job_id')} {last.get('hook')} "
                     f"{last.get('result')} at {when} ({last.get('duration_ms')}ms){reason}")
    for problem in status.get("problems", []):
        lines.append(f"PROBLEM:       {problem}")
    return "\n".join(lines)


def render_json(status: dict[str, Any]) -> str:
    return json.dumps(status, indent=2, sort_keys=True, default=str)
