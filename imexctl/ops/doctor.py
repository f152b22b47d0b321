"""``imexctl doctor``: is this node set up the way imexctl needs? Each finding names its fix.

The Slurm checks take the local Slurm configuration as the hooks read it
(:class:`imexctl.slurm.localconf.LocalSlurmConf`, from :func:`read_slurm_conf`), and ask
it what the hooks ask (the prolog's time limit); what a Slurm version adds or renames is
``localconf``'s too (``DEFERBATCH_SINCE``, ``PROLOG_TIMEOUT_SINCE``).
Nothing here talks to slurmctld but the persistent clique's one node-table query (a
warning when it fails): doctor must work on a tray whose controller is down.
Library code returns findings; the CLI prints them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from imexctl.config import AuthMode, Config
from imexctl.base.dataclass import dataclass
from imexctl.base.fsutil import read_bytes
from imexctl.slurm.localconf import (DEFERBATCH_SINCE, PROLOG_TIMEOUT_SINCE, LocalConfError,
                                     LocalSlurmConf, prolog_timeout_key)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Protocol

    from imexctl.base.subproc import Completed

    class Systemctl(Protocol):     # imex.launcher._systemctl's signature
        def __call__(self, *args: str, timeout: float | None = None) -> Completed: ...
    from imexctl.tray.fabric import FabricVerdict
    from imexctl.slurm.interface import SlurmAdapter

OK, WARN, FAIL = "ok", "warn", "fail"
TIMEOUT_MARGIN_S = 30           # steps before wait-ready, Slurm queries, the epilog's stop


@dataclass(frozen=True)
class Finding:
    check: str      # short name, e.g. "prolog-flags"
    level: str      # ok | warn | fail
    message: str
    fix: str = ""


# --------------------------------------------------------------------------- reading
def read_slurm_conf(path: Path | str) -> LocalSlurmConf:
    """The settings of a slurm.conf, read as the hooks read it. LocalConfError when it
    cannot be read."""
    from imexctl.slurm.localconf import load

    return load(path, nodes=())


def slurm_version(bin_dir: Path) -> tuple[int, int] | None:
    """(major, minor) of the installed Slurm, from ``scontrol -V``; None if unknown."""
    from imexctl.base.subproc import Bounded, run_text

    proc = run_text([str(bin_dir / "scontrol"), "-V"], 10, os.environ)
    if isinstance(proc, Bounded):
        return None
    m = re.search(r"(\d+)\.(\d+)", proc.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


# --------------------------------------------------------------------------- Slurm checks
def check_slurm(cfg: Config, conf: LocalSlurmConf,
                version: tuple[int, int] | None) -> list[Finding]:
    """Every check of the local Slurm configuration."""
    out: list[Finding] = []
    shown = conf.get("PrologFlags") or ""
    flags = {f.strip().lower() for f in shown.split(",") if f.strip()}
    shown = shown or "(unset)"
    if "alloc" in flags:
        out.append(Finding("prolog-flags", OK, f"PrologFlags={shown} includes Alloc"))
    else:
        out.append(Finding(
            "prolog-flags", FAIL, f"PrologFlags={shown} lacks Alloc: the prolog runs only "
            "when the first step starts, so a batch job's domain is not up for its script",
            "set PrologFlags=Alloc,DeferBatch in slurm.conf and restart slurmctld and slurmd"))
    if version is None or version >= DEFERBATCH_SINCE:
        if "deferbatch" in flags:
            out.append(Finding("defer-batch", OK, "PrologFlags includes DeferBatch"))
        else:
            out.append(Finding(
                "defer-batch", WARN, "PrologFlags lacks DeferBatch: a batch script starts "
                "when the batch host's prolog ends: before the job's other cliques are UP, "
                "or after that prolog refused the job but before Slurm's kill arrives",
                "add DeferBatch to PrologFlags (PrologFlags=Alloc,DeferBatch)"))
    if "runinjob" in flags and cfg.imex.launcher == "direct":
        out.append(Finding(
            "run-in-job", FAIL, "PrologFlags has RunInJob while imex.launcher = \"direct\": "
            "the daemon the prolog starts lands in the job's cgroup and dies or is "
            "accounted with the job's extern step",
            "remove RunInJob from PrologFlags, or set [imex] launcher = \"systemd\""))
    out += _check_hooks(conf)
    out += _check_timeout(cfg, conf, version)
    return out


def _hook_paths(value: str) -> list[str]:
    return [p for p in (v.strip() for v in value.split(",")) if p]


def _check_hooks(conf: LocalSlurmConf) -> list[Finding]:
    out = []
    wanted = (("prolog", "Prolog", "hooks/prolog", FAIL),
              ("epilog", "Epilog", "hooks/epilog", FAIL),
              ("prologslurmctld", "PrologSlurmctld", "hooks/prolog-slurmctld", WARN),
              ("epilogslurmctld", "EpilogSlurmctld", "hooks/epilog-slurmctld", WARN),
              ("healthcheckprogram", "HealthCheckProgram", "hooks/healthcheck", WARN),
              ("taskprolog", "TaskProlog", "hooks/task-prolog", WARN))
    for key, name, hook, level in wanted:
        paths = _hook_paths(conf.get(key) or "")
        ours = [p for p in paths if _is_imexctl_hook(Path(p))]
        if not ours:
            why = {"prolog": "no tray brings up a domain",
                   "epilog": "no tray tears a domain down",
                   "prologslurmctld": "no controller decision: jobs spanning cliques reach "
                                      "the trays, node prologs use the fallback channel rule",
                   "epilogslurmctld": "channels the controller allocated are released only "
                                      "by reconciliation",
                   "healthcheckprogram": "stale domains and leaked channels are found only "
                                         "by the next prolog",
                   "taskprolog": "the job's tasks are not told their IMEX domain and "
                                 "channel (IMEX_CHANNEL, IMEX_DOMAIN_NODES...)"}[key]
            shown = ",".join(paths) or "(unset)"
            out.append(Finding(f"hook-{key}", level, f"{name}={shown} does not run imexctl: "
                               f"{why}", f"set {name}=<imexctl checkout or share>/{hook}"))
            continue
        for p in ours:
            problem = _unsafe_hook(Path(p))
            if problem:
                out.append(Finding(f"hook-{key}", FAIL, f"{name}={p}: {problem}",
                                   f"chown root:root and chmod go-w {p} and its directories "
                                   "(see docs/install.md)"))
            else:
                out.append(Finding(f"hook-{key}", OK, f"{name}={p}"))
    return out


def _is_imexctl_hook(path: Path) -> bool:
    if "imexctl" in str(path):
        return True
    try:
        return "imexctl" in path.read_text(errors="replace")[:4096]
    except OSError:
        return False


def _unsafe_hook(path: Path) -> str | None:
    """Why root must not run this hook (missing, not executable, others may change it)."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not os.access(path, os.X_OK):
        return "is not executable"
    for p in [path, *path.parents]:
        try:
            st = p.stat()
        except OSError:
            break
        if st.st_uid != 0 and os.geteuid() == 0:
            return f"{p} is owned by uid {st.st_uid}: that account can run code as root"
        if st.st_mode & 0o022 and not (st.st_mode & 0o1000):
            return f"{p} is writable by group or others"
    return None


