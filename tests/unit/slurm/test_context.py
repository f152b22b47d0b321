"""Hook environment -> JobContext: both node-list variables, every bad value named."""


import pytest

from imexctl.errors import EXIT_USAGE, ImexctlError
from imexctl.slurm.context import ContextError, JobContext, job_context_from_env

# What slurmd gave the Prolog on Slurm 22.05 (slurm-on-one-machine.md), PATH absent.
NODE_ENV_2205 = {
    "SLURM_JOB_ID": "4", "SLURM_JOBID": "4", "SLURM_NODELIST": "tray[01-02]",
    "SLURMD_NODENAME": "tray01", "SLURM_JOB_UID": "65534", "SLURM_JOB_GID": "65534",
    "SLURM_JOB_USER": "nobody", "SLURM_UID": "65534", "SLURM_JOB_PARTITION": "trays",
    "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_RESTART_COUNT": "0",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
}
# What slurmctld gave PrologSlurmctld: SLURM_JOB_NODELIST, no SLURMD_NODENAME.
CTLD_ENV = {
    "SLURM_JOB_ID": "4", "SLURM_JOB_NODELIST": "tray[01-02]", "SLURM_JOB_UID": "65534",
    "SLURM_JOB_GID": "65534", "SLURM_JOB_USER": "nobody", "SLURM_JOB_PARTITION": "trays",
    "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_GROUP": "nogroup",
}


def test_node_hook_2205_env():
    ctx = job_context_from_env(NODE_ENV_2205, hook="node")
    assert ctx == JobContext(job_id=4, uid=65534, user="nobody", node="tray01",
                             nodelist_expr="tray[01-02]", gid=65534, partition="trays",
                             hook="node", restart_count=0, script_context="prolog_slurmd")
    assert ctx.nodes == ["tray01", "tray02"]


def test_node_hook_newer_env_uses_job_nodelist():
    env = {k: v for k, v in NODE_ENV_2205.items() if k != "SLURM_NODELIST"}
    env["SLURM_JOB_NODELIST"] = "tray[01-03]"
    ctx = job_context_from_env(env, hook="node")
    assert ctx.nodelist_expr == "tray[01-03]"
    assert ctx.nodes == ["tray01", "tray02", "tray03"]


def test_job_nodelist_wins_when_both_present():
    env = {**NODE_ENV_2205, "SLURM_JOB_NODELIST": "tray[01-04]"}
    assert job_context_from_env(env).nodelist_expr == "tray[01-04]"


def test_controller_hook():
    ctx = job_context_from_env(CTLD_ENV, hook="controller")
    assert ctx.node == "" and ctx.hook == "controller"
    assert ctx.nodes == ["tray01", "tray02"]


def test_controller_hook_accepts_slurm_nodelist_too():
    env = {k: v for k, v in CTLD_ENV.items() if k != "SLURM_JOB_NODELIST"}
    env["SLURM_NODELIST"] = "tray05"
    assert job_context_from_env(env, hook="controller").nodes == ["tray05"]


def test_controller_ignores_slurmd_nodename():
    env = {**CTLD_ENV, "SLURMD_NODENAME": "tray09"}
    assert job_context_from_env(env, hook="controller").node == ""


def test_optional_fields_absent():
    env = {"SLURM_JOB_ID": "12", "SLURM_NODELIST": "tray1", "SLURMD_NODENAME": "tray1",
           "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root"}
    ctx = job_context_from_env(env)
    assert (ctx.gid, ctx.partition, ctx.restart_count, ctx.script_context) == (None, None, 0, None)
    assert ctx.uid == 0


def test_old_jobid_variable_is_accepted():
    env = {k: v for k, v in NODE_ENV_2205.items() if k != "SLURM_JOB_ID"}
    assert job_context_from_env(env).job_id == 4


def test_frozen():
    ctx = job_context_from_env(NODE_ENV_2205)
    with pytest.raises(AttributeError):
        ctx.job_id = 5  # type: ignore[misc]


@pytest.mark.parametrize("var", ["SLURM_JOB_UID", "SLURM_JOB_USER", "SLURMD_NODENAME"])
def test_missing_required_node(var):
    env = {k: v for k, v in NODE_ENV_2205.items() if k != var}
    with pytest.raises(ContextError) as exc:
        job_context_from_env(env, hook="node")
    assert exc.value.var == var
    assert var in str(exc.value) and "unset" in str(exc.value)


def test_missing_job_id():
    env = {k: v for k, v in NODE_ENV_2205.items() if k not in ("SLURM_JOB_ID", "SLURM_JOBID")}
    with pytest.raises(ContextError, match="SLURM_JOB_ID"):
        job_context_from_env(env)


@pytest.mark.parametrize("hook, env", [("node", NODE_ENV_2205), ("controller", CTLD_ENV)])
def test_missing_nodelist(hook, env):
    env = {k: v for k, v in env.items() if k not in ("SLURM_NODELIST", "SLURM_JOB_NODELIST")}
    with pytest.raises(ContextError, match="SLURM_JOB_NODELIST.*SLURM_NODELIST"):
        job_context_from_env(env, hook=hook)


@pytest.mark.parametrize("hook, env", [("node", NODE_ENV_2205), ("controller", CTLD_ENV)])
def test_epilogs_do_without_a_node_list(hook, env):
    """Slurm 22.05 ran the Epilog of a job killed during its prologs with no node list
    (seen on the 72-tray harness): the epilogs need only the job id and the tray."""
    env = {k: v for k, v in env.items() if k not in ("SLURM_NODELIST", "SLURM_JOB_NODELIST")}
    ctx = job_context_from_env(env, hook=hook, need_nodelist=False)
    assert (ctx.job_id, ctx.nodelist_expr, ctx.nodes) == (4, "", [])
    assert ctx.node == ("tray01" if hook == "node" else "")


