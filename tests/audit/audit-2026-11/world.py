"""Build a relocated imexctl world under a temp dir: config, fake Slurm (the project's own
tests/support/fakeslurm.py state file), fabric file, /proc/devices copy, channel dir.
Usage from a repro:  from world import World; w = World("name", policy="all"); w.run("prolog", env)"""
import json, os, shutil, subprocess, sys, time
from pathlib import Path

# The checkout: AUDIT_CHECKOUT, else the repository this copy lives in (tests/audit/...)
REPO = Path(os.environ.get("AUDIT_CHECKOUT") or Path(__file__).resolve().parents[3])
os.environ.setdefault("AUDIT_CHECKOUT", str(REPO))   # for the scripts that read it
VENV = REPO / ".venv/bin"
sys.path.insert(0, str(REPO))
from tests.support import fakeslurm  # noqa: E402
from tests.support.fabric import simulated_tray, write_fabric_file

UUID = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
PROC_DEVICES = ("Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n\n"
                "Block devices:\n  7 loop\n")
IDENT = {"cluster_uuid": UUID, "clique_id": 1, "gpu_count": 4, "state": "Completed",
         "observed": 1.0}


class World:
    def __init__(self, name, policy="all", nodes=None, jobs=None, extra_cfg="",
                 sim=True, channels_mode="imexctl", switch_type="switch/none", ready_timeout=4):
        self.root = Path(__import__("os").environ.get("AUDIT_WORK", "/tmp/imexctl-audit")) / name
        if self.root.exists():
            for pid in sim_daemons(self.root):  # sim daemons a previous run of this repro started
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        os.chmod(self.root, 0o755)
        (self.root / "proc-devices").write_text(PROC_DEVICES)
        (self.root / "dev/channels").mkdir(parents=True)
        write_fabric_file(self.root / "fabric.json", simulated_tray(UUID, 1))
        nodes = nodes if nodes is not None else {
            "tray01": {"NodeAddr": "127.0.0.1", "Extra": json.dumps({"imex": IDENT})}}
        jobs = exclusive(jobs if jobs is not None else {})
        self.state = self.root / "slurm-state.json"
        fakeslurm.save(self.state, fakeslurm.new_state(nodes, jobs, switch_type))
        fakeslurm.install_bin(self.root / "bin", self.state)
        (self.root / "faults.json").write_text("{}")
        r = self.root
        (r / "imex.env").write_text(f"IMEXCTL_SIM_FAULTS={r}/faults.json\nIMEXCTL_SIM_RUN_DIR={r}/sim-run\n"
                                    "IMEXCTL_SIM_TIME_SCALE=0.01\n")
        imex = (f'imex_binary = "{VENV}/imexctl-sim-imex"\nimex_ctl_binary = "{VENV}/imexctl-sim-imex-ctl"\n'
                if sim else f'imex_binary = "{r}/no-imex"\nimex_ctl_binary = "{r}/no-ctl"\n')
        self.cfg = r / "imexctl.toml"
        self.cfg.write_text(f"""[paths]
state_dir = "{r}/state"
run_dir = "{r}/run"
log_file = "{r}/log/imexctl.log"
channel_dir = "{r}/dev/channels"
proc_devices = "{r}/proc-devices"
slurm_bin_dir = "{r}/bin"
{imex}
[fabric]
source = "file"
file = "{r}/fabric.json"
[imex]
ready_timeout_s = {ready_timeout}
stop_grace_s = 1
environment_file = "{r}/imex.env"
[policy]
mode = "{policy}"
controller = "none"
[channels]
mode = "{channels_mode}"
[slurm]
backend = "cli"
timeout_s = 5
attempts = 1
""" + extra_cfg)

    def slurm(self):
        return fakeslurm.load(self.state)

    def set_slurm(self, st):
        st["jobs"] = exclusive(st.get("jobs", {}))
        fakeslurm.save(self.state, st)

    def env(self, job_id=None, node="tray01", nodelist="tray01", uid="65534", user="nobody",
            **more):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "IMEXCTL_CONFIG": str(self.cfg),
               "SLURMD_NODENAME": node, "SLURM_JOB_OVERSUBSCRIBE": "NO"}
        if job_id is not None:
            env.update({"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid),
                        "SLURM_JOB_USER": user, "SLURM_NODELIST": nodelist})
        env.update({k: v for k, v in more.items() if v is not None})
        return env

    def run(self, *args, env=None, timeout=120, **kw):
        t = time.monotonic()
        p = subprocess.run([str(VENV / "imexctl"), *args], env=env or self.env(),
                           capture_output=True, text=True, timeout=timeout, **kw)
        p.elapsed = time.monotonic() - t
        return p

    def leftovers(self):
        run = self.root / "run"
        st = self.root / "state"
        # run/expected.json (the node's "IMEX expected here" file) stays across jobs: not a leftover
        return {"job_dirs": sorted(set(os.listdir(run)) - {"expected.json"}) if run.exists() else [],
                "channels": sorted(os.listdir(self.root / "dev/channels")),
                "record": (st / "domain.json").exists()}

    def node(self, name="tray01"):
        return self.slurm()["nodes"][name]


def exclusive(jobs):
    """Jobs are node-exclusive unless a script says otherwise: since F3-19 (2026-11-26) a
    prolog refuses an IMEX job that may share its trays, and fakeslurm prints
    OverSubscribe=OK by default (Slurm 23.02-24.11 also set SLURM_JOB_OVERSUBSCRIBE=NO in
    the hook of an --exclusive job: env() does)."""
    for job in jobs.values():
        if isinstance(job, dict):
            job.setdefault("OverSubscribe", "NO")
    return jobs


def show(title, p):
    print(f"--- {title}: rc={p.returncode} ({p.elapsed:.1f}s)")
    out = (p.stdout + p.stderr).strip().splitlines()
    for line in out[-8:]:
        print("   |", line[:220])


def sim_daemons(root):
    import psutil
    out = []
    for p in psutil.process_iter(["cmdline"]):
        c = " ".join(p.info["cmdline"] or [])
        if "imexctl-sim-imex" in c and str(root) in c and "-ctl" not in c:
            out.append(p.pid)
    return out