def _derived_timeout(cfg: Config, conf: LocalSlurmConf,
                     version: tuple[int, int] | None) -> list[Finding]:
    """imex.ready_timeout_s unset: what the prolog derives from the same slurm.conf."""
    from imexctl.imex.ready import default_ready_timeout, effective_ready_timeout

    want = default_ready_timeout(None, None)
    derived = effective_ready_timeout(cfg, conf)
    if derived < want:
        return [Finding("prolog-timeout", WARN, f"imex.ready_timeout_s unset: the prolog "
                        f"timeout leaves {derived:g}s to wait for UP (wanted {want:g}s: "
                        "three of the daemon's reconnect steps)",
                        f"set {prolog_timeout_key(version)}={want + 15:.0f} (or more) in "
                        "slurm.conf")]
    return [Finding("prolog-timeout", OK, f"imex.ready_timeout_s unset: the prolog waits "
                                          f"{derived:g}s for UP (derived from slurm.conf)")]


def _check_timeout(cfg: Config, conf: LocalSlurmConf,
                   version: tuple[int, int] | None) -> list[Finding]:
    if cfg.imex.ready_timeout_s is None:
        return _derived_timeout(cfg, conf, version)
    need = cfg.imex.ready_timeout_s + TIMEOUT_MARGIN_S
    name = conf.prolog_timeout_name
    try:
        value = conf.prolog_timeout_s
    except LocalConfError as exc:
        return [Finding("prolog-timeout", WARN, str(exc), f"set {name} to at least {need:.0f}")]
    if value is None:
        return [Finding("prolog-timeout", OK, f"{name} unset/unlimited: the prolog may wait "
                                              f"{cfg.imex.ready_timeout_s:g}s for READY")]
    if value < need:
        fix_key = prolog_timeout_key(version) if version and version >= PROLOG_TIMEOUT_SINCE \
            else name
        return [Finding(
            "prolog-timeout", FAIL, f"{name}={value}s is not longer than imex.ready_timeout_s "
            f"({cfg.imex.ready_timeout_s:g}s) plus {TIMEOUT_MARGIN_S}s for the other steps: "
            "Slurm kills a slow prolog with SIGTERM and drains with 'Prolog error' instead "
            "of imexctl's reason",
            f"set {fix_key}={need:.0f} (or more) in slurm.conf, or lower [imex] "
            f"ready_timeout_s below {max(1, value - TIMEOUT_MARGIN_S)}")]
    return [Finding("prolog-timeout", OK, f"{name}={value}s > ready timeout "
                                          f"{cfg.imex.ready_timeout_s:g}s + {TIMEOUT_MARGIN_S}s")]


