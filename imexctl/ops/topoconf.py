"""Slurm topology for ``topology/block`` from published fabric identities: one block per clique.

With one block per NVLink clique, Slurm's block scheduler (and ``--segment``) keeps a job,
or each segment of it, inside one NVLink partition, and imexctl gives each such share its
own IMEX domain. The rules Slurm enforces are checked here, before Slurm sees the file
(26.05 refuses to start on an invalid one):

* block names are parsed by Slurm's hostlist code when blocks are aggregated, so they are
  letters, digits and ``_`` only (no ``-``, ``.``, ``,`` or brackets) and unique;
* ``BlockSizes``: the first value is the planning base block; every block must hold at
  least that many nodes; each further value is the base times a power of two (at most
  2^15), strictly increasing.

Blocks are ordered by their first node in Slurm's node order (adjacent racks aggregate
into the larger blocks), and members are listed in that order. Pure functions: text in,
text out; ``imexctl topology`` does the I/O.
"""

from __future__ import annotations

import re

from imexctl.base.dataclass import dataclass
from imexctl.rules.cliques import TrayIdentity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Sequence

MAX_LEVEL = 15
_SAFE_NAME = r"[A-Za-z][A-Za-z0-9_]{0,62}"


class TopologyError(ValueError):
    """The topology cannot be written (invalid BlockSizes, a block too small, ...)."""


@dataclass(frozen=True)
class Block:
    name: str
    clique: str                 # "<cluster uuid>.<clique id>"
    nodes: tuple[str, ...]
    # the imex.lifetime its trays publish (issue 37): "job", "persistent", "mixed" when
    # they differ (PrologSlurmctld refuses jobs there), "" when none publishes one
    lifetime: str = ""

    @property
    def comment(self) -> str:
        return self.clique + (f" (imex.lifetime {self.lifetime})" if self.lifetime else "")


@dataclass(frozen=True)
class Topology:
    blocks: tuple[Block, ...]
    block_sizes: tuple[int, ...]
    unpublished: tuple[str, ...] = ()
    non_imex: tuple[str, ...] = ()


def block_name(clique: str, long: bool = False) -> str:
    """``b_<first 8 hex of the cluster UUID>_<clique id>``; the whole UUID when short
    names would collide. Only characters Slurm's hostlist parser keeps as they are."""
    uuid, _, clique_id = clique.rpartition(".")
    hexes = uuid.replace("-", "").lower()
    name = f"b_{hexes if long else hexes[:8]}_{clique_id}"
    if not re.fullmatch(_SAFE_NAME, name):
        raise TopologyError(f"cannot make a safe block name from clique {clique!r}")
    return name


def build(nodes: Sequence[str], identities: Mapping[str, TrayIdentity | None],
          block_sizes: Sequence[int] | None = None) -> Topology:
    """Blocks from identities; ``nodes`` in Slurm's order (slurm.conf order)."""
    from imexctl.rules.groups import group_trays

    grouping = group_trays(nodes, identities)
    keys = [g.key for g in grouping.groups]
    short = [block_name(k) for k in keys]
    long = len(set(short)) != len(short)
    blocks = tuple(Block(block_name(g.key, long), g.key, g.members,
                         _lifetime(identities, g.members)) for g in grouping.groups)
    sizes = tuple(block_sizes) if block_sizes else auto_block_sizes(blocks)
    validate(blocks, sizes)
    return Topology(blocks, sizes, grouping.unpublished, grouping.non_imex)


def _lifetime(identities: Mapping[str, TrayIdentity | None], members: Sequence[str]) -> str:
    published = {ident.lifetime for n in members
                 if (ident := identities.get(n)) is not None and ident.lifetime}
    return "" if not published else published.pop() if len(published) == 1 else "mixed"


def auto_block_sizes(blocks: Sequence[Block]) -> tuple[int, ...]:
    """Base = the smallest block; then doubling while the blocks can fill a level."""
    if not blocks:
        return ()
    base = min(len(b.nodes) for b in blocks)
    levels = 0
    while levels < MAX_LEVEL and 2 ** (levels + 1) <= len(blocks):
        levels += 1
    return tuple(base * 2 ** k for k in range(levels + 1))


