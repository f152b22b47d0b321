"""The plan vocabulary of health and recover: what a run found, would change and did.

A check or a primitive only looks; what it would change is an :class:`Action` (one line
saying what, and a function that makes it) in a :class:`Recovery`, together with what it
found wrong (``failures``, each ``(step, cause)``). :func:`apply` is the one place the
actions are made; a run that changes nothing (``--dry-run``, ``--no-drain``) lists them
instead.
"""

from __future__ import annotations

from imexctl.base.dataclass import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from imexctl.tray.ownership import DomainRecord

Failure = tuple[str, str]                     # (step, cause)
if TYPE_CHECKING:
    Teardown = Callable[[DomainRecord], list[Failure]]  # record -> failures; the epilog's teardown


@dataclass
class Recovery:
    """What one run found, planned, did and could not do. A check or a primitive fills
    ``actions`` (the changes it would make, each saying what it is) and ``failures``
    (what it found wrong); :func:`apply` makes the actions and adds what they did to
    ``repaired``. ``--dry-run`` lists the actions instead (``would``)."""
    repaired: list[str] = field(default_factory=list)   # one line per thing done
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stale_found: int = 0
    actions: list[Action] = field(default_factory=list)  # planned, not made yet

    def merge(self, other: "Recovery") -> None:
        self.repaired += other.repaired
        self.failures += other.failures
        self.notes += other.notes
        self.stale_found += other.stale_found
        self.actions += other.actions

    @property
    def would(self) -> list[str]:
        return [a.what for a in self.actions]


@dataclass(frozen=True)
class Action:
    """One change a run would make: ``what`` says it in a line (``--dry-run`` prints
    it), ``do`` makes it (re-checking what it depends on) and returns what it did or
    could not do. Plans are lists of these; one place makes them (:func:`apply`)."""
    step: str
    what: str
    do: Callable[[], Recovery]


def apply(plan: Recovery) -> Recovery:
    """Make the planned actions of ``plan``, in order; ``plan`` gains what they did and
    loses them from ``actions``. Returns ``plan``."""
    actions, plan.actions = plan.actions, []
    for action in actions:
        plan.merge(action.do())
    return plan


__all__ = ["Failure", "Recovery", "Action", "apply"]
