"""NVLink clique rules: which trays may form one IMEX domain.

Whether a tray's GPUs are fit is ``fabric.judge``'s one rule (prolog, health, status and
metrics use it; unfit is a node fault). Here: a tray's published identity, and a job is
fit when all its trays publish the same clique (a job fault when not).
"""

from __future__ import annotations

import json
import math
import re
import time

from imexctl.base.dataclass import asdict, dataclass
from imexctl.config import Lifetime
from imexctl.slurm.hostlist import compress, natural_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, TypeGuard

    from imexctl.base.jsontypes import Json

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
EXTRA_KEY = "imex"
# A tray with no NVLink fabric (every GPU reports NOT_SUPPORTED, or no GPU) publishes this
# state: it is not an IMEX tray, gets no domain and is never drained for it.
STATE_NOT_SUPPORTED = "NotSupported"
MAX_EXTRA_LEN = 16384  # a node Extra larger than this is not ours to parse
# What a tray publishes of its ``imex.auth`` (issue 36): the mode, and under "job" a
# fingerprint of its secret ("unreadable" when the tray cannot read it). Every tray of one
# clique must publish the same; "" is a tray that publishes none (an older imexctl).
AUTH_TAG_RE = r"off|site|job:(?:[0-9a-f]{16}|unreadable)"
AUTH_UNREADABLE = "job:unreadable"
# What a tray publishes of its ``imex.lifetime`` (issue 37): one of config.Lifetime's values;
# every tray of one clique must publish the same; "" is a tray that publishes none.
LIFETIME_TAG_RE = "|".join(lifetime.value for lifetime in Lifetime)
# What a persistent tray publishes of its ``imex.domain`` (issue 37): the digest
# (imex.render.domain_digest) of the persistent nodes_config.cfg its daemon runs and is
# READY on; "" when it runs none (a job-lifetime tray, a daemon starting or dead). Every
# tray of a persistent clique publishes the same once its domain is whole: the
# maintenance command waits for that (ops/maintain.py).
DOMAIN_TAG_RE = r"[0-9a-f]{16}"
# And its ``imex.maintenance``: the token of the clique's maintenance (the UTC time the
# maintenance command first drained the clique, ``20261128T030000Z``) during which its
# running daemon started; "" when none. The maintenance command knows from it that every
# daemon restarted for this maintenance, also where the digest did not change (a TLS change).
MAINTENANCE_TAG_RE = r"[0-9]{8}T[0-9]{6}Z"
_UUID_RE = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# A clique's key as TrayIdentity.clique spells it: "<cluster uuid>.<clique id>".
CLIQUE_KEY_RE = _UUID_RE + r"\.[0-9]{1,10}"


class TrayUnfit(Exception):
    """This tray's GPUs cannot join a domain (a node fault)."""


@dataclass(frozen=True)
class TrayIdentity:
    cluster_uuid: str
    clique_id: int
    gpu_count: int
    state: str = "Completed"
    observed: float = 0.0
    auth: str = ""
    lifetime: str = ""
    domain: str = ""
    maintenance: str = ""

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"

    @property
    def imex(self) -> bool:
        """An IMEX tray: fabric Completed with a real cluster UUID (not NOT_SUPPORTED)."""
        return self.state == "Completed" and self.cluster_uuid != ZERO_UUID

    @classmethod
    def not_imex(cls, gpu_count: int = 0) -> "TrayIdentity":
        """What a tray without an NVLink fabric publishes."""
        return cls(ZERO_UUID, 0, gpu_count, STATE_NOT_SUPPORTED, round(time.time(), 3))

    def to_extra(self) -> Json:
        return asdict(self)

    @classmethod
    def from_extra(cls, raw: Json) -> "TrayIdentity":
        return cls(cluster_uuid=str(raw["cluster_uuid"]), clique_id=int(raw["clique_id"]),
                   gpu_count=int(raw.get("gpu_count", 0)), state=str(raw.get("state", "")),
                   observed=float(raw.get("observed", 0.0)), auth=_auth_tag(raw.get("auth")),
                   lifetime=_lifetime_tag(raw.get("lifetime")),
                   domain=_tag(DOMAIN_TAG_RE, raw.get("domain")),
                   maintenance=_tag(MAINTENANCE_TAG_RE, raw.get("maintenance")))