# --------------------------------------------------------------------------- node checks
# The loaded kernel driver's version ("NVRM version: ... Kernel Module  580.105.08 ...").
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def check_node(cfg: Config, nvml_probe: Callable[[], FabricVerdict] | None = None,
               driver_version_file: Path | None = None) -> list[Finding]:
    """State directories, fabric source (NVML answering), IMEX binaries and their version
    against the driver's, channel device. On a tray without NVLink fabric nothing of
    IMEX is needed: what is missing there is reported as such, not as a failure."""
    out = _check_dirs(cfg)
    fabric = _check_fabric(cfg, nvml_probe)
    out.append(fabric)
    imex_tray = not fabric.message.endswith(NOT_IMEX)
    found = []
    for key in ("imex_binary", "imex_ctl_binary"):
        path = getattr(cfg.paths, key)
        if os.access(path, os.X_OK):
            found.append(Finding(key.replace("_", "-"), OK, f"{path} is executable"))
        else:
            found.append(Finding(key.replace("_", "-"), FAIL, f"{path} missing or not executable",
                                 "install the NVIDIA IMEX package (nvidia-imex) matching the "
                                 f"driver, or set paths.{key}"))
    if os.access(cfg.paths.imex_binary, os.X_OK):
        found.append(check_imex_version(cfg.paths.imex_binary,
                                        driver_version_file or DRIVER_VERSION_FILE))
    found.append(_check_channels(cfg))
    if not imex_tray:       # nothing to do here: say what would be missing, exit 0
        found = [f if f.level == OK else Finding(f.check, OK, f"{f.message} (not needed: "
                                                 "not an IMEX tray)") for f in found]
    return out + found


def check_imex_version(binary: Path, driver_version_file: Path) -> Finding:
    """``nvidia-imex --version`` must equal the loaded driver's version: the daemon checks
    it at start and aborts on a mismatch (reference imex.md 1.1)."""
    import re

    from imexctl.base.subproc import Bounded, run_text

    res = run_text([str(binary), "--version"], 5.0, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    if isinstance(res, Bounded) or res.returncode != 0:
        why = (res.error or ("timed out" if res.timed_out else "exit ?")) \
            if isinstance(res, Bounded) else f"exit {res.returncode}"
        return Finding("imex-version", FAIL, f"{binary} --version failed: {why}",
                       "reinstall the nvidia-imex package matching the driver")
    text = res.stdout + res.stderr
    m = re.search(r"IMEX version is:\s*(\S+)", text)
    if not m:
        return Finding("imex-version", WARN, f"{binary} --version printed no version "
                       f"({text.strip()[:80]!r})")
    imex = m.group(1)
    try:
        driver_text = driver_version_file.read_text(errors="replace")
    except OSError:
        return Finding("imex-version", OK, f"nvidia-imex {imex}; no driver loaded "
                       f"({driver_version_file} absent): not compared")
    d = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)", driver_text)
    if not d:
        return Finding("imex-version", WARN, f"nvidia-imex {imex}; the driver's version is "
                       f"not readable in {driver_version_file}")
    if d.group(1) != imex:
        return Finding("imex-version", FAIL, f"nvidia-imex {imex} does not match the loaded "
                       f"driver {d.group(1)}: the daemon aborts at start",
                       f"install nvidia-imex {d.group(1)} (the package of the driver's branch)")
    return Finding("imex-version", OK, f"nvidia-imex {imex} matches the driver")


