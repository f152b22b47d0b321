"""PrologSlurmctld's check that the job's trays of each clique run the same ``imex.auth``
(issue 36, audit F4-6): the tags the trays published (their mode and, under ``"job"``, a
fingerprint of their secret) are compared per clique by ``rules.groups.auth_splits``.

Trays outvoted by a strict majority, or that cannot read their secret, are drained with
``imexctl: prolog-slurmctld/auth: ...`` and the job waits (its node prologs requeue it);
with no majority nobody can be blamed and the job is refused, nothing drained. Health
never lifts this drain: an admin resumes the tray once its secret is the clique's.

The same for ``imex.lifetime`` (issue 37, ``rules.groups.lifetime_splits``): trays of one
clique that publish different lifetimes refuse the job, nothing drained (no side is at
fault while a clique is switched tray by tray).
"""

from __future__ import annotations

from imexctl.base.dataclass import dataclass
from imexctl.rules.cliques import AUTH_UNREADABLE
from imexctl.rules.groups import auth_splits, lifetime_splits
from imexctl.slurm import reasons

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

    from imexctl.base.log import EventLog
    from imexctl.rules.cliques import TrayIdentity
    from imexctl.rules.groups import AuthSplit, Grouping
    from imexctl.slurm.interface import SlurmAdapter

WHY = "auth-mismatch"     # the metrics' reason class of a refusal or a wait for it
LIFETIME_WHY = "lifetime-mismatch"  # the metrics' reason class of a lifetime refusal


@dataclass(frozen=True)
class AuthCheck:
    """What the controller does about the job: ``refusal`` (cancel it with this reason),
    else ``wait`` (the odd trays were drained; the decision is recorded as ``wait`` with
    ``note``), else nothing."""
    refusal: str = ""
    wait: bool = False
    note: str = ""


def check_auth(slurm: SlurmAdapter, grouping: Grouping,
               identities: Mapping[str, TrayIdentity | None], logger: EventLog) -> AuthCheck:
    splits = auth_splits(grouping, identities)
    if not splits:
        return AuthCheck()
    said = "; ".join(s.reason for s in splits)
    if not all(s.odd for s in splits):
        return AuthCheck(refusal=f"{said} (no side is a majority: make imex.auth and its "
                                 "secret the same on every tray)")
    for split in splits:
        _drain_odd(slurm, split, logger)
    return AuthCheck(wait=True, note=f"{said} (the odd trays are drained)")


def lifetime_refusal(grouping: Grouping, identities: Mapping[str, TrayIdentity | None]) -> str:
    """The reason to refuse a job whose trays of one clique publish different
    ``imex.lifetime``; "" when every clique of the job agrees."""
    said = "; ".join(lifetime_splits(grouping, identities))
    return f"{said} (set imex.lifetime alike on every tray of the clique)" if said else ""


def _drain_odd(slurm: SlurmAdapter, split: AuthSplit, logger: EventLog) -> None:
    for node in split.odd:
        tag = next(t for t, nodes in split.tags if node in nodes)
        cause = ("cannot read its imex.auth secret (auth_secret_file)" if tag == AUTH_UNREADABLE
                 else f"imex.auth {tag} differs from clique {split.group}'s {split.majority}")
        try:
            slurm.drain(node, reasons.format("prolog-slurmctld", "auth", cause))
            logger.error("tray drained: imex.auth differs from its clique's", node=node,
                         tray_auth=tag, clique=split.group, clique_auth=split.majority)
        except Exception as exc:  # noqa: BLE001 - the job waits either way
            logger.error("could not drain a tray whose imex.auth differs", node=node,
                         error=str(exc))


__all__ = ["AuthCheck", "LIFETIME_WHY", "WHY", "check_auth", "lifetime_refusal"]