def validate(blocks: Sequence[Block], sizes: Sequence[int]) -> None:
    """Raise TopologyError naming what Slurm would refuse."""
    names = [b.name for b in blocks]
    for name in names:
        if not re.fullmatch(_SAFE_NAME, name):
            raise TopologyError(f"block name {name!r} is not safe for Slurm's hostlist parser")
    if len(set(names)) != len(names):
        raise TopologyError("block names are not unique")
    if not blocks:
        return
    if not sizes:
        raise TopologyError("BlockSizes is empty")
    base = sizes[0]
    for prev, size in zip((0, *sizes), sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise TopologyError(f"BlockSizes value {size!r} is not a positive integer")
        ratio, rest = divmod(size, base)
        if rest or ratio & (ratio - 1) or ratio > 2 ** MAX_LEVEL:
            raise TopologyError(f"BlockSizes value {size} is not {base} times a power of two "
                                f"(at most 2^{MAX_LEVEL})")
        if size <= prev:
            raise TopologyError(f"BlockSizes must increase: {size} after {prev}")
    small = [f"{b.name} ({len(b.nodes)})" for b in blocks if len(b.nodes) < base]
    if small:
        raise TopologyError(f"blocks smaller than the base block size {base}: "
                            + ", ".join(small[:8]) + (" ..." if len(small) > 8 else ""))


def _header(topo: Topology) -> list[str]:
    from imexctl.slurm.hostlist import compress

    lines = ["Generated by imexctl topology from published NVLink fabric identities.",
             "One block per NVLink clique (cluster UUID.clique ID). Regenerate; do not edit."]
    if topo.unpublished:
        lines.append(f"Not in any block (no published identity): {compress(topo.unpublished)}")
    if topo.non_imex:
        lines.append(f"Not in any block (no NVLink fabric): {compress(topo.non_imex)}")
    return lines


def render_conf(topo: Topology) -> str:
    """topology.conf text (topology/block)."""
    from imexctl.slurm.hostlist import compress

    out = [f"# {line}" for line in _header(topo)]
    for block in topo.blocks:
        out.append(f"# {block.comment}")
        out.append(f"BlockName={block.name} Nodes={compress(block.nodes)}")
    if topo.block_sizes:
        out.append("BlockSizes=" + ",".join(str(s) for s in topo.block_sizes))
    return "\n".join(out) + "\n"


def render_yaml(topo: Topology, name: str = "nvlink", cluster_default: bool = True) -> str:
    """topology.yaml text (Slurm 25.05+), one block topology."""
    from imexctl.slurm.hostlist import compress

    if not re.fullmatch(_SAFE_NAME, name):
        raise TopologyError(f"topology name {name!r}: use letters, digits and _")
    out = [f"# {line}" for line in _header(topo)]
    out += [f"- topology: {name}", f"  cluster_default: {'true' if cluster_default else 'false'}",
            "  block:", "    block_sizes:"]
    out += [f"      - {s}" for s in topo.block_sizes]
    out.append("    blocks:")
    for block in topo.blocks:
        out += [f"      # {block.comment}", f"      - block: {block.name}",
                f"        nodes: \"{compress(block.nodes)}\""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- --check
@dataclass(frozen=True)
class Drift:
    moved: dict[str, tuple[str, str]]   # node -> (old block, new block); "-" = none
    sizes: tuple[tuple[int, ...], tuple[int, ...]] | None

    @property
    def clean(self) -> bool:
        return not self.moved and self.sizes is None


def parse(text: str) -> tuple[dict[str, tuple[str, ...]], tuple[int, ...]]:
    """Blocks ({name: nodes}) and BlockSizes of a topology.conf or of the block topology
    in a topology.yaml as imexctl writes it; TopologyError on what it cannot read."""
    from imexctl.slurm.hostlist import expand

    blocks: dict[str, tuple[str, ...]] = {}
    sizes: list[int] = []
    current: str | None = None
    in_sizes = False
    try:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            conf = dict((k.lower(), v) for k, v in re.findall(r"(\w+)=(\S+)", line))
            if "blockname" in conf:
                blocks[conf["blockname"]] = tuple(expand(conf.get("nodes", "")))
            elif "blocksizes" in conf:
                sizes = [int(s) for s in conf["blocksizes"].split(",")]
            elif line.startswith("block_sizes:"):
                in_sizes = True
            elif in_sizes and re.fullmatch(r"-\s*\d+", line):
                sizes.append(int(line[1:]))
            elif m := re.fullmatch(r"-\s*block:\s*(\S+)", line):
                in_sizes, current = False, m.group(1).strip("\"'")
                blocks[current] = ()
            elif (m := re.fullmatch(r"nodes:\s*(\S+)", line)) and current:
                blocks[current] = tuple(expand(m.group(1).strip("\"'")))
            else:
                in_sizes = in_sizes and line.startswith("-")
    except ValueError as exc:
        raise TopologyError(f"cannot read the topology in place: {exc}") from None
    return blocks, tuple(sizes)


def check(existing: str, topo: Topology) -> Drift:
    """Compare the file in place with ``topo`` by membership (names may differ): a tray
    moved when the set of trays it shares a block with changed."""
    old_blocks, old_sizes = parse(existing)
    old = _membership(old_blocks)
    new = _membership({b.name: b.nodes for b in topo.blocks})
    moved = {}
    for node in sorted(set(old) | set(new)):
        before, after = old.get(node), new.get(node)
        if (before and before[1]) != (after and after[1]):
            moved[node] = (before[0] if before else "-", after[0] if after else "-")
    sizes = None if tuple(old_sizes) == tuple(topo.block_sizes) else (old_sizes,
                                                                     topo.block_sizes)
    return Drift(moved, sizes)


def _membership(blocks: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, frozenset]]:
    out = {}
    for name, nodes in blocks.items():
        members = frozenset(nodes)
        for node in nodes:
            out[node] = (name, members)
    return out


__all__ = ["Block", "Topology", "TopologyError", "Drift", "build", "render_conf",
           "render_yaml", "check", "parse", "auto_block_sizes", "validate", "block_name"]
