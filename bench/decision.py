"""The controller's decision record, version 2 (today's code: sealed, one hostlist group per
clique, up to 120,000 characters) against version 1 (the code at 5d3a1d2: unsealed, capped
at 1,000 characters), for jobs of 18 to 10,008 trays.

The world: a cluster of 10,080 trays (``gb0001``..), 18 per NVL72 clique, each clique its
own cluster UUID, every tray's identity published in its node record (MemorySlurm, the unit
tests' in-memory Slurm). Per job size and code version:

- the record: its size in characters (v1: what it would be with the cap lifted, and
  whether it fits 1,000), and what that version's PrologSlurmctld (``prolog_slurmctld``,
  run for real against MemorySlurm) actually writes to AdminComment;
- encode, decode and find times, medians of N runs (v1 ``encode``, ``decode``,
  ``for_node``; v2 ``encode`` with a real seal, ``decode``, ``find``, which opens the seal);
- the node prolog's slurmctld load per tray, measured by running that version's node
  prolog (``run_prolog`` with the steps after ``allocation`` stubbed) against MemorySlurm
  behind a counting wrapper: job queries, node queries and node records asked for, and the
  node records per job start (x trays). MemorySlurm answers at once, so the prolog's time
  here is imexctl's CPU only, without RPC latency or slurmctld's own work.

v1 runs in a subprocess on ``git archive 5d3a1d2`` (its own imexctl and MemorySlurm). v2 seals
with the unit tests' stand-in ``tests/unit/data/fakemunge`` (a Python script per call) and,
when munge and munged are installed, with the real MUNGE: a private munged with a fresh
key, socket and pid file, stopped at the end (``--munge-socket`` uses a running one). The
seal costs one ``munge`` on the controller per job and one ``unmunge`` on every tray.

``--write host,trixie,sid`` measures instead the record's write through the real backends:
the sealed record (the harness munged's real seal) at 18, 180, 1,800 and 18,000 trays,
written by each backend's ``set_admin_comment`` (``scontrol update``; pyslurm where its
Slurm root has it) to a running job of a one-tray harness cluster, read back by the node
prolog's job query; and what slurmctld itself keeps past one argv string (1 and 4 MiB
through scontrol's stdin). Root, under the harness lock; IMEXCTL_SHARED_DIR for trixie.

Decode bombs (``--decode 1,10,100``, audit F4-4): time and peak RSS of reading 1, 10 and
100 KB of hostile job fields (16 groups of a million names per KB, naming another job) as
the node prolog (``find``), a channel-table rebuild and ``status`` do, today's code against
36ec1cb (groups expanded before anything was checked), each in a process of its own.

Usage: .venv/bin/python bench/decision.py [--trays 18,72,1008,10008] [-n 15]
       [--munge auto|off] [--munge-socket PATH]
       .venv/bin/python bench/decision.py --decode 1,10,100 [--decode-baseline 36ec1cb]
       flock /tmp/imexctl-harness.lock .venv/bin/python bench/decision.py --write host,trixie,sid [-n 15]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
V1_COMMIT = "5d3a1d2"
CLIQUE_TRAYS = 18            # trays per NVL72 clique
CLIQUE_ID = 32766
CLUSTER_NODES = 10_080       # trays defined in the cluster (560 cliques)
DEFAULT_TRAYS = (18, 72, 1008, 10008)
V1_CAP = 1000
MUNGED = ("/usr/sbin/munged", "/usr/bin/munged")
PROLOG_KEEP = ("context", "fabric", "allocation")   # the node prolog's decision steps


def tray(i: int) -> str:
    return f"gb{i:04d}"


def uuid_of(k: int) -> str:
    return f"5b1b3a1e-1c1a-4d0e-9a5e-{k:012d}"


def key_of(k: int) -> str:
    return f"{uuid_of(k)}.{CLIQUE_ID}"


def addr_of(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def job_id_of(trays: int) -> int:
    return 500_000 + trays


def median_ms(fn, runs: int) -> tuple[float, object]:
    """Median wall ms of ``fn()`` over ``runs`` runs, and its last result (or exception)."""
    times, out = [], None
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - v1's encode raises past its cap
            out = exc
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


class Counting:
    """The Slurm adapter behind a counter: every call by method name, and the node records
    asked for (``nodes(names)``: len(names); ``node_table(None)``: the whole table)."""

    QUERIES = ("job", "nodes", "node_table", "live_job_ids", "active_jobs")

    def __init__(self, inner):
        self._inner = inner
        self.calls: dict[str, int] = {}
        self.node_records = 0

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            result = attr(*args, **kwargs)
            if name in ("nodes", "node_table"):
                names = args[0] if args else kwargs.get("names")
                self.node_records += len(result) if names is None else len(names)
            return result
        return call

    def summary(self) -> dict:
        return {"job": self.calls.get("job", 0), "nodes": self.calls.get("nodes", 0)
                + self.calls.get("node_table", 0), "node_records": self.node_records,
                "other": {k: v for k, v in sorted(self.calls.items()) if k not in ("job", "nodes",
                                                                                  "node_table")}}


# ---------------------------------------------------------------------------- the world
def _mod(*names: str):
    """The first of ``names`` that imports: the same function runs over v1's layout
    (5d3a1d2, flat modules) and today's."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            pass
    return importlib.import_module(names[-1])


