"""``imexctl recover``: clear what an earlier boot (or a crashed slurmd) left behind.

After a reboot the ownership record in the state dir still names the job of the old
boot, although its daemon, channel and per-job files are gone or meaningless. A record
is from an old boot when its ``boot_id`` differs from this boot's
(``/proc/sys/kernel/random/boot_id``); a record written before records were stamped
counts as old when it started before this boot did. Recovery tears such a record down
with the epilog's verified teardown, removes per-job directories and channel devices no
current domain owns, and republishes the tray's fabric identity.

The boot-time oneshot (``imexctl-recover.service``, before slurmd) and ``imexctl health``
both run it; running it again changes nothing. The primitives here return what they
did: the caller reports it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from imexctl.base.dataclass import dataclass, field
from imexctl.tray import jobdir
from imexctl.tray.bootid import current_boot_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.config import Config
    from typing import Any, Callable


Failure = tuple[str, str]                     # (step, cause)
if TYPE_CHECKING:
    Teardown = Callable[[Any], list[Failure]]  # record -> failures; the epilog's teardown


@dataclass
class Recovery:
    """What one recovery run did and what it could not do."""
    repaired: list[str] = field(default_factory=list)   # one line per thing done
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stale_found: int = 0

    def merge(self, other: "Recovery") -> None:
        self.repaired += other.repaired
        self.failures += other.failures
        self.notes += other.notes
        self.stale_found += other.stale_found


def boot_time() -> float:
    from imexctl.base.proc import boot_time as kernel_boot_time
    return kernel_boot_time()


def record_boot_id(record: Any, raw: dict | None = None) -> str | None:
    """The boot id a record was written in: the record's field once the record has one,
    else the raw JSON's key (older DomainRecord classes drop unknown keys)."""
    value = getattr(record, "boot_id", None) or (raw or {}).get("boot_id")
    return value if isinstance(value, str) and value else None


def from_old_boot(record: Any, raw: dict | None, current_boot: str | None,
                  booted_at: float) -> bool:
    recorded = record_boot_id(record, raw)
    if recorded and current_boot:
        return recorded != current_boot
    started = getattr(record, "started_at", None)
    return isinstance(started, (int, float)) and started < booted_at


def tear_down_old_boot(store: Any, teardown: Teardown, current_boot: str | None,
                       booted_at: float | None = None) -> Recovery:
    """With the node lock held: tear down the record if an old boot wrote it."""
    from imexctl.base.fsutil import read_json
    from imexctl.tray.ownership import RECORD

    out = Recovery()
    record = store.load()
    if record is None:
        return out
    raw = read_json(store.dir / RECORD)
    booted_at = boot_time() if booted_at is None else booted_at
    if not from_old_boot(record, raw if isinstance(raw, dict) else None, current_boot,
                         booted_at):
        return out
    out.stale_found = 1
    failures = teardown(record)
    if failures:
        step, cause = failures[0]
        out.failures.append(("reboot", f"domain of job {record.job_id} left by an earlier boot "
                                       f"could not be removed ({step}: {cause})"))
    else:
        out.repaired.append(f"tore down the domain of job {record.job_id} left by an earlier boot")
    return out


def sweep_job_dirs(run_dir: Path, keep: str | None) -> Recovery:
    """Remove ``run_dir/job-<id>`` entries other than ``keep``, each by its own name.

    Anything else in run_dir (expected.json, names that merely look like job dirs) stays.
    """
    from imexctl.base.fsutil import check_secure_dir, remove_path

    out = Recovery()
    try:
        check_secure_dir(run_dir)
        names = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        return out
    except OSError as exc:
        out.failures.append(("job-dirs", str(exc)))
        return out
    for name in names:
        if name == keep or not jobdir.is_job_dir(name):
            continue
        try:
            if remove_path(run_dir / name):
                out.repaired.append(f"removed leftover {run_dir / name}")
        except OSError as exc:
            out.failures.append(("job-dirs", f"{run_dir / name}: {exc.strerror or exc}"))
    return out


def sweep_channels(channel_dir: Path, keep: set[int]) -> Recovery:
    """Remove channel devices that no domain of this boot owns."""
    from imexctl.tray.channels import list_channels, remove_channels
    from imexctl.base.fsutil import check_secure_dir

    out = Recovery()
    try:
        check_secure_dir(channel_dir)
        leaked = set(list_channels(channel_dir)) - keep
        if leaked:
            removed = remove_channels(channel_dir, leaked)
            if removed:
                out.repaired.append("removed leaked channel" + ",".join(map(str, removed)))
            left = sorted(leaked & set(list_channels(channel_dir)))
            if left:
                out.failures.append(("channels", "leaked channel" + ",".join(map(str, left))
                                     + " cannot be removed"))
    except FileNotFoundError:
        return out
    except OSError as exc:
        out.failures.append(("channels", str(exc)))
    return out


def republish_identity(cfg: Config, slurm: SlurmAdapter) -> tuple[str | None, str | None]:
    """Publish this tray's live identity; (what changed or None, why not or None).

    Best effort: an Extra that is not JSON, or a Slurm that does not answer, is a note.
    """
    from imexctl.rules.cliques import identity_from_extra
    from imexctl.tray.identity import local_identity
    from imexctl.rules.cliques import EXTRA_KEY, TrayUnfit

    try:
        ident = local_identity(cfg)
    except TrayUnfit as exc:
        return None, f"identity not published: {exc}"
    try:
        node = slurm.nodes([cfg.node]).get(cfg.node)
        published = identity_from_extra(getattr(node, "extra", ""))
        if published is not None and published.clique == ident.clique:
            return None, None
        slurm.extra_merge(cfg.node, EXTRA_KEY, ident.to_extra())
    except Exception as exc:  # noqa: BLE001 - republishing is best effort (audit F-12)
        return None, f"identity not republished: {exc}"
    was = published.clique if published else "nothing"
    return f"published identity {ident.clique} (was {was})", None


def recover(cfg: Config, teardown: Teardown, slurm: SlurmAdapter | None = None,
            current_boot: str | None = None, lock_wait_s: float = 30.0) -> Recovery:
    """The whole recovery: old-boot record, unowned job dirs and channels, identity."""
    from imexctl.tray import expected
    from imexctl.ops import metrics
    from imexctl.tray.ownership import LockTimeout, StateStore

    out = Recovery()
    store = StateStore(cfg.paths.state_dir)
    current_boot = current_boot or current_boot_id(cfg)
    try:
        with store.locked(timeout_s=lock_wait_s):
            out.merge(tear_down_old_boot(store, teardown, current_boot))
            record = store.load()
            keep_dir = jobdir.name(record.job_id) if record is not None else None
            keep_channels = {record.channel} if record and record.channel is not None else set()
            out.merge(sweep_job_dirs(cfg.paths.run_dir, keep_dir))
            out.merge(sweep_channels(cfg.paths.channel_dir, keep_channels))
    except LockTimeout as exc:
        out.failures.append(("lock", str(exc)))
        record = None
    except (OSError, ValueError, TypeError) as exc:  # unreadable record, unusable state dir
        out.failures.append(("record", f"ownership record unusable: {exc}"))
        record = None
    if not out.failures and record is None:
        expected.write(cfg, expected.IDLE)
    if out.stale_found:
        metrics.count(cfg, "stale_domains_found", out.stale_found)
    if slurm is not None:
        changed, note = republish_identity(cfg, slurm)
        if changed:
            out.repaired.append(changed)
        if note:
            out.notes.append(note)
    return out
