"""What a tray publishes of its IMEX set-up beside its clique (issues 36 and 37).

Every tray of one domain must run the same ``imex.auth``: under ``"job"`` each derives
the job's CA from its own copy of the site secret, so one tray with another secret (or
none it can read) fails every job placed on it with a reason that never says why. The
tray publishes its mode and, under ``"job"``, a fingerprint of its secret; the
controller compares them per clique before a job runs (rules.groups.auth_splits).
Its ``imex.lifetime`` too: a clique whose trays disagree on it cannot form one domain
(rules.groups.lifetime_splits). And, on a persistent tray, its ``imex.domain``: the digest
of the persistent nodes_config.cfg its daemon runs and is READY on, so the maintenance
command (ops/maintain.py) sees from Slurm alone when every tray of a clique runs the new
membership.
"""

from __future__ import annotations

import re

from imexctl.base.dataclass import replace
from imexctl.base.digest import sha256
from imexctl.config import AuthMode, Config, Imex
from imexctl.imex.launcher import is_alive
from imexctl.rules.cliques import (AUTH_UNREADABLE, DOMAIN_TAG_RE, MAINTENANCE_TAG_RE,
                                   TrayIdentity)
from imexctl.tray.bootid import current_boot_id
from imexctl.tray.ownership import RecordUnreadable, StateStore

# A domain separator: the fingerprint is a digest of nothing else imexctl derives.
_FINGERPRINT_LABEL = b"imexctl auth secret fingerprint v1\0"


def secret_fingerprint(secret: bytes) -> str:
    """16 hex digits that tell two secrets apart. The secret is at least 32 random bytes
    (``auth.read_secret`` refuses anything else), so 64 published bits of a digest of it
    help no one guess it; Slurm's node records are world-readable."""
    return sha256(_FINGERPRINT_LABEL + secret).hexdigest()[:16]


def auth_tag(imex: Imex) -> str:
    """This tray's published ``imex.auth``: ``off``, ``site`` or ``job:<fingerprint>``
    (``job:unreadable`` when the secret is missing, unsafe or not random)."""
    if imex.auth is not AuthMode.JOB:
        return imex.auth.value
    # Only a tray under auth = "job" loads cryptography (the per-hook import test).
    from imexctl.imex import auth

    try:
        return "job:" + secret_fingerprint(auth.read_secret(imex.auth_secret_file))
    except auth.AuthError:
        return AUTH_UNREADABLE


def domain_tags(cfg: Config) -> tuple[str, str]:
    """This tray's published ``imex.domain`` and ``imex.maintenance``: the digest of the
    persistent domain its daemon runs and the maintenance its daemon started in, when the
    record says READY (phase "ready"), of this boot, and the daemon is alive; ("", "")
    otherwise. Also on a tray switched to ``imex.lifetime = "job"`` whose persistent daemon
    still runs (until ``imexctl recover`` removes it): the maintenance command waits for
    it to go."""
    try:
        record = StateStore(cfg.paths.state_dir).load_persistent()
    except (RecordUnreadable, OSError, ValueError):
        return "", ""
    if record is None or record.phase != "ready" or record.daemon is None:
        return "", ""
    if record.boot_id != (current_boot_id(cfg) or "") or not is_alive(record.daemon):
        return "", ""
    return (record.digest if re.fullmatch(DOMAIN_TAG_RE, record.digest) else "",
            record.maintenance if re.fullmatch(MAINTENANCE_TAG_RE, record.maintenance) else "")


def published(cfg: Config, ident: TrayIdentity) -> TrayIdentity:
    """``ident`` (the live clique) as this tray publishes it: with its auth tag, its
    ``imex.lifetime`` (issue 37: the controller compares both per clique) and its
    persistent domain's digest and maintenance."""
    domain, maintenance = domain_tags(cfg)
    return replace(ident, auth=auth_tag(cfg.imex), lifetime=cfg.imex.lifetime.value,
                   domain=domain, maintenance=maintenance)