def build_world(cluster_nodes: int, sizes: list[int]):
    """MemorySlurm with the whole cluster published and one job per size (the imported
    version's MemorySlurm and test helpers: v1's in the subprocess)."""
    fakes = _mod("tests.support.memory_slurm", "tests.unit.fakes")
    published = _mod("tests.support.lifecycle", "tests.unit.test_lifecycle").published

    total = max(cluster_nodes, *sizes)
    slurm = fakes.MemorySlurm() if hasattr(fakes, "MemorySlurm") else fakes.FakeSlurm()
    slurm.add_nodes({tray(i): addr_of(i) for i in range(1, total + 1)})
    for i in range(1, total + 1):
        k = (i - 1) // CLIQUE_TRAYS
        slurm.publish(tray(i), published(CLIQUE_ID, uuid_of(k)))
    for trays in sizes:
        nodes = tuple(tray(i) for i in range(1, trays + 1))
        if hasattr(fakes, "job_record"):
            slurm.jobs[job_id_of(trays)] = fakes.job_record(job_id_of(trays), nodes,
                                                            oversubscribe="NO")
        else:   # v1: the fake's own Job
            job = fakes.Job(job_id_of(trays), nodes)
            job.oversubscribe = "NO"  # the job record's OverSubscribe= where a version reads it
            slurm.jobs[job.job_id] = job
    slurm.calls.clear()
    return slurm


def set_job(slurm, job_id: int, **fields) -> None:
    """Change a job of the in-memory Slurm (today's records are frozen; v1's fake Job not)."""
    if hasattr(slurm, "set_job"):
        slurm.set_job(job_id, **fields)
    else:
        for name, value in fields.items():
            setattr(slurm.jobs[job_id], name, value)


def controller_context(job_id: int):
    """PrologSlurmctld's context without a node list (the job record is asked): today's
    real JobContext, v1's stand-in."""
    lifecycle = _mod("tests.support.lifecycle", "tests.unit.test_lifecycle")
    if hasattr(lifecycle, "controller_ctx"):
        return lifecycle.controller_ctx(job_id)
    return SimpleNamespace(job_id=job_id, restart_count=0)


