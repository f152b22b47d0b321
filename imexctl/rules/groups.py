"""One IMEX domain per NVLink clique: group a job's trays and apply the site's policy.

A job's trays are grouped by published clique, keyed by cluster UUID *and* clique ID
(real racks share clique 32766, so the ID alone says nothing). Each group becomes one
IMEX domain whose members are listed in Slurm's node order, so every tray of a group
renders the same ``nodes_config.cfg``. Trays without an NVLink fabric get no group.
Pure functions over data: the controller prolog and the node prolog's fallback both
use them, so both reach the same answer from the same published identities.
"""

from __future__ import annotations


from imexctl.base.dataclass import dataclass
from imexctl.rules.cliques import AUTH_UNREADABLE, TrayIdentity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Config
    from typing import Callable, Mapping, Sequence

PER_CLIQUE = "per-clique"
REFUSE = "refuse"
SKIP = "skip"
POLICIES = (PER_CLIQUE, REFUSE, SKIP)

# What a job gets (also the action word of the decision record).
DOMAINS = "domains"     # one IMEX domain per group
NONE = "none"           # no IMEX tray in the job: nothing to do
PENDING = "pending"     # some trays never published: they publish, the job waits
WAIT = "wait"           # no free channel in a clique (or no usable table): the job waits
ACTIONS = (DOMAINS, SKIP, REFUSE, NONE, PENDING, WAIT)
# Why a heterogeneous job gets no IMEX domain (docs/multi-rack.md, "Heterogeneous jobs").
HET_REFUSAL = ("a heterogeneous job's IMEX domains span its components and only "
               "PrologSlurmctld can decide them: the job is refused where no sealed decision "
               "for it exists")