def _tag(pattern: str, value: object) -> str:
    """A published tag when it is one imexctl writes (``pattern``), else "" (not published)."""
    return value if isinstance(value, str) and re.fullmatch(pattern, value) else ""


def _auth_tag(value: object) -> str:
    """The published auth tag when it is one imexctl writes, else "" (not published)."""
    return _tag(AUTH_TAG_RE, value)


def _lifetime_tag(value: object) -> str:
    """The published lifetime when it is one imexctl writes, else "" (not published)."""
    return _tag(LIFETIME_TAG_RE, value)


def _is_u32(number: object) -> TypeGuard[int]:
    return isinstance(number, int) and not isinstance(number, bool) and 0 <= number < 2**32


def identity_from_extra(extra: str | None) -> TrayIdentity | None:
    """The identity a tray published in its Slurm ``Extra``; None when absent or unusable.

    ``Extra`` is text anyone with node-update rights (or a broken tool) may have set, so
    every decode or conversion error means "not published" (audit F-08: 100 000-deep
    nesting raises RecursionError, ``1e999`` OverflowError, NaN ValueError).
    """
    if not extra or not isinstance(extra, str) or len(extra) > MAX_EXTRA_LEN:
        return None
    try:
        raw = json.loads(extra)
        entry = raw[EXTRA_KEY] if isinstance(raw, dict) else None
        if not isinstance(entry, dict):
            return None
        uuid, clique, gpus = entry.get("cluster_uuid"), entry.get("clique_id"), \
            entry.get("gpu_count", 0)
        if not isinstance(uuid, str) or not re.fullmatch(_UUID_RE, uuid):
            return None
        if not (_is_u32(clique) and _is_u32(gpus)):
            return None
        observed = entry.get("observed", 0.0)
        if isinstance(observed, bool) or not isinstance(observed, (int, float)) \
                or not math.isfinite(observed):
            observed = 0.0
        state = entry.get("state", "")
        return TrayIdentity(uuid.lower(), clique, gpus, state if isinstance(state, str) else "",
                            float(observed), _auth_tag(entry.get("auth")),
                            _lifetime_tag(entry.get("lifetime")),
                            _tag(DOMAIN_TAG_RE, entry.get("domain")),
                            _tag(MAINTENANCE_TAG_RE, entry.get("maintenance")))
    except Exception:  # noqa: BLE001 - any failure to read it means "not published"
        return None


def persistent_members(tables: Mapping[str, str | None], clique: str) -> list[str]:
    """The members of ``clique``'s persistent domain (issue 37): every node whose published
    identity (``tables``: node name -> its Slurm Extra) is in ``clique`` and publishes
    ``imex.lifetime = "persistent"``, in natural node-name order, so that every tray of
    the clique lists them alike."""
    members = []
    for node, extra in tables.items():
        ident = identity_from_extra(extra)
        if ident is not None and ident.clique == clique \
                and ident.lifetime == Lifetime.PERSISTENT.value:
            members.append(node)
    return sorted(members, key=natural_key)


def domain_digests(published: Mapping[str, TrayIdentity | None], clique: str
                   ) -> dict[str, list[str]]:
    """The digests (``imex.domain``) the persistent trays of ``clique`` publish, each with
    its trays in natural order; a tray publishing none (no daemon READY: starting, dead, or
    a job-lifetime tray) is left out. More than one: the clique's daemons run different
    ``nodes_config.cfg`` and the trays on one side never reach those on the other (a
    membership change not applied everywhere: ``imexctl maintain --membership``)."""
    out: dict[str, list[str]] = {}
    for node, ident in published.items():
        if ident is not None and ident.imex and ident.clique == clique and ident.domain \
                and ident.lifetime == Lifetime.PERSISTENT.value:
            out.setdefault(ident.domain, []).append(node)
    return {d: sorted(ns, key=natural_key) for d, ns in sorted(out.items())}


def domain_split_text(clique: str, digests: Mapping[str, list[str]]) -> str:
    """What the view and doctor say of a clique whose persistent trays publish different
    digests (``domain_digests`` with more than one), the trays on each side named."""
    sides = "; ".join(f"{compress(ns)} digest {d}" for d, ns in digests.items())
    return (f"the persistent domain of clique {clique} is split: {sides} (the trays run "
            f"different nodes_config.cfg and do not reach each other; imexctl maintain "
            f"--membership restarts them on one)")
