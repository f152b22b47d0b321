"""Prometheus metrics of the slurmctld host: ``imexctl metrics --controller``.

What PrologSlurmctld and EpilogSlurmctld counted (:mod:`imexctl.controller.counters`:
decisions by outcome, fail-opens, channel table rebuilds, hook durations) and, read when
the text is rendered, the channel table per clique and this host's imexctl version.
Both files are SlurmUser's, in the controller directory (``paths.controller_dir``, else
``<StateSaveLocation>/imexctl``), so run it as SlurmUser or root on the controller.

A counters file or table that cannot be read never stops the text: its
``imexctl_controller_state_file`` series says so, and :func:`render` returns the problems
for the caller to report.
"""

from __future__ import annotations

import platform

from imexctl import __version__
from imexctl.controller import counters
from imexctl.ops.metrics import exposition, persisted_samples, write_prom

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from imexctl.config import Config

TEXTFILE = "imexctl-controller.prom"
STATES = ("ok", "missing", "corrupt", "unreadable")

HELP = {
    "imexctl_build_info": ("gauge", "Always 1; the imexctl version and Python that wrote "
                                    "this file are its labels (audit a rolling upgrade)."),
    "imexctl_controller_decisions_total": (
        "counter", "PrologSlurmctld decisions by outcome (granted, refused, waiting, "
                   "pending, fallback, none, not-imex) and reason class."),
    "imexctl_controller_fail_opens_total": (
        "counter", "Controller hook runs that failed open (exit 0 without doing their "
                   "work: for PrologSlurmctld, no decision recorded, so the trays fall "
                   "back to published identities)."),
    "imexctl_controller_channel_table_rebuilds_total": (
        "counter", "Channel table rebuilds from the live jobs' decision records, by why "
                   "(missing, corrupt, unreadable, failover, reboot, older)."),
    "imexctl_controller_hook_duration_seconds": (
        "histogram", "Wall time of one controller hook run (from imexctl's start of the "
                     "hook to its end)."),
    "imexctl_controller_channels_in_use": (
        "gauge", "IMEX channels the controller's channel table holds per clique."),
    "imexctl_controller_channel_capacity": (
        "gauge", "IMEX channels the table can hand out per clique (channels.count - 1)."),
    "imexctl_controller_channel_table_jobs": (
        "gauge", "Jobs holding channels in the controller's channel table."),
    "imexctl_controller_state_file": (
        "gauge", "State of the controller's files (counters, channel-table): 1 for the "
                 "current of ok, missing, corrupt, unreadable."),
}


def render(cfg: Config) -> tuple[str, list[str]]:
    """(the text, problems): every family that can be told, and one line per file that
    could not be read (``path: why``)."""
    from imexctl.controller.slurmctld import table_dir

    problems: list[str] = []
    samples: dict = {}

    def add(name: str, labels: dict[str, str], value: float, suffix: str = "") -> None:
        samples.setdefault(name, []).append((name + suffix, labels, value))

    add("imexctl_build_info", {"version": __version__, "python": platform.python_version(),
                               "role": "controller"}, 1)
    try:
        directory = table_dir(cfg)
    except Exception as exc:  # noqa: BLE001 - reported in the text, never a traceback
        problems.append(f"controller directory unknown: {type(exc).__name__}: {exc}")
        for name in ("counters", "channel-table"):
            _state(add, name, "unreadable")
        return exposition(HELP, samples), problems
    state, how = counters.load(directory)
    if how in ("corrupt", "unreadable"):
        problems.append(f"{directory / counters.STATE_FILE}: {how}; counters start again "
                        "at the next hook run" if how == "corrupt" else
                        f"{directory / counters.STATE_FILE}: {how} (run as SlurmUser or root)")
    _state(add, "counters", how)
    persisted_samples(state, HELP, counters.BUCKETS, add)
    for outcome, reason in (("granted", "channel-table"), ("refused", "spans-cliques")):
        if not any(s[1].get("outcome") == outcome
                   for s in samples.get("imexctl_controller_decisions_total", [])):
            add("imexctl_controller_decisions_total", {"outcome": outcome, "reason": reason}, 0)
    for hook in ("prolog-slurmctld", "epilog-slurmctld"):
        if not any(s[1].get("hook") == hook
                   for s in samples.get("imexctl_controller_fail_opens_total", [])):
            add("imexctl_controller_fail_opens_total", {"hook": hook}, 0)
    _table(cfg, directory, add, problems)
    return exposition(HELP, samples), problems


def _state(add, name: str, how: str) -> None:
    for one in STATES:
        add("imexctl_controller_state_file", {"file": name, "state": one}, float(one == how))


def _table(cfg: Config, directory: Path, add, problems: list[str]) -> None:
    from imexctl.controller.channel_table import ChannelTable, ChannelTableError

    table = ChannelTable(directory, count=cfg.channels.count)
    try:
        usage = table.per_clique()
        jobs = len(table.held())
    except (ChannelTableError, OSError, ValueError) as exc:
        text = str(exc)
        how = "unreadable" if "unreadable" in text or isinstance(exc, OSError) else "corrupt"
        problems.append(text if str(table.path) in text else f"{table.path}: {text}")
        _state(add, "channel-table", how)
        return
    _state(add, "channel-table", "ok" if table.path.exists() else "missing")
    for clique, n in sorted(usage.items()):
        add("imexctl_controller_channels_in_use", {"clique": clique}, n)
        add("imexctl_controller_channel_capacity", {"clique": clique}, cfg.channels.count - 1)
    add("imexctl_controller_channel_table_jobs", {}, jobs)


def write_textfile(cfg: Config, directory: Path) -> tuple[Path, list[str]]:
    """Write ``directory/imexctl-controller.prom`` atomically; (its path, problems)."""
    text, problems = render(cfg)
    return write_prom(directory, TEXTFILE, text), problems


__all__ = ["render", "write_textfile", "HELP", "TEXTFILE"]