@dataclass(frozen=True)
class Group:
    """One clique's share of a job: one IMEX domain."""
    cluster_uuid: str
    clique_id: int
    members: tuple[str, ...]    # in the job's (Slurm's) node order

    @property
    def key(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclass(frozen=True)
class Grouping:
    groups: tuple[Group, ...]   # ordered by the position of each group's first member
    non_imex: tuple[str, ...]   # trays that published "no NVLink fabric"
    unpublished: tuple[str, ...]

    def group_of(self, node: str) -> Group | None:
        for group in self.groups:
            if node in group.members:
                return group
        return None


@dataclass(frozen=True)
class Verdict:
    action: str                 # one of ACTIONS
    reason: str = ""            # for refuse / skip / pending: why, naming trays


def group_trays(nodes: Sequence[str], identities: Mapping[str, TrayIdentity | None]
                ) -> Grouping:
    """Group ``nodes`` (the job's node list, in Slurm's order) by published clique."""
    members: dict[tuple[str, int], list[str]] = {}
    non_imex: list[str] = []
    unpublished: list[str] = []
    seen: set[str] = set()
    for node in nodes:
        if node in seen:
            continue
        seen.add(node)
        ident = identities.get(node)
        if ident is None:
            unpublished.append(node)
        elif not ident.imex:
            non_imex.append(node)
        else:
            members.setdefault((ident.cluster_uuid, ident.clique_id), []).append(node)
    groups = tuple(Group(uuid, clique, tuple(names))
                   for (uuid, clique), names in members.items())  # insertion = job order
    return Grouping(groups, tuple(non_imex), tuple(unpublished))


def describe(grouping: Grouping) -> str:
    """``tray[01-04] in <uuid>.1; tray[05-08] in <uuid>.2`` for reasons and logs."""
    from imexctl.slurm.hostlist import compress

    return "; ".join(f"{compress(g.members)} in {g.key}" for g in grouping.groups)


def judge(grouping: Grouping, policy: str) -> Verdict:
    """What the job gets under ``policy`` (per-clique | refuse | skip)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown multi-clique policy {policy!r}; use one of {POLICIES}")
    if grouping.unpublished:
        from imexctl.slurm.hostlist import compress

        return Verdict(PENDING, "no published fabric identity for "
                                f"{compress(grouping.unpublished)}")
    if not grouping.groups:
        return Verdict(NONE, "no IMEX tray in the job")
    if len(grouping.groups) == 1 or policy == PER_CLIQUE:
        return Verdict(DOMAINS)
    spans = f"allocation spans {len(grouping.groups)} NVLink cliques: {describe(grouping)}"
    if policy == REFUSE:
        return Verdict(REFUSE, f"{spans} (policy refuse for this partition)")
    return Verdict(SKIP, f"{spans}; running without IMEX (policy skip)")


@dataclass(frozen=True)
class AuthSplit:
    """One clique of a job whose trays publish different ``imex.auth`` (issue 36): its
    daemons could never authenticate each other. ``odd``: the trays at fault (those that
    cannot read their secret, and those outvoted by a strict majority of the clique's
    trays in the job), empty when no side is a majority; ``reason`` names every side."""
    group: str
    odd: tuple[str, ...]
    majority: str
    tags: tuple[tuple[str, tuple[str, ...]], ...]   # (tag, its trays), largest side first
    reason: str


def auth_splits(grouping: Grouping, identities: Mapping[str, TrayIdentity | None]
                ) -> list[AuthSplit]:
    """The groups whose trays disagree on ``imex.auth`` (mode, or the secret's
    fingerprint). Trays that publish no tag (an older imexctl) are not compared."""
    from imexctl.slurm.hostlist import compress

    out: list[AuthSplit] = []
    for group in grouping.groups:
        sides = _sides(group, identities, lambda ident: ident.auth)
        if len(sides) < 2 and AUTH_UNREADABLE not in sides:
            continue
        ranked = _ranked(sides)
        readable = [(tag, nodes) for tag, nodes in ranked if tag != AUTH_UNREADABLE]
        odd = list(sides.get(AUTH_UNREADABLE, []))
        majority = ""
        if readable and len(readable[0][1]) * 2 > sum(len(n) for _, n in readable):
            majority = readable[0][0]
            odd += [n for tag, nodes in readable[1:] for n in nodes]
        elif len(readable) > 1:
            odd = []        # no side is a majority: who is at fault cannot be told here
        detail = "; ".join(f"{compress(nodes)} {tag}" for tag, nodes in ranked)
        out.append(AuthSplit(group.key, tuple(n for n in group.members if n in odd), majority,
                             tuple((tag, tuple(nodes)) for tag, nodes in ranked),
                             f"imex.auth differs within clique {group.key}: {detail}"))
    return out


def lifetime_splits(grouping: Grouping, identities: Mapping[str, TrayIdentity | None]
                    ) -> list[str]:
    """Why each group whose trays publish different ``imex.lifetime`` (issue 37) cannot be
    one domain: a daemon per job and a daemon per tray cannot serve one job's clique. No
    side is at fault (a clique is switched tray by tray), so nobody is drained. Trays that
    publish none (an older imexctl) are not compared."""
    from imexctl.slurm.hostlist import compress

    out = []
    for group in grouping.groups:
        sides = _sides(group, identities, lambda ident: ident.lifetime)
        if len(sides) > 1:
            detail = "; ".join(f"{compress(nodes)} {tag}" for tag, nodes in _ranked(sides))
            out.append(f"imex.lifetime differs within clique {group.key}: {detail}")
    return out


def _sides(group: Group, identities: Mapping[str, TrayIdentity | None],
           tag: Callable[[TrayIdentity], str]) -> dict[str, list[str]]:
    """The group's trays by the ``tag`` each published; those that publish none left out."""
    sides: dict[str, list[str]] = {}
    for node in group.members:
        ident = identities.get(node)
        value = tag(ident) if ident is not None else ""
        if value:
            sides.setdefault(value, []).append(node)
    return sides


def _ranked(sides: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """``sides`` largest first (ties by tag), as a reason names them."""
    return sorted(sides.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def segments_spanning_cliques(grouping: Grouping, segment_size: int) -> list[str]:
    """For a ``--segment=N`` job: groups whose size is not a multiple of N, i.e. some
    segment was placed across cliques (with one block per clique it cannot be). Returns
    one line per such group, for the job's log and AdminComment note; [] when fine."""
    if not segment_size or segment_size <= 1:
        return []
    return [f"{g.key} holds {len(g.members)} trays, not a multiple of the segment size "
            f"{segment_size}" for g in grouping.groups if len(g.members) % segment_size]


def policy_for(cfg: Config, partition: str | None) -> str:
    """The multi-clique policy of ``partition``: its own setting, else the site default."""
    per_partition = cfg.policy.partition_multi_clique
    if partition and partition in per_partition:
        return per_partition[partition]
    return cfg.policy.multi_clique


# ------------------------------------------------------------------ channel numbers
CHANNEL_COUNT = 2048  # the driver's default NVreg_ImexChannelCount


class ChannelError(Exception):
    pass


@dataclass(frozen=True)
class ChannelChoice:
    number: int
    rule: str


def channel_for_job(job_id: int, count: int = CHANNEL_COUNT) -> ChannelChoice:
    """The one place that picks a job's channel; identical on every tray of the job.

    Rule ``job-id``: 1 + job_id mod (count-1), i.e. 1..count-1: never channel 0, never at
    or above the driver's ImexChannelCount. Jobs whose ids differ by a multiple of count-1
    collide; a cluster-side allocator replaces this rule.
    """
    if count < 2:
        raise ChannelError(f"ImexChannelCount is {count}: no IMEX channel besides channel0 "
                           "can be handed out (load the driver with NVreg_ImexChannelCount "
                           "of 2 or more)")
    return ChannelChoice(number=1 + job_id % (count - 1), rule="job-id")


__all__ = ["Group", "Grouping", "Verdict", "group_trays", "judge", "policy_for",
           "describe", "auth_splits", "AuthSplit", "lifetime_splits", "segments_spanning_cliques", "POLICIES", "PER_CLIQUE", "REFUSE", "SKIP",
           "DOMAINS", "NONE", "PENDING", "WAIT", "HET_REFUSAL",
           "CHANNEL_COUNT", "ChannelChoice", "ChannelError", "channel_for_job"]
