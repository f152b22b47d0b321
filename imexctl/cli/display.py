"""What the admin commands print, made from the data the library returns (ClusterShell's
CLI/Display rule: the library returns data, only ``cli/`` prints)."""

from __future__ import annotations

import json

from imexctl.base.clock import age, when
from imexctl.base.dataclass import asdict
from imexctl.slurm.hostlist import compress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from imexctl.ops.health_checks import Report


def identity_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, sort_keys=True)


def identity_table(rows: list[dict[str, Any]]) -> str:
    """``imexctl identity show``: one line per node."""
    lines = [f"{'NODE':<14} {'CLUSTER UUID':<37} {'CLIQUE':>6} {'GPUS':>4} {'STATE':<12} "
             f"{'LIFETIME':<10} AUTH"]
    for row in rows:
        if row["clique"] is None:
            lines.append(f"{row['node']:<14} {'(not published)':<37} {'-':>6} {'-':>4} "
                         f"{'-':<12} {'-':<10} -")
        else:   # lifetime and auth: "-" where the tray publishes none (an older imexctl)
            lines.append(f"{row['node']:<14} {row['cluster_uuid']:<37} {row['clique_id']:>6} "
                         f"{row['gpu_count']:>4} {row['state']:<12} "
                         f"{row['lifetime'] or '-':<10} {row['auth'] or '-'}")
    return "\n".join(lines)


def status_table(status: dict[str, Any]) -> str:
    exp = status.get("expected") or {}
    stuck = status.get("stuck")
    state = status["state"]
    if stuck:
        state += (f" (nvidia-imex pid {stuck['pid']} of job {stuck['job_id']} "
                  f"{'still running' if stuck['alive'] else 'gone now'}; see PROBLEM below)")
    fab = status.get("fabric") or {}
    fabric = ("not an IMEX tray (no NVLink fabric)" if fab.get("imex_tray") is False else
              f"clique {fab['clique']}" if fab.get("clique") else
              "unfit (see PROBLEM below)" if fab.get("imex_tray") else "not read")
    lines = [f"node:          {status['node']}",
             f"state:         {state}",
             f"fabric:        {fabric}",
             f"IMEX expected: {_expected_text(exp)}",
             f"channel mode:  {status['channel_mode']}"]
    owner = status.get("channel_owner") or {}
    if owner.get("owner"):
        where = "works here" if owner.get("usable") else "CANNOT make a channel here"
        lines.append(f"channels by:   {owner['owner']} ({owner['why']}; major "
                     f"{owner.get('major') or 'missing'}: {where})")
    dom = status.get("domain")
    if dom:
        daemon = dom.get("daemon") or {}
        alive = "alive" if daemon.get("alive") else "NOT RUNNING"
        dec = status.get("decision") or {}
        persistent = dom.get("lifetime") == "persistent"
        holders = ", ".join(f"job {j['job_id']} (user {j['user']}, channel {j['channel']}, "
                            f"{j['phase']})" for j in dom.get("jobs", [])) or "none"
        lines += [
            f"lifetime:      persistent (one daemon across jobs; jobs holding channels: "
            f"{holders})" if persistent else
            f"job:           {dom['job_id']} (user {dom['user']}, uid {dom['uid']})",
            f"phase:         {dom['phase']}",
            f"nodes:         {','.join(dom['nodes'])} (this node is #{dom['node_id']})",
            f"digest:        {dom['digest']}",
            f"ports:         server {dom['server_port']}, cmd {dom['cmd_port']}",
            f"channel:       {dom['channel']} (rule {dom['channel_rule']}; decision from "
            f"{dec.get('source', '?')})" if not persistent else
            f"channel:       per job (above; decision from {dec.get('source', '-')})",
            f"daemon:        pid {daemon.get('pid', '-')} via {daemon.get('launcher', '-')}: "
            f"{alive}" if daemon else "daemon:        none",
        ]
        if "domain_state" in dom:
            lines.append(f"domain:        {dom['domain_state']} (local {dom['local_state']})")
            for m in dom.get("members", []):
                bad = [f"{c['peer']} {c['status']}" for c in m["connections"]
                       if c["status"] != "CONNECTED"]
                link = f"  links: {', '.join(bad)}" if bad else ""
                lines.append(f"  {m['node']:<12} {m['host']:<16} {m['status']}{link}")
        if dom.get("steps_ms"):
            steps = ", ".join(f"{k} {v:.0f}ms" for k, v in dom["steps_ms"].items())
            lines.append(f"step timings:  {steps}")
    else:
        lines.append("domain:        none")
    sl = status.get("slurm")
    if sl:
        lines.append(f"slurm:         {sl['state']}" + (f" ({sl['reason']})" if sl["reason"] else "")
                     + f", published clique {sl.get('published_clique') or '-'}")
        if "slurm_channel" in sl:
            lines.append(f"slurm channel: {sl['slurm_channel'] if sl['slurm_channel'] is not None else '-'}"
                         " (switch/nvidia_imex, from scontrol show resources)")
        if sl.get("backend"):
            lines.append(f"slurm backend: {sl['backend']} ({sl.get('backend_selection') or '-'})")
    auth = status.get("auth") or {}
    if auth.get("mode", "off") != "off":
        certs = ", ".join(f"{c['name']} {c['days_left']:.1f} days left" if c["days_left"] is not None
                          else f"{c['name']} UNREADABLE" for c in auth.get("certificates", []))
        lines.append(f"auth:          {auth['mode']}" + (f" ({certs})" if certs else ""))
    last = status.get("last_outcome")
    if last:
        reason = f": {last['reason']}" if last.get("reason") else ""
        lines.append(f"last outcome:  job {last.get('job_id')} {last.get('hook')} "
                     f"{last.get('result')} at {when(last.get('finished_at'))} "
                     f"({last.get('duration_ms')}ms){reason}")
    for problem in status.get("problems", []):
        lines.append(f"PROBLEM:       {problem}")
    for note in status.get("notes", []):
        lines.append(f"note:          {note}")
    return "\n".join(lines)


