# Disk full and read-only filesystems under state_dir and run_dir (tmpfs mounts, root).
# Expected: prolog -> owned node fault with everything undone; epilog -> tears down what it
# can and drains with an owned reason; no traceback, no orphan daemon.
import os, subprocess
from world import World, sim_daemons

def mount(path, opts):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=True)

def umount(path):
    subprocess.run(["umount", "-l", str(path)], check=False)

def fill(path):
    i = 0
    try:
        while True:
            with open(path / f"fill{i}", "wb") as f:
                f.write(b"x" * 4096)
            i += 1
    except OSError:
        pass

def report(tag, w, p):
    last = p.stderr.strip().splitlines()[-1][:100] if p.stderr.strip() else ""
    print(f"{tag:44} rc={p.returncode} tb={'Traceback' in p.stderr} reason={str(w.node()['Reason'])[:70]!r} "
          f"left={w.leftovers()} daemons={len(sim_daemons(w.root))} | {last}")

# 1. state_dir on a full fs at prolog time
w = World("r17-1", jobs={4242: {"NodeList": "tray01"}}, sim=True)
mount(w.root / "state", "size=64k,mode=0755"); fill(w.root / "state")
report("prolog, state_dir full", w, w.run("prolog", env=w.env(4242)))
umount(w.root / "state")

# 2. run_dir full at prolog time
w = World("r17-2", jobs={4242: {"NodeList": "tray01"}}, sim=True)
mount(w.root / "run", "size=64k,mode=0755"); fill(w.root / "run")
report("prolog, run_dir full", w, w.run("prolog", env=w.env(4242)))
umount(w.root / "run")

# 3. state_dir out of inodes at epilog time (lock file absent: first hook after boot)
w = World("r17-3", jobs={4242: {"NodeList": "tray01"}}, sim=True)
mount(w.root / "state", "size=1m,nr_inodes=3,mode=0755")
report("prolog, state_dir 3 inodes", w, w.run("prolog", env=w.env(4242)))
(w.root / "state/lock").unlink(missing_ok=True)   # updated: may not exist
for i in range(5):
    try: open(w.root / f"state/f{i}", "w").close()
    except OSError: break
report("epilog, state_dir out of inodes", w, w.run("epilog", env=w.env(4242)))
for pid in sim_daemons(w.root): os.kill(pid, 9)
umount(w.root / "state")

# 4. state_dir read-only at epilog time (domain up)
w = World("r17-4", jobs={4242: {"NodeList": "tray01"}}, sim=True)
mount(w.root / "state", "size=1m,mode=0755")
report("prolog (rw)", w, w.run("prolog", env=w.env(4242)))
subprocess.run(["mount", "-o", "remount,ro", str(w.root / "state")], check=True)
report("epilog, state_dir read-only", w, w.run("epilog", env=w.env(4242)))
h = w.run("health", "--repair-only", env=w.env()); report("health, state_dir read-only", w, h)
for pid in sim_daemons(w.root):
    print("   orphan daemon", pid, "(killed by repro)"); os.kill(pid, 9)
umount(w.root / "state")