def _check_dirs(cfg: Config) -> list[Finding]:
    from imexctl.base.fsutil import UnsafePathError, check_secure_dir

    out = []
    for key in ("state_dir", "run_dir", "channel_dir"):
        path = getattr(cfg.paths, key)
        try:
            check_secure_dir(path)
            out.append(Finding(f"dir-{key}", OK, f"{path}: root-owned, not writable by others"))
        except FileNotFoundError:
            out.append(Finding(f"dir-{key}", WARN, f"{path} does not exist yet",
                               "imexctl config systemd --write && systemd-tmpfiles --create "
                               "(or let the first prolog create it)"))
        except (UnsafePathError, OSError) as exc:
            out.append(Finding(f"dir-{key}", FAIL, str(exc),
                               f"chown root:root {path}; chmod 0755 {path} (and never a "
                               "symlink)"))
    return out


NOT_IMEX = ": not an IMEX tray, imexctl makes no domain here (nothing to do)"


def _check_fabric(cfg: Config, probe: Callable[[], FabricVerdict] | None) -> Finding:
    """NVML importable and answering (or the simulator's fabric file readable), judged
    by the same rules as the prolog: ``probe`` returns a :class:`FabricVerdict`."""
    from imexctl.tray.fabric import local_verdict

    name = "nvml" if cfg.fabric.source == "nvml" else "fabric"
    try:
        verdict = (probe or (lambda: local_verdict(cfg)))()
    except Exception as exc:  # an NVML binding failing in a way nobody foresaw
        return Finding(name, FAIL, f"fabric probe failed: {type(exc).__name__}: {exc}",
                       "check the driver with nvidia-smi; report the error")
    if verdict.kind == "imex":
        level = WARN if verdict.degraded else OK
        return Finding(name, level, f"{cfg.fabric.source}: {len(verdict.gpus)} GPU(s), "
                       f"{verdict.detail}", "see nvidia-smi -q (Fabric)" if verdict.degraded
                       else "")
    if verdict.kind == "not_imex":
        return Finding(name, OK, f"{verdict.detail}{NOT_IMEX}")
    fix = ("check the driver (nvidia-smi) and that nvidia-ml-py finds libnvidia-ml.so.1"
           if cfg.fabric.source == "nvml" else "fix fabric.file (simulated trays only)")
    return Finding(name, FAIL, verdict.detail, fix)


def _check_channels(cfg: Config) -> Finding:
    from imexctl.tray.channels import read_major
    from imexctl.rules.groups import ChannelError

    if cfg.channels.mode == "slurm":
        return Finding("imex-channels", OK, "channels.mode = \"slurm\": Slurm creates channels")
    try:
        major = read_major(cfg.paths.proc_devices)
    except (ChannelError, ValueError) as exc:
        return Finding("imex-channels", FAIL, str(exc),
                       "load the NVIDIA driver with NVreg_ImexChannelCount > 0 "
                       "(e.g. options nvidia NVreg_ImexChannelCount=2048 in "
                       "/etc/modprobe.d/nvidia-imex.conf) and reboot")
    return Finding("imex-channels", OK, f"nvidia-caps-imex-channels has major {major}")


PACKAGED_UNIT = "nvidia-imex.service"   # the NVIDIA package's own, global IMEX daemon


def check_packaged_service(systemctl: Systemctl | None = None,
                           booted: Path = Path("/run/systemd/system")) -> Finding:
    """The packaged ``nvidia-imex.service`` must be neither enabled nor running (fidelity
    N6): it is a second owner of IMEX on the tray, and the prolog refuses to start a domain
    beside a daemon it did not start. Asked of systemd through the launcher's bounded
    ``systemctl``; a host not booted with systemd (``booted`` absent, sd_booted's test) or
    without the unit passes."""
    from imexctl.imex import launcher
    name, fix = "packaged-imex-service", f"systemctl mask --now {PACKAGED_UNIT}"
    if not booted.is_dir():
        return Finding(name, OK, f"systemd is not the init system here: {PACKAGED_UNIT} "
                       "cannot run")
    try:
        proc = (systemctl or launcher._systemctl)(
            "show", "--property=LoadState,UnitFileState,ActiveState", PACKAGED_UNIT,
            timeout=10.0)
    except (launcher.SystemctlError, OSError) as exc:
        return Finding(name, WARN, f"cannot ask systemd about {PACKAGED_UNIT}: {exc}",
                       f"check by hand: systemctl status {PACKAGED_UNIT}; then {fix}")
    props = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    load, state, active = (props.get(k, "") for k in ("LoadState", "UnitFileState",
                                                       "ActiveState"))
    if proc.returncode != 0 or not load:
        why = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        return Finding(name, WARN, f"cannot ask systemd about {PACKAGED_UNIT}: {why}",
                       f"check by hand: systemctl status {PACKAGED_UNIT}; then {fix}")
    if load in ("not-found", "masked") or state == "masked":
        if active in ("active", "activating", "reloading"):   # masked while still running
            return Finding(name, FAIL, f"{PACKAGED_UNIT} is masked but still {active}: a "
                           "second IMEX daemon beside imexctl's; prologs here refuse to start "
                           "a domain", fix)
        return Finding(name, OK, f"{PACKAGED_UNIT} is "
                       f"{'not installed' if load == 'not-found' else 'masked'}")
    problems = []
    if state in ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias"):
        problems.append(f"enabled ({state})")
    if active in ("active", "activating", "reloading"):
        problems.append(active)
    if problems:
        return Finding(name, FAIL, f"{PACKAGED_UNIT} is {' and '.join(problems)}: a second "
                       "owner of IMEX on this tray (the package's global daemon beside "
                       "imexctl's per-job ones); prologs refuse to start a domain while it "
                       "runs", fix)
    return Finding(name, WARN, f"{PACKAGED_UNIT} is {state or 'installed'} and "
                   f"{active or 'inactive'}, not masked: a `systemctl start` or a preset could "
                   "start it again", fix)