def _expected_text(exp: dict) -> str:
    state = exp.get("state", "?")
    if exp.get("imex_expected"):
        return f"yes ({state}, job {exp.get('job_id')} since {when(exp.get('since'))})"
    if exp.get("imex_expected") is None:
        return f"unknown ({exp.get('reason') or state})"
    return f"no ({state})"


def status_json(status: dict[str, Any]) -> str:

    return json.dumps(status, indent=2, sort_keys=True, default=str)


def health_lines(report: Report) -> list[str]:
    """Lines for a person or NHC's log: repairs, notes, failures, then the verdict."""
    lines = [f"imexctl health: repaired: {t}" for t in report.repaired]
    lines += [f"imexctl health: note: {t}" for t in report.notes]
    if report.mode == "dry-run":
        lines += [f"imexctl health: would: {t}" for t in report.would]
    elif report.mode == "no-drain" and report.would:
        lines.append(f"imexctl health: note: {len(report.would)} change(s) not made "
                     "(--no-drain changes nothing; --dry-run lists them, --repair-only "
                     "makes the repairs)")
    if report.skipped:
        lines.append(f"imexctl health: skipped ([health] skip): {', '.join(report.skipped)}")
    lines += [f"imexctl health: FAIL {p.check}: {p.cause}" for p in report.problems]
    if report.drain.startswith("kept: "):
        lines.append(f"imexctl health: {report.node} is already drained "
                     f"({report.drain[6:]}); that drain is kept")
    elif report.drain == "drained":
        lines.append(f"imexctl health: drained {report.node}: {report.reason}")
    elif report.drain == "resumed":
        lines.append(f"imexctl health: resumed {report.node} (its health drain is resolved)")
    elif report.drain.startswith("failed: "):
        lines.append(f"imexctl health: could not drain or resume {report.node}: "
                     f"{report.drain[8:]}")
    elif report.drain.startswith("would ") and report.mode == "no-drain":
        lines.append(f"imexctl health: {report.node} not drained or resumed (--no-drain)")
    elif report.drain.startswith("deferred: "):
        lines.append(f"imexctl health: {report.node} left as it is until the next run "
                     f"({report.drain[10:]})")
    if not report.problems:
        lines.append(f"imexctl health: OK ({report.node}, {report.duration_ms:.0f} ms)")
    return lines