def the_decision(dec, trays: int):
    """The domains decision of a fresh controller: one group per clique, channel 1 each."""
    nodes = [tray(i) for i in range(1, trays + 1)]
    groups = tuple(dec.GroupDecision(key_of(k), 1,
                                     tuple(nodes[k * CLIQUE_TRAYS:(k + 1) * CLIQUE_TRAYS]))
                   for k in range((trays + CLIQUE_TRAYS - 1) // CLIQUE_TRAYS))
    extra = {"cluster": "unit"} if getattr(dec, "VERSION", 2) >= 3 else {}
    return dec.Decision(job_id=job_id_of(trays), action="domains", channel_mode="imexctl",
                        groups=groups, restart_count=0, nodes_hash=dec.nodes_hash(nodes),
                        **extra)


def run_controller(slurm, trays: int, tmp: Path, munge_dir: str | None = None,
                   socket: str | None = None) -> dict:
    """This version's PrologSlurmctld for the job, as the unit tests run it; what it wrote
    to AdminComment and the queries it made."""
    tc = _mod("tests.support.controller", "tests.unit.test_controller")

    prolog_slurmctld = _mod("imexctl.controller.slurmctld", "imexctl.controller").prolog_slurmctld

    tmp.mkdir(parents=True, exist_ok=True)
    sections = {"paths": {"munge_bin_dir": munge_dir}} if munge_dir else {}
    cfg = tc.make_cfg(tmp, **sections)
    if socket:
        with open(tmp / "slurm.conf", "a") as conf:
            conf.write(f"AuthInfo=socket={socket}\n")
    job_id = job_id_of(trays)
    set_job(slurm, job_id, admin_comment="")
    counting = Counting(slurm)
    stubbed = _stub_table_rebuild()
    try:
        t0 = time.perf_counter()
        prolog_slurmctld(cfg, counting, controller_context(job_id))
        wall = (time.perf_counter() - t0) * 1000
    finally:
        stubbed()
    text = slurm.jobs[job_id].admin_comment
    failed = [json.loads(line).get("error", "") for line in
              Path(cfg.paths.log_file).read_text().splitlines()
              if "failed open" in line] if Path(cfg.paths.log_file).exists() else []
    return {"text": text, "ms": wall, "queries": counting.summary(),
            "failed_open": failed[-1] if failed else "",
            "cancelled": slurm.jobs[job_id].state == "CANCELLED"}


def _stub_table_rebuild():
    """Where the controller rebuilds a missing channel table from every job's record with
    a real ``scontrol`` (around the adapter, so MemorySlurm cannot answer it), it is told
    that no other job holds a channel: a first start. Returns the undo."""
    controller = _mod("imexctl.controller.slurmctld", "imexctl.controller")

    real = getattr(controller, "held_by_live_jobs", None)
    if real is None:
        return lambda: None
    controller.held_by_live_jobs = lambda cfg: {}

    def undo():
        controller.held_by_live_jobs = real
    return undo


def tray_cfg(tmp: Path, node: str, k: int, munge_dir: str | None, socket: str | None):
    """A tray's config (tests/support/lifecycle.py's make_cfg; v1: test_lifecycle's), its
    fabric in clique k and a local slurm.conf that names a PrologSlurmctld (the controller
    decides here)."""
    lifecycle = _mod("tests.support.lifecycle", "tests.unit.test_lifecycle")
    make_cfg, write_slurm_conf = lifecycle.make_cfg, lifecycle.write_slurm_conf

    log = _mod("imexctl.base.log", "imexctl.log")
    fabric = _mod("tests.support.fabric", "imexctl.tray.fabric", "imexctl.fabric")
    simulated_tray, write_fabric_file = fabric.simulated_tray, fabric.write_fabric_file

    tmp.mkdir(parents=True, exist_ok=True)
    extra = "PrologSlurmctld=/usr/local/sbin/imexctl-prolog-slurmctld"
    if socket:
        extra += f"\nAuthInfo=socket={socket}"
    write_slurm_conf(tmp, {node: "10.0.0.1"}, extra=extra)
    sections = {"paths": {"munge_bin_dir": munge_dir}} if munge_dir else {}
    cfg = make_cfg(tmp, **sections)
    write_fabric_file(tmp / "fabric.json", simulated_tray(uuid_of(k), CLIQUE_ID))
    log.setup_logging(cfg.paths.log_file, "info", node, stderr=None)
    return cfg


def prolog_load(slurm, trays: int, tmp: Path, runs: int, munge_dir: str | None = None,
                socket: str | None = None) -> list[dict]:
    """This version's node prolog, up to its decision (context, fabric, allocation; the
    steps after it stubbed), on the job's first and last tray: median wall ms, the Slurm
    queries of one run, and the decision it took."""
    ctx_for = _mod("tests.support.lifecycle", "tests.unit.test_lifecycle").ctx_for

    prolog = _mod("imexctl.lifecycle.prolog", "imexctl.prolog")
    Step = _mod("imexctl.lifecycle.runner", "imexctl.runner").Step
    from imexctl.slurm.hostlist import compress

    nodes = [tray(i) for i in range(1, trays + 1)]
    picks = sorted({0, trays - 1})
    out = []
    real_steps = prolog.PROLOG_STEPS
    for idx in picks:
        node = nodes[idx]
        cfg = tray_cfg(tmp / node, node, idx // CLIQUE_TRAYS, munge_dir, socket)
        ctx = ctx_for(job_id_of(trays), node=node, nodes=compress(nodes), exclusive="1")
        seen: list = []

        def taken(run, seen=seen):
            seen.append(run.decision)

        prolog.PROLOG_STEPS = [s for s in real_steps if s.name in PROLOG_KEEP] + [
            Step("ownership", taken)]
        try:
            counts, times, codes = [], [], []
            job = slurm.jobs[job_id_of(trays)]
            state, comment = job.state, job.admin_comment
            for _ in range(max(runs, 1)):
                # a requeue or refusal undone
                set_job(slurm, job_id_of(trays), state=state, admin_comment=comment)
                counting = Counting(slurm)
                t0 = time.perf_counter()
                codes.append(prolog.run_prolog(cfg, counting, ctx))
                times.append((time.perf_counter() - t0) * 1000)
                counts.append(counting.summary())
        finally:
            prolog.PROLOG_STEPS = real_steps
        nd = seen[-1] if seen else None
        out.append({"node": node, "ms": statistics.median(times), "rc": codes[-1],
                    "queries": counts[-1], "same_every_run": all(c == counts[0] for c in counts),
                    "source": getattr(nd, "source", None),
                    "action": getattr(nd, "action", None),
                    "group": getattr(getattr(nd, "group", None), "key", None),
                    "members": len(getattr(getattr(nd, "group", None), "members", ()) or ()),
                    "channel": getattr(getattr(nd, "group", None), "channel", None)})
    return out


# ---------------------------------------------------------------------------- v2 (today)
def fake_seal():
    from tests.support.memory_slurm import SEAL
    return SEAL


def v2_size(slurm, trays: int, runs: int, seal, seal_name: str, tmp: Path,
            munge_dir: str | None = None, socket: str | None = None) -> dict:
    from imexctl.rules import decision as dec

    decision = the_decision(dec, trays)
    nodes = [tray(i) for i in range(1, trays + 1)]
    body_ms, body = median_ms(lambda: dec.body(decision), runs)
    encode_ms, record = median_ms(lambda: dec.encode(decision, seal), runs)
    if isinstance(record, Exception):
        raise SystemExit(f"v2 encode failed at {trays} trays ({seal_name}): {record!r}")
    decode_ms, decoded = median_ms(lambda: dec.decode(record), runs)
    find_ms, found = median_ms(lambda: dec.find(record, seal, decision.job_id, 0, nodes,
                                                cluster="unit", submit_time=1), runs)
    payload = record.rpartition(";s=")[0]
    cred = record.rpartition(";s=")[2]
    munge_ms, _ = median_ms(lambda: seal.seal(payload), runs)
    unmunge_ms, _ = median_ms(lambda: seal.open(cred), runs)
    ctl = run_controller(slurm, trays, tmp / "ctl", munge_dir, socket)
    notes = []
    written = dec.decode(ctl["text"])
    if written is None or written.groups != decision.groups:
        notes.append(f"PrologSlurmctld wrote {_written(written, ctl)}, not the decision "
                     "measured here: the node prologs read the encoded decision instead")
        slurm.set_job(decision.job_id, admin_comment=record)
    prologs = prolog_load(slurm, trays, tmp / "trays", runs, munge_dir, socket)
    return {"code": "v2", "notes": notes, "seal": seal_name, "trays": trays,
            "cliques": len(decision.groups), "chars": len(record), "body_chars": len(body),
            "fits": len(record) <= dec.MAX_RECORD, "cap": dec.MAX_RECORD,
            "body_ms": body_ms, "encode_ms": encode_ms, "encode_outcome": "ok",
            "decode_ms": decode_ms, "find_ms": find_ms,
            "decoded_groups": len(decoded.groups) if decoded else None,
            "sealed": dec.sealed(record, seal),
            "found": found.decision is not None and not isinstance(found, Exception),
            "munge_ms": munge_ms, "unmunge_ms": unmunge_ms,
            "controller": {k: v for k, v in ctl.items() if k != "text"} | {
                "wrote": _written(dec.decode(ctl["text"]), ctl),
                "written_chars": len(ctl["text"])},
            "prolog": prologs}


def _written(decoded, ctl: dict) -> str:
    if decoded is not None:
        return decoded.action
    if ctl["cancelled"]:
        return "refusal (job cancelled)"
    if ctl["failed_open"]:
        return "nothing (failed open: " + ctl["failed_open"].split(":")[0] + ")"
    return "nothing" if not ctl["text"] else "unreadable"


# ---------------------------------------------------------------------------- v1 (5d3a1d2)
def v1_size(slurm, trays: int, runs: int, tmp: Path) -> dict:
    """Runs inside the v1 subprocess (imexctl of 5d3a1d2 on sys.path)."""
    from imexctl import decision as dec

    decision = the_decision(dec, trays)
    nodes = [tray(i) for i in range(1, trays + 1)]
    encode_ms, got = median_ms(lambda: dec.encode(decision), runs)
    outcome = "ok" if isinstance(got, str) else type(got).__name__
    cap = dec.MAX_RECORD
    dec.MAX_RECORD = 10 ** 9       # what the record would be: the same code, cap lifted
    try:
        full = dec.encode(decision)
        decode_ms, decoded = median_ms(lambda: dec.decode(full), runs)
        find_ms, nd = median_ms(lambda: dec.for_node(full, nodes[0], job_id=decision.job_id,
                                                     job_nodes=nodes, restart_count=0), runs)
    finally:
        dec.MAX_RECORD = cap
    ctl = run_controller(slurm, trays, tmp / "ctl")
    prologs = prolog_load(slurm, trays, tmp / "trays", runs)
    return {"code": "v1", "seal": "none", "notes": [], "trays": trays, "cliques": len(decision.groups),
            "chars": len(full), "fits": len(full) <= cap, "cap": cap,
            "encode_ms": encode_ms, "encode_outcome": outcome,
            "decode_ms": decode_ms, "find_ms": find_ms, "lifted": len(full) > cap,
            "decoded_groups": len(decoded.groups) if decoded else None,
            "controller": {k: v for k, v in ctl.items() if k != "text"} | {
                "wrote": _written(dec.decode(ctl["text"]), ctl),
                "written_chars": len(ctl["text"])},
            "prolog": prologs}


def v1_worker(sizes: list[int], runs: int, cluster_nodes: int) -> None:
    import imexctl

    if not Path(imexctl.__file__).resolve().is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"v1 worker imported {imexctl.__file__}, not {Path.cwd()}")
    slurm = build_world(cluster_nodes, sizes)
    with tempfile.TemporaryDirectory(prefix="imexctl-bench-v1-") as tmp:
        results = [v1_size(slurm, t, runs, Path(tmp) / str(t)) for t in sizes]
    print("BENCH-V1 " + json.dumps(results))


def run_v1(sizes: list[int], runs: int, cluster_nodes: int, commit: str = V1_COMMIT) -> list[dict]:
    """v1's figures: ``git archive <commit>`` into a temporary directory, this script run
    there with PYTHONPATH=<it> (its own imexctl and tests/unit/fakes.py)."""
    with tempfile.TemporaryDirectory(prefix="imexctl-v1-src-") as src:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = src
        res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--v1-worker",
                              "--trays", ",".join(map(str, sizes)), "-n", str(runs),
                              "--cluster-nodes", str(cluster_nodes)],
                             cwd=src, env=env, capture_output=True, text=True)
    line = next((x for x in res.stdout.splitlines() if x.startswith("BENCH-V1 ")), None)
    if res.returncode != 0 or line is None:
        raise SystemExit(f"v1 worker failed (rc {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(line[len("BENCH-V1 "):])


# ---------------------------------------------------------------------------- real MUNGE
class PrivateMunged:
    """munged with a temporary key, socket, pid and log file (as tests/cluster/harness.py
    starts it), stopped by :meth:`stop`."""

    def __init__(self):
        self.dir: Path | None = None
        self.socket: str | None = None
        self.why = ""

    def start(self) -> bool:
        import pwd

        munged = next((p for p in MUNGED if os.access(p, os.X_OK)), None)
        if munged is None:
            self.why = "munged is not installed"
            return False
        self.dir = Path(tempfile.mkdtemp(prefix="imexctl-bench-munge-"))
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.dir.chmod(0o755)      # munged: the socket's directory searchable by all
        prefix: list[str] = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("munge")
                for path in (self.dir, key):
                    os.chown(path, pw.pw_uid, pw.pw_gid)
                prefix = ["runuser", "-u", "munge", "--"]
            except KeyError:
                pass          # no munge user: munged runs as root
        m = self.dir
        argv = prefix + [munged, f"--socket={m}/munge.socket", f"--key-file={key}",
                         f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                         f"--seed-file={m}/munged.seed"]
        res = subprocess.run(argv, capture_output=True, text=True,
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        deadline = time.monotonic() + 10
        while res.returncode == 0 and not (m / "munge.socket").exists() \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        if res.returncode != 0 or not (m / "munge.socket").exists():
            self.why = f"private munged did not start: {(res.stderr or res.stdout).strip()[:200]}"
            self.stop()
            return False
        self.socket = str(m / "munge.socket")
        return True

    def stop(self) -> None:
        if self.dir is None:
            return
        pidfile = self.dir / "munged.pid"
        try:
            pid = int(pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            pid, cmdline = 0, ""
        if pid and f"--socket={self.dir}/munge.socket" in cmdline:   # ours, not a reused pid
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 3
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def real_seal(socket: str | None):
    from imexctl.slurm.munge import MungeSeal
    return MungeSeal("/usr/bin", socket, frozenset({0, os.geteuid()}))


# ---------------------------------------------------------------------------- the write (real Slurm)
WRITE_TRAYS = (18, 180, 1_800, 18_000)
WRITE_STATE = "/tmp/imexctl-bench-write"
# What slurmctld itself keeps, past what one `scontrol update` argument carries: written
# through scontrol's stdin (no argv), read back with `scontrol -o show job`.
STDIN_PROBES = (1 << 20, 4 << 20)


def write_records(sizes: list[int], seal) -> list[dict]:
    """The sealed record of a fresh controller's decision per job size (one group per
    clique), as PrologSlurmctld encodes it; ``refused`` where encode refuses it whole."""
    from imexctl.rules import decision as dec

    out = []
    for trays in sizes:
        try:
            out.append({"trays": trays, "record": dec.encode(the_decision(dec, trays), seal)})
        except dec.DecisionTooLarge as exc:
            out.append({"trays": trays, "record": "", "refused": str(exc)})
    return out


def write_worker(spec_path: str) -> None:
    """Where Slurm's clients are (this host, or a Slurm root's venv): each backend writes
    each record to the job and reads it back with the job query a node prolog makes;
    medians of the write and of the read, and whether the text came back whole. Imports
    imexctl only (a root's venv has its installed package and pyslurm)."""
    from imexctl.config import parse_config

    spec = json.loads(Path(spec_path).read_text())
    records = json.loads(Path(spec["records"]).read_text())
    out = []
    for name, factory in spec["backends"].items():
        mod, _, cls = factory.rpartition(":")
        try:
            if name == "pyslurm":
                importlib.import_module("pyslurm")   # the backend imports it on first use
            backend = getattr(importlib.import_module(mod), cls)(parse_config(spec["config"], None, "tray01"))
        except Exception as exc:  # noqa: BLE001 - pyslurm missing: that backend is not measured
            out.append({"backend": name, "skipped": f"{type(exc).__name__}: {exc}"})
            continue
        for rec in records:
            if not rec["record"]:
                continue
            text, job = rec["record"], spec["job"]
            write_ms, err = median_ms(lambda: backend.set_admin_comment(job, text), spec["runs"])
            read_ms, got = median_ms(lambda: backend.job(job), spec["runs"])
            out.append({"backend": name, "trays": rec["trays"], "chars": len(text),
                        "write_ms": write_ms, "read_ms": read_ms,
                        "error": repr(err) if isinstance(err, Exception) else "",
                        "whole": not isinstance(got, Exception) and got.admin_comment == text
                        and text in got.decision_text})
    print(json.dumps(out))


def write_on(slurm_name: str, sizes: list[int], runs: int) -> dict:
    """A one-tray harness cluster on Slurm ``slurm_name`` (host, trixie, sid; run under
    the harness lock), one running job, its munged's real seal: the records' sizes, each
    backend's write and read back (write_worker, in the Slurm's root where it has one),
    and what slurmctld keeps through scontrol's stdin. The cluster is gone afterwards."""
    from tests.cluster import Cluster

    c = Cluster(WRITE_STATE, 1, net_prefix="imxw", subnet="10.213.93", cluster_name="imxw",
                hooks="record", slurm=slurm_name)
    c.up(timeout=120)
    try:
        job = c.submit(["-N", "1", "--wrap", "sleep 900"])
        c.wait_job_state(job, "RUNNING")
        seal = real_seal(str(c.state_dir / "munge" / "munge.socket"))
        records = write_records(sizes, seal)
        spec_dir = Path(tempfile.mkdtemp(prefix="imexctl-bench-write-", dir="/tmp"))
        try:
            (spec_dir / "records.json").write_text(json.dumps(records))
            spec = {"records": str(spec_dir / "records.json"), "job": job, "runs": runs,
                    "config": {"paths": {"slurm_bin_dir": str(c.slurm_bin)},
                               "slurm": {"timeout_s": 30, "attempts": 1}},
                    "backends": {"cli": "imexctl.slurm.cli_backend:CliBackend",
                                 "pyslurm": "imexctl.slurm.pyslurm_backend:PyslurmBackend"}}
            (spec_dir / "spec.json").write_text(json.dumps(spec))
            python = sys.executable if c.root_path is None else str(c.imexctl_bin.parent / "python")
            argv = [python, str(Path(__file__).resolve()), "--write-worker", str(spec_dir / "spec.json")]
            if c.root_path is not None:
                argv = c.in_root(argv)
            res = subprocess.run(argv, capture_output=True, text=True, env=c.env, cwd="/tmp", timeout=1800)
            if res.returncode:
                raise SystemExit(f"write worker on {slurm_name}: rc {res.returncode}: {res.stderr[-800:]}")
            measured = json.loads(res.stdout.strip().splitlines()[-1])
        finally:
            shutil.rmtree(spec_dir, ignore_errors=True)
        kept = [stdin_probe(c, job, size) for size in STDIN_PROBES]
        return {"slurm": slurm_name, "version": c.scontrol("--version").strip(),
                "records": [{k: v for k, v in r.items() if k != "record"} | {"chars": len(r["record"])}
                            for r in records], "measured": measured, "stdin": kept}
    finally:
        c.cancel_all()
        c.down(purge=True)


def stdin_probe(c, job: int, size: int) -> dict:
    """An AdminComment of ``size`` characters through scontrol's stdin, read back whole?"""
    text = "imexctl-probe-" + "x" * (size - 14)
    argv = [str(c.slurm_bin / "scontrol")]
    if c.root_path is not None:
        argv = c.in_root(argv)
    t0 = time.perf_counter()
    subprocess.run(argv, input=f"update JobId={job} AdminComment={text}\n", env=c.env,
                   capture_output=True, text=True, cwd="/tmp", timeout=120)
    write_ms = (time.perf_counter() - t0) * 1000
    shown = c.scontrol("--local", "-o", "show", "job", str(job))
    return {"chars": size, "write_ms": write_ms, "whole": f" AdminComment={text} " in shown}


def write_table(results: list[dict]) -> str:
    header = ["Slurm", "trays", "cliques", "record chars", "backend", "write ms", "read ms", "read back"]
    body = []
    for r in results:
        sizes = {x["trays"]: x for x in r["records"]}
        for m in r["measured"]:
            if "skipped" in m:
                body.append([r["version"], "", "", "", m["backend"], "not measured", "", m["skipped"][:60]])
                continue
            body.append([r["version"], _n(m["trays"]), _n((m["trays"] + CLIQUE_TRAYS - 1) // CLIQUE_TRAYS),
                         _n(m["chars"]), m["backend"], _ms(m["write_ms"]), _ms(m["read_ms"]),
                         "whole" if m["whole"] else f"NOT WHOLE {m['error']}"[:60]])
        for trays, x in sizes.items():
            if x.get("refused"):
                body.append([r["version"], _n(trays), "", "", "-", "refused", "", x["refused"][:60]])
        for k in r["stdin"]:
            body.append([r["version"], "", "", _n(k["chars"]), "scontrol stdin", _ms(k["write_ms"]), "",
                         "whole" if k["whole"] else "NOT WHOLE"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def write_main(slurms: list[str], sizes: list[int], runs: int) -> int:
    t0 = time.perf_counter()
    print("decision record write: sealed (the harness's munged), written with each backend's "
          "set_admin_comment to a running job of a one-tray harness cluster and read back "
          f"with its job query; medians of {runs} runs")
    print(machine())
    results = [write_on(name, sizes, runs) for name in slurms]
    print()
    print(write_table(results))
    print()
    print("read: the node prolog's one job query (cli: `scontrol --local -o show job`; pyslurm: "
          "Job.load in a forked child); pyslurm writes through the CLI; scontrol stdin: "
          "past one argv string (128 KiB), what slurmctld itself keeps")
    print(f"bench wall {time.perf_counter() - t0:.1f} s; load {os.getloadavg()[0]:.2f}")
    return 0


# ---------------------------------------------------------------------------- report
def _ms(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _n(x: int) -> str:
    return f"{x:,}"


def rows(results: list[dict]) -> list[list[str]]:
    out = []
    for r in results:
        p = r["prolog"][0]
        q = p["queries"]
        star = "*" if r.get("lifted") else ""
        code = "v1 (5d3a1d2)" if r["code"] == "v1" else f"v2, {r['seal']}"
        fits = f"{'yes' if r['fits'] else 'NO'} ({_n(r['cap'])})"
        encode = _ms(r["encode_ms"]) + ("" if r["encode_outcome"] == "ok"
                                        else f" (raises {r['encode_outcome']})")
        wrote = r["controller"]["wrote"]
        if r["controller"]["written_chars"] and not wrote.startswith("nothing"):
            wrote += f", {_n(r['controller']['written_chars'])} ch"
        other = ", ".join(f"{k} {v}" for k, v in q["other"].items())
        out.append([_n(r["trays"]), _n(r["cliques"]), code, _n(r["chars"]) + star, fits, wrote,
                    encode, _ms(r["decode_ms"]) + star, _ms(r["find_ms"]) + star,
                    _ms(p["ms"]), str(q["job"]), str(q["nodes"]) + (f" (+{other})" if other else ""),
                    _n(q["node_records"]), _n(q["node_records"] * r["trays"]),
                    f"{p['source']}/{p['action']}"])
    return out


HEADER = ["trays", "cliques", "code, seal", "record chars", "fits (cap)",
          "PrologSlurmctld wrote", "encode ms", "decode ms", "find ms",
          "node prolog ms", "job q/tray", "node q/tray", "node records/tray",
          "node records/job start", "tray's decision"]


def table(results: list[dict], markdown: bool = False) -> str:
    body = rows(results)
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    width = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(HEADER)]
    fmt = "  ".join(f"{{:<{w}}}" for w in width)
    return "\n".join([fmt.format(*HEADER)] + [fmt.format(*r) for r in body])


def notes(results: list[dict]) -> list[str]:
    lines = []
    for r in results:
        lines += [f"{r['code']} {r['seal']} {r['trays']} trays: {x}" for x in r["notes"]]
        first, *rest = r["prolog"]
        for other in rest:
            if other["queries"] != first["queries"] or other["source"] != first["source"]:
                lines.append(f"{r['code']} {r['seal']} {r['trays']} trays: tray {other['node']} "
                             f"made {other['queries']} ({other['source']}), tray "
                             f"{first['node']} {first['queries']}: not the same per tray")
        if not all(p["same_every_run"] for p in r["prolog"]):
            lines.append(f"{r['code']} {r['seal']} {r['trays']} trays: queries differ "
                         "between runs")
        if any(p["rc"] != 0 for p in r["prolog"]):
            lines.append(f"{r['code']} {r['seal']} {r['trays']} trays: node prolog exit "
                         f"{[p['rc'] for p in r['prolog']]}")
    return lines


def seal_lines(results: list[dict]) -> list[str]:
    out = []
    for seal in dict.fromkeys(r["seal"] for r in results if r["code"] == "v2"):
        mine = [r for r in results if r["seal"] == seal]
        munge = statistics.median(r["munge_ms"] for r in mine)
        unmunge = statistics.median(r["unmunge_ms"] for r in mine)
        out.append(f"seal {seal}: munge {_ms(munge)} ms (once per job, PrologSlurmctld), "
                   f"unmunge {_ms(unmunge)} ms (once per tray, each node prolog); "
                   "medians over the sizes")
    return out


def ratio_lines(results: list[dict]) -> list[str]:
    out = []
    v1 = {r["trays"]: r for r in results if r["code"] == "v1"}
    for seal in dict.fromkeys(r["seal"] for r in results if r["code"] == "v2"):
        parts = []
        for r in results:
            if r["seal"] != seal or r["trays"] not in v1:
                continue
            old = v1[r["trays"]]
            parts.append(f"{_n(r['trays'])}: {old['prolog'][0]['ms'] / r['prolog'][0]['ms']:.2f}x")
        out.append(f"node prolog decision step, v1 / v2 ({seal}): " + ", ".join(parts))
    return out


def controller_lines(results: list[dict]) -> list[str]:
    out = []
    for r in results:
        c = r["controller"]
        q = c["queries"]
        other = ", ".join(f"{k} {v}" for k, v in q["other"].items())
        out.append(f"  {r['code']} {r['seal']:<9} {_n(r['trays']):>6} trays: job {q['job']}, "
                   f"node queries {q['nodes']} ({_n(q['node_records'])} records), {other}; "
                   f"{_ms(c['ms'])} ms")
    return out


def machine() -> str:
    load = Path("/proc/loadavg").read_text().split()[:3]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no",
                            "--", "imexctl"], capture_output=True, text=True).stdout.strip()
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc {os.cpu_count()}, "
            f"{os.uname().machine}, load {' '.join(load)}, v2 = working tree at {head}"
            + (" (imexctl/ has uncommitted changes)" if dirty else ""))


def parse_sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError("sizes are positive tray counts")
    return sizes


# ------------------------------------------------------------- decode bombs (audit F4-4)
DECODE_BASELINE = "36ec1cb"     # the code the audit measured: groups expanded before any check
DECODE_KB = (1, 10, 100)
DECODE_TIMEOUT_S = 60.0         # per measurement: the baseline at 10 KB runs for minutes
DECODE_MEM_LIMIT = 4 << 30      # per measurement (RLIMIT_AS): the baseline at 10 KB needs more


def hostile_fields(kb: int) -> str:
    """``kb`` KB of job-field text as audit F4-4 wrote it: records of 16 groups of a million
    names each (7-digit ranges), naming another job (999), space-separated (each a distinct
    candidate), in version 2's tag, which both the baseline and today's code read."""
    uuid = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
    out, n = [], 0
    while sum(len(x) + 1 for x in out) < kb * 1000:
        groups = ";".join(f"g={uuid}.{n * 16 + i}/{i + 1}/a{n}x{i}[0000000-0999999]"
                          for i in range(16))
        out.append(f"imexctl:v2;{groups};j=999;r=0;h=000000000000;m=imexctl;a=domains")
        n += 1
    text = " ".join(out)
    return text[:text.rfind(" ", 0, kb * 1000 + 1)] if len(out) > 1 else text


def decode_worker(kb: int, consumer: str) -> None:
    """One measurement, in its own process (peak RSS is per process): the imexctl on
    PYTHONPATH reads ``kb`` KB of hostile fields as ``consumer`` does. Prints one line."""
    import resource

    from imexctl.rules import decision as dec
    from tests.support.memory_slurm import SEAL

    text = f"JobId=999 JobName={hostile_fields(kb)} UserId=u(1) WorkDir=/tmp AdminComment="
    nodes = ["gb0001"]
    new = getattr(dec, "VERSION", 2) >= 3
    if consumer == "prolog":        # the node prolog of job 999: decision.find
        if new:
            call = lambda: dec.find(text, SEAL, 999, 0, nodes, cluster="unit", submit_time=1)
        else:
            call = lambda: dec.find(text, SEAL, 999, 0, nodes)
    elif consumer == "rebuild":     # a channel-table rebuild with job 999 among the jobs
        if new:
            call = lambda: dec.find_all([dec.JobText(999, text, "", 1)], SEAL, cluster="unit")
        else:                       # held_by_live_jobs decoded every candidate first
            call = lambda: [dec.decode(r) for r in dec.candidates(text)]
    else:                           # status --nodes/--partition: the AdminComment decoded
        call = lambda: [dec.decode(r) for r in dec.candidates(text)[:1]]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    call()
    ms = (time.perf_counter() - t0) * 1000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("BENCH-DECODE " + json.dumps({"ms": ms, "peak_mb": peak / 1024,
                                        "growth_mb": max(peak - before, 0) / 1024,
                                        "chars": len(text)}))


def _decode_once(src: Path, kb: int, consumer: str, timeout_s: float) -> dict:
    import resource

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(src)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (DECODE_MEM_LIMIT, DECODE_MEM_LIMIT))
    try:
        res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--decode-worker",
                              "--kb", str(kb), "--consumer", consumer], cwd=src, env=env,
                             capture_output=True, text=True, timeout=timeout_s,
                             preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"over": f">{timeout_s:.0f} s (stopped)"}
    line = next((x for x in res.stdout.splitlines() if x.startswith("BENCH-DECODE ")), None)
    if line is None:
        why = "MemoryError" if "MemoryError" in res.stderr else f"rc {res.returncode}"
        return {"over": f">{DECODE_MEM_LIMIT >> 30} GB ({why})" if why == "MemoryError" else why}
    return json.loads(line[len("BENCH-DECODE "):])