def check_units(cfg: Config, dropin: Path) -> list[Finding]:
    """With the systemd launcher, the unit drop-in must carry this configuration's paths."""
    if cfg.imex.launcher != "systemd":
        return []
    from imexctl.ops.units import render_dropin

    def settings(text: str) -> list[str]:   # the header names the node and file: not compared
        return [line for line in text.splitlines() if line and not line.startswith("#")]

    want = render_dropin(cfg)
    try:
        have = dropin.read_text()
    except OSError:
        have = None
    if have is not None and settings(have) == settings(want):
        return [Finding("systemd-unit", OK, f"{dropin} matches the configured paths")]
    what = "is missing" if have is None else "does not match the configured paths"
    return [Finding("systemd-unit", FAIL, f"{dropin} {what}: the per-job unit would start "
                    "the wrong binary or find no config",
                    "imexctl config systemd --write && systemctl daemon-reload")]


def check_executable(python: str) -> list[Finding]:
    """Whether the ``imexctl`` beside ``python`` (what the hooks run) skips site."""
    from imexctl.base.executable import is_fast_executable

    exe = Path(python).parent / "imexctl"
    if not exe.is_file():
        return []
    if is_fast_executable(exe):
        return [Finding("executable", OK, f"{exe} starts imexctl without site (python -IS)")]
    return [Finding("executable", WARN, f"{exe} is pip's console script: every hook on "
                    "every tray also pays Python's site machinery", f"{python} -m "
                    "imexctl.cli.executable (again after each pip install)")]


def _slurm_conf(cfg: Config, explicit: str | os.PathLike | None,
                out: list[Finding]) -> LocalSlurmConf | None:
    """The slurm.conf the hooks read: ``explicit``, else ``paths.slurm_conf``, else found
    as slurmd finds it. Appends the ``slurm-conf`` finding; None when unreadable."""
    from imexctl.slurm.localconf import find_slurm_conf

    try:
        path = Path(explicit or cfg.paths.slurm_conf or find_slurm_conf())
    except LocalConfError as exc:
        out.append(Finding("slurm-conf", WARN, f"{exc}; Slurm checks skipped",
                           "pass --slurm-conf FILE"))
        return None
    try:
        conf = read_slurm_conf(path)
    except LocalConfError as exc:
        out.append(Finding("slurm-conf", FAIL, str(exc), "pass --slurm-conf FILE"))
        return None
    out.append(Finding("slurm-conf", OK, f"read {path}"))
    return conf