def health_json(report: Report) -> str:
    """The report for scripts: every field plus the drain reason and the exit code."""
    return json.dumps({**asdict(report), "reason": report.reason,
                       "exit_code": report.exit_code}, indent=2, sort_keys=True)




def cluster_table(view: dict[str, Any]) -> str:
    sel = view["selection"]
    what = sel["partition"] and f"partition {sel['partition']}" or \
        (sel["nodes"] and f"{len(view['nodes'])} node(s)") or "all nodes"
    lines = [f"IMEX cluster view: {what}, {len(view['nodes'])} trays, "
             f"{len(view['cliques'])} clique(s), {len(view['jobs'])} IMEX job(s)", ""]
    lines.append(f"{'CLIQUE':<42} {'LIFETIME':<10} TRAYS")
    for c in view["cliques"]:
        lines.append(f"{c['clique']:<42} {c.get('lifetime') or '-':<10} {_hostlist(c['nodes'])}")
        if c.get("lifetime") == "mixed":
            lines.append("  LIFETIME MISMATCH: " + "; ".join(
                f"{_hostlist(ns)} {lt}" for lt, ns in sorted(c["lifetimes"].items()))
                + " (jobs here are refused: refused/lifetime-mismatch)")
        dom = c.get("persistent_domain")
        if dom and dom.get("split"):
            lines.append("  PERSISTENT DOMAIN SPLIT: " + "; ".join(
                f"{_hostlist(ns)} digest {d}" for d, ns in sorted(dom["digests"].items()))
                + " (different nodes_config.cfg: imexctl maintain --membership)")
        if dom and dom["drained"]:
            lines.append(f"  persistent domain: {_hostlist(dom['drained'])} of "
                         f"{_hostlist(dom['members'])} drained by imexctl (see below)")
    if view["unpublished"]:
        lines.append(f"{'(no published identity)':<42} {_hostlist(view['unpublished'])}")
    if view["not_imex"]:
        lines.append(f"{'(not an IMEX tray: no NVLink fabric)':<42} "
                     f"{_hostlist(view['not_imex'])}")
    lines.append("")
    lines.append(f"{'JOB':>8} {'SOURCE':<10} {'CHANNEL':>7} {'CLIQUE':<42} TRAYS")
    for job in view["jobs"]:
        for d in job["domains"]:
            ch = "-" if d["channel"] is None else str(d["channel"])
            if d.get("channel_source") == "slurm":
                ch = f"{ch}(S)"           # allocated by switch/nvidia_imex
            lines.append(f"{job['job_id']:>8} {job['decision_source']:<10} {ch:>7} "
                         f"{d['clique'] or '(unpublished)':<42} {_hostlist(d['nodes'])}")
    if not view["jobs"]:
        lines.append(f"{'-':>8} (no running job holds an IMEX domain)")
    if any(d.get("channel_source") == "slurm" for j in view["jobs"] for d in j["domains"]):
        lines.append("(S): channel allocated by Slurm's switch/nvidia_imex (scontrol show resources)")
    for c in view["channels"]:
        if c["collisions"]:
            lines.append(f"CHANNEL COLLISION in {c['clique']}: channel(s) "
                         f"{','.join(map(str, c['collisions']))} used by several domains")
    lines.append("")
    if view["imexctl_drains"]:
        lines.append(f"{'DRAINED BY IMEXCTL':<12} {'AGE':>8}  REASON")
        for d in view["imexctl_drains"]:
            lines.append(f"{d['node']:<18} {age(d['age_s']):>8}  {d['reason']}")
    else:
        lines.append("no tray drained by imexctl")
    if view.get("stuck_daemons"):
        lines.append(f"STUCK DAEMON on {_hostlist(view['stuck_daemons'])}: an nvidia-imex could "
                     "not be stopped and may hold ports; `imexctl status` on the tray names "
                     "the pid (docs/runbook.md#stuck-daemon)")
    if view["other_drains"]:
        lines.append("drained by others (left alone): " + ", ".join(
            f"{d['node']} ({d['reason'] or d['state']})" for d in view["other_drains"]))
    return "\n".join(lines)


def _hostlist(names: list[str]) -> str:

    return compress(sorted(names)) if names else "-"


