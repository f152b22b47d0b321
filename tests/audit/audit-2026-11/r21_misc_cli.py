# Smaller CLI-level checks: identity show with bad node lists; SLURMD_NODENAME with a trailing
# newline in health/status (config.local_node_name uses re.match with '$'); status with a
# malformed nvidia-imex-ctl answer; health with a 'job-007' / 'job-abc' directory in run_dir.
import json, os
from world import World, VENV, IDENT

w = World("r21", jobs={4242: {"NodeList": "tray01"}}, sim=True)
for arg in ("tray[0-99999999]", "tray[01-", "a b", "tray[" + ",".join(["0-999999"] * 3) + "]"):
    p = w.run("identity", "show", arg, env=w.env())
    print(f"identity show {arg[:30]!r:34} rc={p.returncode} tb={'Traceback' in p.stderr} | "
          f"{(p.stderr.strip().splitlines() or [''])[-1][:100]}")

# trailing newline in SLURMD_NODENAME, config path with {node}
w2 = World("r21-nl", jobs={})
w2.cfg.write_text(w2.cfg.read_text().replace(f'log_file = "{w2.root}/log/imexctl.log"',
                                             f'log_file = "{w2.root}/log/{{node}}.log"'))
for hook in ("health", "status"):
    env = w2.env(); env["SLURMD_NODENAME"] = "tray01\n"
    p = w2.run(hook, *(["--repair-only"] if hook == "health" else []), env=env)
    logs = os.listdir(w2.root / 'log') if (w2.root / 'log').exists() else "none (refused first)"  # updated
    print(f"{hook} with SLURMD_NODENAME='tray01\\n': rc={p.returncode} log files={logs!r} "
          f"| {(p.stdout + p.stderr).strip().splitlines()[0][:100]!r}")

# status with malformed ctl -N -j while a domain is up
p = w.run("prolog", env=w.env(4242))
ctl = w.root / "fake-ctl"
(w.root / "n.out").write_text('{"status": "UP", "nodes": {"0": "READY"}}')
ctl.write_text(f'#!/bin/sh\ncase "$*" in *-q*) echo READY ;; *) cat {w.root}/n.out ;; esac\n'); ctl.chmod(0o755)
good_cfg = w.cfg.read_text()
w.cfg.write_text(good_cfg.replace(f'imex_ctl_binary = "{VENV}/imexctl-sim-imex-ctl"', f'imex_ctl_binary = "{ctl}"'))
p = w.run("status", env=w.env())
print(f"status with -N -j member not an object: rc={p.returncode} tb={'Traceback' in p.stderr} | "
      f"{(p.stderr.strip().splitlines() or [''])[-1][:90]}")
w.cfg.write_text(good_cfg)

# run_dir names that are not job-<ascii digits>
for name in ("job-007", "job-abc", "job-\u0664\u0662"):
    (w.root / "run" / name).mkdir()
(w.root / "run/job-42").mkdir()
p = w.run("health", "--repair-only", env=w.env())
print("health output:", [l for l in p.stdout.splitlines() if "leftover" in l or "OK" in l or "FAIL" in l])
print("run_dir after health:", sorted(os.listdir(w.root / "run")))
w.run("epilog", env=w.env(4242))