def decode_section(kbs: list[int], baseline: str | None = DECODE_BASELINE,
                   timeout_s: float = DECODE_TIMEOUT_S) -> list[dict]:
    """Decode time and peak memory for ``kbs`` KB of hostile job fields, today's code and
    ``baseline`` (``git archive``; None: today only), each measurement in a process of its
    own, bounded by ``timeout_s`` and DECODE_MEM_LIMIT."""
    rows_: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="imexctl-decode-src-") as old:
        sources = [("today", ROOT)]
        if baseline:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
            shutil.copy(Path(__file__).resolve(), Path(old) / "bench" / "decision.py")
            sources.append((baseline, Path(old)))
        for kb in kbs:
            for consumer in ("prolog", "rebuild", "status"):
                for code, src in sources:
                    rows_.append({"kb": kb, "consumer": consumer, "code": code,
                                  **_decode_once(src, kb, consumer, timeout_s)})
    return rows_


def decode_lines(rows_: list[dict]) -> list[str]:
    out = [f"{'fields':>7} {'reader':8} {'code':8} {'time':>12} {'peak RSS':>10} {'grew':>10}"]
    for r in rows_:
        if "over" in r:
            out.append(f"{r['kb']:>5} KB {r['consumer']:8} {r['code']:8} {r['over']:>34}")
        else:
            out.append(f"{r['kb']:>5} KB {r['consumer']:8} {r['code']:8} {_ms(r['ms']):>9} ms "
                       f"{r['peak_mb']:>7.0f} MB {r['growth_mb']:>7.0f} MB")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trays", type=parse_sizes, default=list(DEFAULT_TRAYS),
                    help="job sizes in trays, comma-separated (default 18,72,1008,10008)")
    ap.add_argument("-n", "--runs", type=int, default=15, help="runs per median (default 15)")
    ap.add_argument("--cluster-nodes", type=int, default=CLUSTER_NODES)
    ap.add_argument("--munge", choices=("auto", "off"), default="auto",
                    help="auto: also seal with the real MUNGE (a private munged unless "
                         "--munge-socket names a running one)")
    ap.add_argument("--munge-socket", help="a running munged's socket")
    ap.add_argument("--markdown", action="store_true", help="the table as markdown too")
    ap.add_argument("--v1-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--write", metavar="SLURMS",
                    help="only the record's write through the real backends, on these harness "
                         "Slurms (host,trixie,sid; as root, under the harness lock), at "
                         "--write-trays")
    ap.add_argument("--write-trays", type=parse_sizes, default=list(WRITE_TRAYS),
                    help="job sizes for --write (default 18,180,1800,18000)")
    ap.add_argument("--write-worker", help=argparse.SUPPRESS)
    ap.add_argument("--decode", default=None, metavar="KB,...",
                    help="only the decode-bomb section: hostile job fields of these sizes "
                         f"in KB (e.g. 1,10,100), today's code and {DECODE_BASELINE}")
    ap.add_argument("--decode-baseline", default=DECODE_BASELINE,
                    help="the code to compare with ('' for none)")
    ap.add_argument("--decode-timeout", type=float, default=DECODE_TIMEOUT_S)
    ap.add_argument("--decode-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kb", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--consumer", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.v1_worker:
        v1_worker(args.trays, args.runs, args.cluster_nodes)
        return 0
    if args.write_worker:
        write_worker(args.write_worker)
        return 0
    if args.decode_worker:
        decode_worker(args.kb, args.consumer)
        return 0
    if args.decode:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        print(f"decode bombs (audit F4-4): hostile job fields, 16 groups of 10^6 names per KB, "
              f"naming another job; each measurement its own process, stopped past "
              f"{args.decode_timeout:.0f} s or {DECODE_MEM_LIMIT >> 30} GB")
        print(machine())
        for line in decode_lines(decode_section(parse_sizes(args.decode),
                                                args.decode_baseline or None,
                                                args.decode_timeout)):
            print(line)
        return 0
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if args.write:
        return write_main([x for x in args.write.split(",") if x], args.write_trays, args.runs)

    t0 = time.perf_counter()
    print(f"decision record v1 ({V1_COMMIT}) and v2 (today), {args.runs} runs per median; "
          f"cluster of {_n(max(args.cluster_nodes, *args.trays))} trays, {CLIQUE_TRAYS} per clique")
    print(machine())
    v1 = run_v1(args.trays, args.runs, args.cluster_nodes)
    slurm = build_world(args.cluster_nodes, args.trays)
    seals = [("fakemunge", fake_seal(), None, None)]
    munged = PrivateMunged()
    skipped = ""
    if args.munge == "auto":
        if not (os.access("/usr/bin/munge", os.X_OK) and os.access("/usr/bin/unmunge", os.X_OK)):
            skipped = "real MUNGE not measured: /usr/bin/munge or unmunge missing"
        elif args.munge_socket or munged.start():
            socket = args.munge_socket or munged.socket
            seals.append(("munge", real_seal(socket), "/usr/bin", socket))
            version = subprocess.run(["/usr/bin/munge", "--version"], capture_output=True,
                                     text=True).stdout.split()
            print(f"real MUNGE: {' '.join(version[:1]) or 'munge'}, "
                  + (f"munged at {args.munge_socket}" if args.munge_socket
                     else "a private munged (temporary key and socket, stopped at the end)"))
        else:
            skipped = f"real MUNGE not measured: {munged.why}"
    try:
        results = []
        with tempfile.TemporaryDirectory(prefix="imexctl-bench-v2-") as tmp:
            for trays in args.trays:
                results.append(next(r for r in v1 if r["trays"] == trays))
                for name, seal, munge_dir, socket in seals:
                    results.append(v2_size(slurm, trays, args.runs, seal, name,
                                           Path(tmp) / f"{trays}-{name}", munge_dir, socket))
    finally:
        munged.stop()
    print()
    print(table(results))
    if args.markdown:
        print()
        print(table(results, markdown=True))
    print()
    print("* v1 over its cap: the record it could not write, measured with the same code "
          "and MAX_RECORD raised")
    print("record chars: v2 sealed (its credential included); encode: v2 seals (one munge), "
          "v1 raises past its cap; find: v2 decision.find (one unmunge), v1 "
          "decision.for_node (no seal)")
    print("node prolog: context, fabric, allocation of the real prolog against MemorySlurm "
          "(answers at once: imexctl's CPU, no RPC latency); q = adapter queries, each one "
          "scontrol RPC (node q: `scontrol -o show node <its trays>`)")
    for line in seal_lines(results) + ratio_lines(results):
        print(line)
    if skipped:
        print(skipped)
    print("PrologSlurmctld, once per job:")
    for line in controller_lines(results):
        print(line)
    found = notes(results)
    for line in found:
        print("NOTE: " + line)
    if not found:
        print("node prolog measured on the first and last tray of each job: the same queries "
              "on both, in every run")
    print(f"bench wall {time.perf_counter() - t0:.1f} s; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
