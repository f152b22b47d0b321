"""What ``status``, ``health``, ``doctor`` and the metrics say about imex.auth's certificates.

Imported only when ``imex.auth`` is not "off" (it loads imexctl.imex.auth, and with it
``cryptography``). Every fault comes back as data naming the file, never an exception.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from imexctl.base.dataclass import dataclass
from imexctl.base.fsutil import read_json
from imexctl.config import AuthMode, Config
from imexctl.imex import auth

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.jsontypes import Json
    from imexctl.tray.ownership import DomainRecord

DAY_S = 86400.0
# A daemon's start time from /proc is good to about a second (boot time in whole seconds):
# a file changed within this much after the start counts as loaded.
START_SLACK_S = 2.0


@dataclass(frozen=True)
class Expiry:
    name: str                      # site-ca | site-cert | job-cert
    path: str
    seconds_left: float | None     # None: unreadable (``error`` says why)
    error: str = ""

    def as_dict(self) -> Json:
        days = None if self.seconds_left is None else round(self.seconds_left / DAY_S, 2)
        return {"name": self.name, "path": self.path, "days_left": days,
                "seconds_left": None if self.seconds_left is None else round(self.seconds_left),
                "error": self.error or None}


def _one(name: str, path: Path, now: float, what: str) -> Expiry:
    try:
        info = auth.read_cert_info(path, what)
    except auth.AuthError as exc:
        return Expiry(name, str(path), None, str(exc))
    return Expiry(name, str(path), info.seconds_left(now))


def expiries(cfg: Config, record: DomainRecord | None, now: float | None = None) -> list[Expiry]:
    """The certificates in use here: the site CA and this tray's certificate
    (``auth = "site"``), or the running job's certificate (``auth = "job"``, when a
    domain is recorded)."""
    now = time.time() if now is None else now
    imex = cfg.imex
    if imex.auth == AuthMode.SITE:
        return [_one(name, path, now, what) for name, path, what in (
            ("site-ca", imex.auth_ca_file, "auth CA"),
            ("site-cert", imex.auth_cert_file, "auth certificate")) if path is not None]
    if imex.auth == AuthMode.JOB and record is not None and record.job_dir:
        return [_one("job-cert", Path(record.job_dir) / auth.JOB_CERT, now,
                     "job auth certificate")]
    return []


def status_view(cfg: Config, record: DomainRecord | None, now: float | None = None
                ) -> Json:
    """``status``'s "auth" object: the mode and each certificate's time left."""
    return {"mode": cfg.imex.auth,
            "certificates": [e.as_dict() for e in expiries(cfg, record, now)]}


def problems(cfg: Config, record: DomainRecord | None, now: float | None = None
             ) -> tuple[list[str], list[str]]:
    """(faults, warnings): a bad site file or secret, an expired site certificate or an
    unreadable job certificate is a fault; a site certificate that expires within
    ``imex.auth_expiry_warn_days``, or a running job's expired certificate, a warning."""
    imex = cfg.imex
    try:
        if imex.auth == AuthMode.SITE:
            auth.load_site(imex, now)
        elif imex.auth == AuthMode.JOB:
            auth.read_secret(imex.auth_secret_file)
    except auth.AuthError as exc:
        return [str(exc)], []
    faults: list[str] = []
    warnings: list[str] = []
    for e in expiries(cfg, record, now):
        if e.seconds_left is None:
            faults.append(e.error)
        elif e.seconds_left <= 0 and e.name == "job-cert":
            # The running job outlived its certificate (its time limit was extended, or it
            # is longer than imex.auth_cert_lifetime_h): the job's matter, not the tray's
            # (audit F4-5). Connected daemons keep their sessions; a reconnect is refused.
            warnings.append(f"{e.path}: job {record.job_id if record else '?'}'s certificate "
                            f"expired {abs(e.seconds_left) / DAY_S:.1f} days ago: its daemons "
                            "refuse a peer that reconnects (imex.auth_cert_lifetime_h)")
        elif e.seconds_left <= 0:
            faults.append(f"{e.path}: expired {abs(e.seconds_left) / DAY_S:.1f} days ago")
        elif imex.auth == AuthMode.SITE and e.seconds_left < imex.auth_expiry_warn_days * DAY_S:
            warnings.append(f"{e.path} expires in {e.seconds_left / DAY_S:.1f} days "
                            f"(under imex.auth_expiry_warn_days = {imex.auth_expiry_warn_days:g})")
    return faults, warnings


def site_newest_change(cfg: Config) -> float:
    """When the newest of the site files was written (epoch s; links not followed)."""
    newest = 0.0
    for path in (cfg.imex.auth_ca_file, cfg.imex.auth_cert_file, cfg.imex.auth_key_file):
        try:
            newest = max(newest, os.lstat(path).st_mtime) if path is not None else newest
        except OSError:
            pass
    return newest


def reload_due(cfg: Config, job_dir: Path, started: float) -> str | None:
    """With ``auth = "site"``: the site files' fingerprint when the job's daemon has not
    loaded those contents yet, else None. What it loaded is the fingerprint recorded in
    the job's directory by the prolog that started it (or by the last SIGUSR1); a job
    started by an imexctl that recorded none falls back to the files' times (changed
    after the daemon started)."""
    fingerprint = auth.site_fingerprint(cfg.imex)
    try:
        seen = read_json(job_dir / auth.SITE_LOADED)
    except (OSError, ValueError):
        seen = None
    if isinstance(seen, dict) and isinstance(seen.get("fingerprint"), str):
        return fingerprint if seen["fingerprint"] != fingerprint else None
    return fingerprint if site_newest_change(cfg) > started + START_SLACK_S else None


def reload_daemon(job_dir: Path, pid: int, fingerprint: str) -> str | None:
    """Ask the job's daemon to reload its TLS files (SIGUSR1: NVIDIA's guide, "signals";
    handled at most once per 5 s) and remember the contents it now has (``fingerprint``,
    from :func:`reload_due`). None when sent, else why not."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return f"SIGUSR1 to nvidia-imex pid {pid}: {exc.strerror or exc}"
    try:
        auth.remember_site_loaded(job_dir, fingerprint)
    except OSError as exc:
        return f"sent SIGUSR1 to nvidia-imex pid {pid}, but {job_dir}: {exc.strerror or exc}"
    return None
