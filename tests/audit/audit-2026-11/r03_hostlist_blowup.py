# F-03: MAX_HOSTS (1,000,000) is enforced per range part and per bracket product, but not
# across the comma-separated parts of ONE bracket: "tray[0-999999,0-999999,...]" passes every
# check and _range_values() materialises parts x 1e6 strings before any total is checked.
# The node prolog expands SLURM_NODELIST first thing (context.py:134), as root, on every tray.
# Run under a 3 GiB address-space cap so the machine is safe; without the cap the process
# grows until the OOM killer ends it.
import os, resource, subprocess, sys, time
from world import World, VENV

w = World("r03", jobs={4242: {"NodeList": "tray01"}})
for parts in (1, 2, 8, 7000):
    nl = "tray[" + ",".join(["0-999999"] * parts) + "]"
    env = w.env(4242, nodelist=nl)
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    t = time.monotonic()
    p = subprocess.run([str(VENV / "imexctl"), "prolog"], env=env,
                       capture_output=True, text=True, preexec_fn=cap, timeout=600)
    last = p.stderr.strip().splitlines()[-1][:150] if p.stderr.strip() else ""
    print(f"parts={parts:5} len(SLURM_NODELIST)={len(nl):6} rc={p.returncode} "
          f"{time.monotonic()-t:5.1f}s traceback={'Traceback' in p.stderr} | {last}")
# The same expression through the library, measuring the peak without a cap for a small count
import tracemalloc
sys.path.insert(0, __import__("os").environ.get("AUDIT_CHECKOUT", "."))
from imexctl.slurm.hostlist import expand
tracemalloc.start()
try:
    expand("tray[" + ",".join(["0-999999"] * 3) + "]")
except ValueError as e:
    print("library: ValueError after expanding:", str(e)[-40:])
print("library: peak MiB for 3 parts (then refused):", round(tracemalloc.get_traced_memory()[1] / 2**20))