def check_controller_dir(cfg: Config, conf: LocalSlurmConf) -> Finding:
    """PrologSlurmctld runs as SlurmUser and keeps its channel table in its own directory:
    if it cannot create or trust it, every job's decision says ``pending`` and the trays
    fall back to the job-id channel rule, which is not collision-free."""
    import pwd
    import stat

    from imexctl.controller.slurmctld import table_dir

    name = "controller-dir"
    slurm_switch = conf.slurm_manages_imex_channels
    if cfg.channels.mode == "slurm" or (cfg.channels.mode == "auto" and slurm_switch):
        return Finding(name, OK, "Slurm owns the IMEX channels: PrologSlurmctld keeps no "
                       "channel table")
    user = conf.get("slurmuser") or "root"      # Slurm's default SlurmUser
    directory = table_dir(cfg)
    try:
        uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        return Finding(name, FAIL, f"SlurmUser={user} ({conf.path}) is not a user on this "
                       "host", "create the user, or fix SlurmUser")
    fix = f"install -d -o {user} -m 0755 {directory}"
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        parent = directory.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        pst = os.stat(parent)
        if pst.st_uid == uid and not pst.st_mode & 0o022:
            return Finding(name, OK, f"{directory} does not exist yet; PrologSlurmctld "
                           f"(SlurmUser {user}) creates it in {parent}")
        return Finding(name, FAIL, f"{directory} does not exist and PrologSlurmctld (SlurmUser "
                       f"{user}) cannot create it in {parent} (owned by uid {pst.st_uid}): "
                       "IMEX jobs get no channel and wait (requeued with an imexctl: reason)",
                       fix)
    problem = ("is a symbolic link" if stat.S_ISLNK(st.st_mode) else
               "is not a directory" if not stat.S_ISDIR(st.st_mode) else
               f"is owned by uid {st.st_uid}, not SlurmUser {user} ({uid})" if st.st_uid != uid
               else f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
               if st.st_mode & 0o022 else "")
    if problem:
        return Finding(name, FAIL, f"{directory} {problem}: PrologSlurmctld refuses it, so "
                       "IMEX jobs get no channel and wait (requeued with an imexctl: reason)",
                       f"remove it, then {fix}" if "link" in problem or "not a dir" in problem
                       else f"chown {user} {directory} && chmod 0755 {directory}")
    return Finding(name, OK, f"{directory}: owned by SlurmUser {user}, not writable by others")


def check_seal(cfg: Config) -> Finding:
    """PrologSlurmctld seals its decision with MUNGE and every node prolog opens it: a
    seal made and opened here proves munge, unmunge and munged's socket work."""
    from imexctl.slurm.munge import SealError, seal_for

    seal = seal_for(cfg)
    fix = (f"install munge (munge, unmunge in {cfg.paths.munge_bin_dir}: paths.munge_bin_dir) "
           "and start munged with the cluster's munge.key; the socket is slurm.conf's "
           "AuthInfo=socket=... (else MUNGE's default)")
    try:
        cred = seal.seal("imexctl-doctor")
        opened = seal.open(cred)
    except SealError as exc:
        return Finding("munge-seal", FAIL, f"cannot seal or open a decision: {exc}: every "
                       "IMEX job is refused where PrologSlurmctld decides", fix)
    if opened != "imexctl-doctor":
        return Finding("munge-seal", FAIL, "a credential made here does not open as a trusted "
                       f"uid ({sorted(seal.trusted_uids)}): run doctor as root or SlurmUser",
                       fix)
    return Finding("munge-seal", OK, "munge seals and opens decisions "
                   f"(socket {seal.socket or 'MUNGE default'})")


def check_auth(cfg: Config) -> Finding:
    """imex.auth's files as the next prolog will check them: the site CA, certificate and
    key (unreadable, expired, key mismatch, another CA, modes), or the site secret."""
    if not cfg.imex.auth.on:
        return Finding("auth", OK, "imex.auth = off: the job's daemons do not authenticate "
                       "each other (docs/security.md)")
    from imexctl.ops import authinfo   # cryptography: only with auth on
    faults, warnings = authinfo.problems(cfg, None)
    fix = ("docs/security.md, \"Creating and rotating credentials\"; the prolog drains a tray "
           "whose files fail this check")
    if faults:
        return Finding("auth", FAIL, "; ".join(faults), fix)
    if warnings:
        return Finding("auth", WARN, "; ".join(warnings), fix)
    if cfg.imex.auth == AuthMode.JOB:
        return Finding("auth", OK, f"imex.auth = job: secret {cfg.imex.auth_secret_file} is "
                       "root's, 0600, long enough")
    left = authinfo.expiries(cfg, None)
    days = ", ".join(f"{e.name} {e.seconds_left / authinfo.DAY_S:.0f} days"
                     for e in left if e.seconds_left is not None)
    return Finding("auth", OK, f"imex.auth = site: CA, certificate and key check out ({days} "
                   "left)")


# ------------------------------------------------------------------ persistent trays
GRACE_KEY = "IMEX_NODE_DISCONNECTED_GRACE_TIME"


def check_persistent(cfg: Config, slurm: SlurmAdapter | None = None) -> list[Finding]:
    """``imex.lifetime = "persistent"`` (issue 37): the launcher can start the domain, its
    grace time is finite, its auth mode can serve it, the record and the running daemon
    agree, and the clique's trays publish one lifetime (``slurm`` given: one node-table
    query; None or a failing Slurm: a warning, doctor works with slurmctld down)."""
    out = [_persistent_launcher(cfg), _persistent_grace(cfg), _persistent_auth(cfg),
           _persistent_record(cfg)]
    if slurm is None:
        out.append(Finding("persistent-clique", WARN, "the clique's published lifetimes were "
                           "not read (Slurm not asked)", "imexctl identity show"))
    else:
        out.append(_persistent_clique(cfg, slurm))
    return out


