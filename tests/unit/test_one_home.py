"""Each Slurm/IMEX fact has one home (architecture review 2026-11c, section 3.4): the job
directory's file names and the daemon's argv pattern, the decision's action words, the
zero cluster UUID, the boot-id path, the status schema id, the job states, and imex.auth's
modes. Each test reads imexctl/ with ast and fails on a second definition outside the
home, naming the file and line; each first checks that the home defines the fact, so no
rule passes on an empty tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from imexctl import config
from imexctl.config import AuthMode, parse_config
from imexctl.rules import cliques, decision, groups
from imexctl.slurm import states
from imexctl.tray import jobdir

PKG = Path(__file__).resolve().parents[2] / "imexctl"


def modules() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(PKG.parent).as_posix(), ast.parse(p.read_text(), str(p)))
            for p in sorted(PKG.rglob("*.py"))]


def docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (text about a fact is not a definition of it)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def strings(home: str) -> list[tuple[str, int, str]]:
    """(path, line, text) of every string constant outside ``home``, f-string pieces
    included, docstrings left out."""
    found = []
    for path, tree in modules():
        if path == home:
            continue
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in skip):
                found.append((path, node.lineno, node.value))
    return found


def collections(home: str) -> list[tuple[str, int, list[str]]]:
    """(path, line, items) of every tuple, list or set literal of two or more strings."""
    found = []
    for path, tree in modules():
        if path == home:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                found.append((path, node.lineno, [e.value for e in node.elts]))
    return found


def assigned(name: str, home: str) -> list[str]:
    """Where a module-level (or class-level) name ``name`` is bound outside ``home``."""
    found = []
    for path, tree in modules():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            if path != home and any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(f"{path}:{node.lineno}")
    return found


# ------------------------------------------------------------------ the job directory
JOB_FILES = {"CONFIG": "config.cfg", "NODES_CONFIG": "nodes_config.cfg",
             "DAEMON_LOG": "nvidia-imex.log", "STDIO": "daemon.stdio", "FACTS": "imex-job.json"}


def test_a_job_directorys_file_names_are_named_in_tray_jobdir_only():
    assert {k: getattr(jobdir, k) for k in JOB_FILES} == JOB_FILES
    shapes = [re.compile(rf"(^|/){re.escape(name)}$|{re.escape(re.escape(name))}")
              for name in JOB_FILES.values()]
    again = [f"{path}:{line}: {text!r}" for path, line, text in strings("imexctl/tray/jobdir.py")
             if any(shape.search(text) for shape in shapes)]
    assert again == [], "a job directory's file composed outside tray/jobdir.py"


def test_a_job_directorys_name_and_the_daemons_argv_are_made_in_tray_jobdir_only():
    assert jobdir.name(42) == "job-42" and jobdir.is_job_dir("job-42")
    assert not jobdir.is_job_dir("job-042")
    arg = jobdir.config_arg(Path("/run/imexctl"))
    assert arg.fullmatch("/run/imexctl/job-4242/config.cfg").group(1) == "4242"
    assert arg.fullmatch("/run/other/job-4242/config.cfg") is None
    assert jobdir.config_arg().fullmatch("/srv/x/job-7/config.cfg").group(1) == "7"
    assert jobdir.config_arg().fullmatch("/etc/nvidia-imex/config.cfg") is None
    again = [f"{path}:{line}: {text!r}" for path, line, text in strings("imexctl/tray/jobdir.py")
             if text == "job-" or "/job-" in text or re.search(r"job-[\[(]", text)]
    assert again == [], "a job directory's name composed outside tray/jobdir.py"


def test_the_longest_path_below_run_dir_is_what_config_leaves_room_for():
    assert config.MAX_RUN_DIR == config.IMEX_PATH_MAX - len(jobdir.LONGEST)
    assert jobdir.LONGEST == f"/{jobdir.name(2**32 - 3)}/{jobdir.NODES_CONFIG}"


# ------------------------------------------------------------------ rules and tray facts
def test_the_decisions_action_words_are_rules_groups_own():
    assert decision.ACTIONS is groups.ACTIONS
    assert set(groups.ACTIONS) == {"domains", "skip", "refuse", "none", "pending", "wait"}
    again = [f"{path}:{line}" for path, line, items in collections("imexctl/rules/groups.py")
             if set(items) >= set(groups.ACTIONS)]
    assert again + assigned("ACTIONS", "imexctl/rules/groups.py") == []


def test_the_zero_cluster_uuid_is_rules_cliques_own():
    assert cliques.ZERO_UUID == "00000000-0000-0000-0000-000000000000"
    again = [f"{path}:{line}" for path, line, text in strings("imexctl/rules/cliques.py")
             if text == cliques.ZERO_UUID]
    assert again + assigned("ZERO_UUID", "imexctl/rules/cliques.py") == []


def test_the_boot_id_path_is_the_default_of_paths_boot_id_file_only():
    assert config.Paths().boot_id_file == Path("/proc/sys/kernel/random/boot_id")
    again = [f"{path}:{line}" for path, line, text in strings("imexctl/config.py")
             if text.endswith("/kernel/random/boot_id")]
    assert again == []


def test_the_status_schema_id_is_ops_status_own():
    from imexctl.ops import clusterstatus, status

    assert status.SCHEMA == "imexctl.status/1" and clusterstatus.SCHEMA is status.SCHEMA
    again = [f"{path}:{line}" for path, line, text in strings("imexctl/ops/status.py")
             if text.startswith("imexctl.status/")]
    assert again == []


JOB_STATE_WORDS = {"RUNNING", "CONFIGURING", "COMPLETING", "COMPLETED", "SUSPENDED", "PENDING",
                   "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "CANCELLED",
                   "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY"}


def test_sets_of_job_states_are_slurm_states_own():
    assert states.STARTING == {"RUNNING", "CONFIGURING"} and states.STARTING <= states.ACTIVE_JOB
    again = [f"{path}:{line}: {items}" for path, line, items in collections("imexctl/slurm/states.py")
             if set(items) <= JOB_STATE_WORDS]
    assert again == [], "a set of job states outside slurm/states.py"


# ------------------------------------------------------------------ imex.auth
def test_imex_auth_is_parsed_once_into_its_mode_type():
    assert config.CHOICES["imex.auth"] == ("off", "site", "job") == tuple(AuthMode)
    for mode in AuthMode:
        raw = {"imex": {"auth": mode.value}}
        if mode == AuthMode.SITE:
            raw["imex"].update(auth_ca_file="/c", auth_cert_file="/t", auth_key_file="/k")
        assert parse_config(raw, None, "t").imex.auth is mode
    assert parse_config({}, None, "t").imex.auth is AuthMode.OFF
    assert [m.on for m in AuthMode] == [False, True, True]
    # every key only one mode reads is an [imex] key, and no key belongs to two modes
    keys = [k for m in AuthMode for k in m.keys]
    assert len(keys) == len(set(keys)) and set(keys) <= {f.name for f in
                                                         config.fields(config.Imex)}


def test_no_module_compares_imex_auth_with_a_string():
    again = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "auth" for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                again.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    mode_words = {m.value for m in AuthMode}
    again += [f"{path}:{line}: {items}" for path, line, items in collections("imexctl/config.py")
              if set(items) == mode_words]
    assert again == [], "imex.auth compared as a string: compare AuthMode members"


# ------------------------------------------------------------------ imex.lifetime
def test_imex_lifetime_words_have_one_home_and_are_compared_as_members():
    from imexctl.config import Lifetime

    assert tuple(Lifetime) == ("job", "persistent")
    assert re.fullmatch(cliques.LIFETIME_TAG_RE, "persistent") and \
        not re.fullmatch(cliques.LIFETIME_TAG_RE, "job:persistent")
    again = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "lifetime" for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value
                    for s in sides):
                again.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    words = {lifetime.value for lifetime in Lifetime}
    again += [f"{path}:{line}: {items}" for path, line, items in collections("imexctl/config.py")
              if set(items) == words]
    assert again == [], "imex.lifetime compared as a string: compare Lifetime members"