@pytest.mark.parametrize("var, value, why", [
    ("SLURM_NODELIST", "tray[01-", "not a valid node list"),
    ("SLURM_NODELIST", "tray02", "not in the job's node list"),
    ("SLURM_NODELIST", "tray01,tr;ay", "invalid characters"),
])
def test_a_node_list_given_to_an_epilog_is_still_checked(var, value, why):
    with pytest.raises(ContextError, match=why):
        job_context_from_env({**NODE_ENV_2205, var: value}, hook="node", need_nodelist=False)


@pytest.mark.parametrize("var, value, why", [
    ("SLURM_JOB_ID", "abc", "not a valid job id"),
    ("SLURM_JOB_ID", "0", "out of range"),
    ("SLURM_JOB_ID", "-4", "not a valid job id"),
    ("SLURM_JOB_ID", "4294967295", "out of range"),
    ("SLURM_JOB_ID", "12345678901", "not a valid job id"),
    ("SLURM_JOB_ID", "4;reboot", "not a valid job id"),
    ("SLURM_JOB_ID", " 4", "not a valid job id"),
    ("SLURM_JOB_UID", "x", "not a valid uid"),
    ("SLURM_JOB_UID", "4294967295", "out of range"),
    ("SLURM_JOB_GID", "1.5", "not a valid gid"),
    ("SLURM_JOB_USER", "../root", "not a valid user name"),
    ("SLURM_JOB_USER", "jdoe\nSLURM_JOB_UID=0", "not a valid user name"),
    ("SLURMD_NODENAME", "tray01;id", "not a valid node name"),
    ("SLURMD_NODENAME", "-tray01", "not a valid node name"),
    ("SLURMD_NODENAME", "tray09", "not in the job's node list"),
    ("SLURM_NODELIST", "tray[01-", "not a valid node list"),
    ("SLURM_NODELIST", "tray01 tray02", "not a valid node list"),
    ("SLURM_NODELIST", "tray01,$(id)", "not a valid node list"),
    ("SLURM_NODELIST", "x" * 70, "node name"),
    ("SLURM_JOB_PARTITION", "a b", "not a valid partition"),
    ("SLURM_JOB_RESTART_COUNT", "many", "not a valid restart count"),
    ("SLURM_SCRIPT_CONTEXT", "Prolog;x", "not a valid script context"),
])
def test_bad_values_name_var_and_value(var, value, why):
    env = {**NODE_ENV_2205, var: value}
    with pytest.raises(ContextError) as exc:
        job_context_from_env(env, hook="node")
    err = exc.value
    assert err.var == var and err.value == value
    assert why in str(err)
    assert var in str(err) and repr(value)[:40] in str(err)


def test_bad_job_nodelist_in_controller():
    env = {**CTLD_ENV, "SLURM_JOB_NODELIST": "tray[2-1]"}
    with pytest.raises(ContextError, match="SLURM_JOB_NODELIST.*backwards"):
        job_context_from_env(env, hook="controller")


DIRECTORY_NAMES = ["CORP\\jdoe", "müller", "john smith", "j" * 65, ".hidden",
                   "jdoe@corp.example.com", "-rf", "machine$", "u" * 1024]


@pytest.mark.parametrize("name", DIRECTORY_NAMES)
@pytest.mark.parametrize("hook,nodelist", [("node", True), ("node", False),
                                           ("controller", True), ("controller", False)])
def test_directory_service_user_names_are_accepted(name, hook, nodelist):
    """Audit F3-4: names winbind, sssd or LDAP give (a domain prefix with a backslash,
    non-ASCII letters, a space, more than 64 characters) made every prolog and epilog of
    the user's jobs exit 2, draining the trays. Slurm vouches for the name; the uid
    decides."""
    env = {**(NODE_ENV_2205 if hook == "node" else CTLD_ENV), "SLURM_JOB_USER": name}
    ctx = job_context_from_env(env, hook=hook, need_nodelist=nodelist)
    assert ctx.user == name and ctx.uid == int(env["SLURM_JOB_UID"])


@pytest.mark.parametrize("name", ["../root", "a/b", "x\ny", "tab\there", "u" * 1025, None])
def test_the_epilogs_never_fail_on_a_user_name(name):
    """An epilog only cleans up: a name it could not use is "" (and a missing one too),
    never exit 2 (which drains the tray). The prolog still refuses it."""
    env = {k: v for k, v in NODE_ENV_2205.items() if k != "SLURM_JOB_USER"}
    if name is not None:
        env["SLURM_JOB_USER"] = name
    ctx = job_context_from_env(env, hook="node", need_nodelist=False)
    assert ctx.user == "" and ctx.job_id == int(env["SLURM_JOB_ID"])
    ctld = job_context_from_env({**CTLD_ENV, "SLURM_JOB_USER": name or ""},
                                hook="controller", need_nodelist=False)
    assert ctld.user == ""
    with pytest.raises(ContextError, match="SLURM_JOB_USER"):
        job_context_from_env(env, hook="node")


def test_long_value_is_shortened_in_message():
    env = {**NODE_ENV_2205, "SLURM_JOB_USER": "u" * 1500}
    with pytest.raises(ContextError) as exc:
        job_context_from_env(env)
    assert len(str(exc.value)) < 300


def test_context_error_is_usage_error():
    assert issubclass(ContextError, ImexctlError)
    assert ContextError("X", None, "y").exit_code == EXIT_USAGE


def test_unknown_hook():
    with pytest.raises(ValueError):
        job_context_from_env(NODE_ENV_2205, hook="slurmd")