def _persistent_launcher(cfg: Config) -> Finding:
    if cfg.imex.launcher == "direct":
        return Finding("persistent-launcher", OK, "imex.launcher = direct starts the persistent "
                       "domain (imexctl recover, the boot unit)")
    return Finding("persistent-launcher", FAIL, f"imex.launcher = {cfg.imex.launcher!r} cannot "
                   "start a persistent domain: recover fails and every job here is drained at "
                   "prolog/persistent-ready", 'set [imex] launcher = "direct"')


def _persistent_grace(cfg: Config) -> Finding:
    """Finite in the configuration and in the config.cfg the daemon runs: with -1 a tray
    that exported memory to a lost peer keeps it referenced for the daemon's life (NVIDIA
    DRA #1479), and a persistent daemon outlives every job."""
    from imexctl.imex.render import persistent_grace_time
    from imexctl.tray import jobdir

    want = persistent_grace_time(cfg.imex.node_disconnected_grace_time)
    config = jobdir.persistent_path(cfg.paths.run_dir) / jobdir.CONFIG
    try:
        raw = read_bytes(config)      # no symlink, no FIFO: None when absent
    except (OSError, ValueError) as exc:
        return Finding("persistent-grace", WARN, f"cannot read {config}: {exc}",
                       "run doctor as root")
    text = None if raw is None else raw.decode("utf-8", errors="replace")
    running = None if text is None else next(
        (line.split("=", 1)[1].strip() for line in text.splitlines()
         if line.split("=", 1)[0].strip() == GRACE_KEY), "")
    fix = ("set [imex] node_disconnected_grace_time to a finite value (or leave it -1: the "
           "persistent domain then runs with 300 s), then restart the domain (imexctl maintain)")
    if running is not None and running != str(want):
        leak = " (-1: a lost peer's imports are never released, DRA #1479)" \
            if running.strip() == "-1" else ""
        return Finding("persistent-grace", FAIL, f"{config} runs {GRACE_KEY}={running or '?'}"
                       f"{leak}, the configuration gives {want}", fix)
    where = f"; {config} runs it" if running is not None else " (no persistent domain yet)"
    return Finding("persistent-grace", OK, f"{GRACE_KEY}={want} s, finite{where}")


def _persistent_auth(cfg: Config) -> Finding:
    from imexctl.config import PERSISTENT_JOB_AUTH

    if cfg.imex.auth == AuthMode.JOB:   # config check refuses it; a hand-built Config
        return Finding("persistent-auth", FAIL, PERSISTENT_JOB_AUTH,
                       'set [imex] auth = "site" (or lifetime = "job")')
    return Finding("persistent-auth", OK, f"imex.auth = {cfg.imex.auth.value}: isolation "
                   "between the clique's jobs rests on their channels alone (docs/security.md)")


def _persistent_record(cfg: Config) -> Finding:
    """The record (``persistent.json``) and the daemon agree: its pid alive, its boot this
    boot, and the node list on disk the one whose digest it recorded."""
    from imexctl.imex import launcher
    from imexctl.imex.render import Ports, domain_digest
    from imexctl.tray import jobdir
    from imexctl.tray.bootid import current_boot_id
    from imexctl.tray.ownership import RecordUnreadable, StateStore

    fix = "imexctl recover (docs/runbook.md, prolog/persistent-ready)"
    try:
        record = StateStore(cfg.paths.state_dir).load_persistent()
    except RecordUnreadable as exc:
        return Finding("persistent-record", FAIL, str(exc), fix)
    if record is None:
        return Finding("persistent-record", WARN, "no persistent domain is recorded on this "
                       "tray: jobs here are drained at prolog/persistent-ready", fix)
    problems = []
    if record.daemon is None:
        problems.append("the record names no daemon")
    elif not launcher.is_alive(record.daemon):
        problems.append(f"its nvidia-imex pid {record.daemon.pid} is not running")
    boot = current_boot_id(cfg)
    if record.boot_id and boot and record.boot_id != boot:
        problems.append("it was started in an earlier boot")
    nodes_cfg = jobdir.persistent_path(cfg.paths.run_dir) / jobdir.NODES_CONFIG
    try:
        raw = read_bytes(nodes_cfg)
        if raw is None:
            raise FileNotFoundError(2, "No such file or directory")
        digest = domain_digest(raw.decode("utf-8", errors="replace"),
                               Ports(record.server_port, record.cmd_port), None)
    except OSError as exc:
        problems.append(f"{nodes_cfg} unreadable ({exc.strerror or exc})")
    except ValueError as exc:       # larger than any node list
        problems.append(f"{nodes_cfg} unreadable ({exc})")
    else:
        if digest != record.digest:
            problems.append(f"{nodes_cfg} is not the node list the record names (digest "
                            f"{digest}, recorded {record.digest})")
    if problems:
        return Finding("persistent-record", FAIL, "the persistent domain's record and daemon "
                       "disagree: " + "; ".join(problems), fix)
    pid = record.daemon.pid if record.daemon else "-"
    return Finding("persistent-record", OK, f"persistent domain of clique {record.clique}: "
                   f"{len(record.nodes)} members, pid {pid}, digest {record.digest}")


