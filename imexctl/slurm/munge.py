"""Seal and open the controller's decision with MUNGE, which every Slurm node already runs.

The decision travels in the job record, whose text the job's user co-writes (JobName,
Comment, WorkDir, StdErr, 26.05's SubmitLine...). No parser can tell the real
AdminComment from a copy planted in one of those fields, so the record carries its own
proof: a MUNGE credential over its digest. MUNGE names the uid that made a credential
and nobody can make one without the cluster's munge.key, so a node prolog believes only
a record that SlurmUser (or root) sealed, wherever in the text it stands. No new secret
to distribute: Slurm's auth/munge already needs munged and the key on every node.

A credential that munged reports expired, rewound or replayed was still made with the
cluster's key by the uid it names (munge_decode returns its payload and uid then). Such a
credential is only as good as the moment it was made: :meth:`MungeSeal.open_sealed` gives
the credential's ENCODE_TIME with the payload, and a decision is believed only when it was
encoded after the job it names was submitted (imexctl/rules/decision.py), so a record of an
earlier incarnation of a reissued job id is refused whatever MUNGE's status.
"""

from __future__ import annotations

import pwd
import re
from pathlib import Path

from imexctl.base.dataclass import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Config
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.localconf import LocalSlurmConf

# unmunge's exit status is the MUNGE error number (munge.h).
_AUTHENTIC = frozenset({0, 15, 16, 17})   # success, expired, rewound, replayed
_FORGED = frozenset({8, 9, 10, 11, 12, 13, 14, 18})   # bad cred/version/cipher/mac/zip/realm,
# invalid, unauthorized: whatever the text is, it is no credential of this cluster
CRED_RE = r"MUNGE:[A-Za-z0-9+/=]{8,4096}:"
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class Opened:
    """A credential MUNGE vouched for: its payload, the uid that made it and when it was
    encoded (epoch s, the encoding host's clock; None when unmunge did not say)."""
    payload: str
    uid: int
    encode_time: int | None


class SealError(Exception):
    """MUNGE cannot be asked (no munge/unmunge, munged down): nothing can be verified."""


class MungeSeal:
    """Seal text as one uid; open credentials, trusting only ``trusted_uids``."""

    def __init__(self, bin_dir: Path | str = "/usr/bin", socket: str | None = None,
                 trusted_uids: frozenset[int] = frozenset({0}), timeout_s: float = 10.0):
        self.bin_dir = Path(bin_dir)
        self.socket = socket
        self.trusted_uids = frozenset(trusted_uids)
        self.timeout_s = timeout_s

    def _argv(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bin_dir / tool)]
        if self.socket:
            argv.append(f"--socket={self.socket}")
        return [*argv, *args]

    def seal(self, payload: str) -> str:
        """A credential over ``payload`` made as this process's uid; SealError if none."""
        from imexctl.base.subproc import Bounded, run_text

        res = run_text(self._argv("munge", "--string", payload), self.timeout_s, _ENV)
        if isinstance(res, Bounded):
            raise SealError(f"munge: {res.error}")
        cred = res.stdout.strip()
        if res.returncode != 0 or not re.fullmatch(CRED_RE, cred):
            raise SealError(f"munge -> rc {res.returncode}: "
                            f"{(res.stderr or res.stdout).strip()[:200] or 'no credential'}")
        return cred

    def open(self, cred: str) -> str | None:
        """The payload of ``cred`` when MUNGE vouches for it and a trusted uid made it;
        None for a forgery, a foreign cluster's credential or an untrusted maker.
        SealError when MUNGE itself cannot answer."""
        opened = self.open_sealed(cred)
        return opened.payload if opened is not None else None

    def open_sealed(self, cred: str) -> Opened | None:
        """:meth:`open` with the credential's uid and ENCODE_TIME."""
        from imexctl.base.subproc import Bounded, run_text

        if not re.fullmatch(CRED_RE, cred):
            return None
        res = run_text(self._argv("unmunge", "--numeric", "--keys=STATUS,UID,ENCODE_TIME"),
                       self.timeout_s, _ENV, input=cred.encode())
        if isinstance(res, Bounded):
            raise SealError(f"unmunge: {res.error}")
        if res.returncode in _FORGED:
            return None
        if res.returncode not in _AUTHENTIC:
            raise SealError(f"unmunge -> rc {res.returncode}: "
                            f"{res.stderr.strip()[:200] or 'no answer'}")
        head, sep, payload = res.stdout.partition("\n\n")
        meta = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
        uid = meta.get("UID", "").strip()
        if not sep or not uid.isdigit() or int(uid) not in self.trusted_uids:
            return None
        # --numeric prints the epoch; without it, unmunge ends the date with "(epoch)".
        when = re.search(r"([0-9]{1,12})\)?\s*$", meta.get("ENCODE_TIME", ""))
        return Opened(payload, int(uid), int(when[1]) if when else None)


def trusted_uids(conf: LocalSlurmConf | None) -> frozenset[int]:
    """Who may seal a decision: root and the local slurm.conf's SlurmUser (name or uid;
    Slurm's default is root). A name this host cannot resolve adds nothing."""
    user = (conf.get("SlurmUser") if conf is not None else None) or "root"
    uids = {0}
    if user.isdigit():
        uids.add(int(user))
    else:
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            pass
    return frozenset(uids)


def socket_of(conf: LocalSlurmConf | None) -> str | None:
    """munged's socket from slurm.conf's ``AuthInfo=socket=...`` (what Slurm itself
    uses); None: MUNGE's default."""
    info = (conf.get("AuthInfo") if conf is not None else None) or ""
    for item in info.split(","):
        key, _, value = item.strip().partition("=")
        if key.strip().lower() == "socket" and value.strip():
            return value.strip()
    return None


def cluster_name(ctx: JobContext | None, conf: LocalSlurmConf | None) -> str:
    """The Slurm cluster a decision record is bound to: the hook's SLURM_CLUSTER_NAME
    (slurmctld and slurmd set it from ClusterName), else the local slurm.conf's
    ClusterName; "" when neither says."""
    if ctx is not None and ctx.cluster:
        return ctx.cluster
    value = (conf.get("ClusterName") if conf is not None else None) or ""
    return value.strip()


def seal_for(cfg: Config, conf: LocalSlurmConf | None = None) -> MungeSeal:
    """The seal this host uses: munge/unmunge from ``paths.munge_bin_dir``, the socket
    and SlurmUser of the local slurm.conf (``conf``, else loaded without node lines)."""
    if conf is None:
        from imexctl.slurm import localconf
        try:
            conf = localconf.load(cfg.paths.slurm_conf, nodes=())
        except localconf.LocalConfError:
            conf = None
    return MungeSeal(cfg.paths.munge_bin_dir, socket_of(conf), trusted_uids(conf),
                     float(cfg.slurm.timeout_s))


__all__ = ["MungeSeal", "Opened", "SealError", "seal_for", "cluster_name", "trusted_uids", "socket_of", "CRED_RE"]