def _persistent_clique(cfg: Config, slurm: SlurmAdapter) -> Finding:
    """Every tray of this tray's clique publishes the persistent lifetime (PrologSlurmctld
    refuses jobs of a clique that disagrees: refused/lifetime-mismatch), and its trays
    whose daemon runs publish one domain digest (``imex.domain``: else the domain is
    split, rules.cliques.domain_digests)."""
    from imexctl.rules.cliques import domain_digests, domain_split_text, identity_from_extra
    from imexctl.slurm.hostlist import compress

    try:
        table = slurm.node_table()
    except Exception as exc:  # noqa: BLE001 - doctor works with slurmctld down
        return Finding("persistent-clique", WARN, f"the clique's published lifetimes were not "
                       f"read: {exc}", "imexctl identity show")
    ids = {n: identity_from_extra(r.extra) for n, r in table.items()}
    mine = ids.get(cfg.node)
    if mine is None or not mine.imex:
        return Finding("persistent-clique", WARN, f"{cfg.node} has published no clique yet",
                       "imexctl identity publish (imexctl recover does at boot)")
    sides: dict[str, list[str]] = {}
    for node, ident in ids.items():
        if ident is not None and ident.imex and ident.clique == mine.clique and ident.lifetime:
            sides.setdefault(ident.lifetime, []).append(node)
    said = "; ".join(f"{compress(sorted(ns))} {lt}" for lt, ns in sorted(sides.items()))
    fix = ("make [imex] lifetime the same on every tray of the clique (imexctl maintain "
           "switches a clique); docs/runbook.md, lifetime-mismatch")
    if len(sides) > 1:
        return Finding("persistent-clique", FAIL, f"imex.lifetime differs within clique "
                       f"{mine.clique}: {said}: its jobs are refused", fix)
    digests = domain_digests(ids, mine.clique)
    if len(digests) > 1:
        return Finding("persistent-clique", FAIL, domain_split_text(mine.clique, digests),
                       "imexctl maintain --node " + cfg.node + " --membership; "
                       "docs/runbook.md, maintain/")
    if mine.lifetime and mine.lifetime != cfg.imex.lifetime.value:
        return Finding("persistent-clique", WARN, f"{cfg.node} publishes lifetime "
                       f"{mine.lifetime}, its configuration says {cfg.imex.lifetime.value}",
                       "imexctl identity publish (health republishes within one run)")
    return Finding("persistent-clique", OK, f"clique {mine.clique} agrees: {said or '-'}")


def run(cfg: Config, slurm_conf: str | os.PathLike | None = None,
        nvml_probe: Callable[[], FabricVerdict] | None = None,
        dropin: Path | None = None, node_checks: bool = True,
        python: str = sys.executable, slurm: SlurmAdapter | None = None) -> list[Finding]:
    """All checks of this node, local files only (but the persistent clique's published
    lifetimes, read through ``slurm`` when given); ``node_checks=False`` on the Slurm
    controller (no GPUs, no IMEX there; its channel table directory instead)."""
    from imexctl.ops.units import DROPIN_PATH

    out: list[Finding] = []
    conf = _slurm_conf(cfg, slurm_conf, out)
    if conf is not None:
        out += check_slurm(cfg, conf, slurm_version(cfg.paths.slurm_bin_dir))
        if not node_checks:
            out.append(check_controller_dir(cfg, conf))
    out += check_executable(python)
    out.append(check_seal(cfg))
    if node_checks:
        out += check_node(cfg, nvml_probe)
        out.append(check_auth(cfg))
        out.append(check_packaged_service())
        out += check_units(cfg, dropin or DROPIN_PATH)
        if cfg.imex.lifetime.value == "persistent":
            out += check_persistent(cfg, slurm)
    return out
