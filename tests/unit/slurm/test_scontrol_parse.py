"""Parsing real-shaped `scontrol -o` lines (Slurm 22.05.8, 24.11.5, 26.05.5 and 25.11 shapes)."""

import pytest

from imexctl.slurm import scontrol as sc

# Slurm 22.05.8, batch job as nobody with AdminComment and a Comment holding spaces.
JOB_2205 = (
    "JobId=3 JobName=wrap UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A "
    "Priority=4294901757 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-22T08:24:14 "
    "EligibleTime=2026-11-22T08:24:14 AccrueTime=2026-11-22T08:24:14 "
    "StartTime=2026-11-22T08:24:15 EndTime=Unknown Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-11-22T08:24:15 Scheduler=Main Partition=trays "
    "AllocNode:Sid=vm:4242 ReqNodeList=(null) ExcNodeList=(null) NodeList=tray[01-04] "
    "BatchHost=tray01 NumNodes=4 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=4,node=4,billing=4 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=tray DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
    "WorkDir=/tmp AdminComment=imexctl: clique mismatch (tray01 a.1, tray03 a.2) "
    "Comment=imexctl: prolog requeuehold test StdErr=/tmp/slurm-3.out StdIn=/dev/null "
    "StdOut=/tmp/slurm-3.out Power="
)
# Pending after a failed prolog: no nodes, held, interactive-looking.
JOB_PENDING = (
    "JobId=11 JobName=interactive UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
    "Priority=0 Nice=0 Account=(null) QOS=(null) JobState=PENDING "
    "Reason=launch_failed_requeued_held Dependency=(null) Requeue=1 Restarts=1 BatchFlag=0 "
    "Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
    "Partition=trays AllocNode:Sid=vm:1 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=(null) NumNodes=2-2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=2,node=2,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=hostname "
    "WorkDir=/home/alice/my dir Power="
)
# Slurm 25.11 adds keys (e.g. Topology, LicensesAlloc, new ones we do not know yet).
JOB_2511 = JOB_2205.replace(
    "Scheduler=Main", "Scheduler=Main NewerKey=something Another=x").replace(
    "StdOut=/tmp/slurm-3.out Power=",
    "StdOut=/tmp/slurm-3.out Power= TresPerTask=cpu=1 SegmentSize=2")

NODE_DRAINED = (
    "NodeName=tray03 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
    "CPULoad=0.05 AvailableFeatures=tray,imex ActiveFeatures=tray,imex Gres=(null) "
    "NodeAddr=10.77.0.13 NodeHostName=tray03 Version=22.05.8 "
    "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) "
    "RealMemory=1000 AllocMem=0 FreeMem=1500 Sockets=2 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=trays "
    "BootTime=2026-11-22T07:00:00 SlurmdStartTime=2026-11-22T08:20:01 "
    "LastBusyTime=2026-11-22T08:24:15 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s "
    "Reason=imexctl: prolog/wait-ready: domain DEGRADED after 60s (tray07 UNAVAILABLE) "
    "[root@2026-11-22T08:24:15] Comment=flagged by prolog "
    'Extra={"imex":{"clique_id":3,"cluster_uuid":"c0ffee"},"rack":"r7 Comment=x Reason=y"}'
)
NODE_IDLE = (
    "NodeName=tray01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
    "CPULoad=0.00 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) "
    "NodeAddr=10.77.0.11 NodeHostName=tray01 Version=22.05.8 OS=Linux 6.1.0 #1 SMP "
    "RealMemory=1000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 State=IDLE "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=trays "
    "BootTime=None SlurmdStartTime=None LastBusyTime=2026-11-22T08:24:15 "
    "ResumeAfterTime=None CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CurrentWatts=n/a AveWatts=n/a"
)


def test_job_2205():
    parsed = sc.parse_job_line(JOB_2205)
    assert parsed.ambiguous == set()
    assert sc.job_fields(parsed) == {
        "job_id": 3, "state": "RUNNING", "user_id": 65534,
        "nodes": ("tray01", "tray02", "tray03", "tray04"), "partition": "trays",
        "features": "tray", "admin_comment": "imexctl: clique mismatch (tray01 a.1, tray03 a.2)",
        "comment": "imexctl: prolog requeuehold test", "batch": True, "segment_size": 0,
        "oversubscribe": "OK", "het_job_id": None}


def test_job_pending_without_nodes_or_comments():
    fields = sc.job_fields(sc.parse_job_line(JOB_PENDING))
    assert fields["nodes"] == () and fields["state"] == "PENDING"
    assert fields["user_id"] == 1000 and fields["batch"] is False
    assert fields["features"] == "" and fields["admin_comment"] == "" and fields["comment"] == ""
    assert sc.parse_job_line(JOB_PENDING).values["WorkDir"] == "/home/alice/my dir"


def test_job_newer_slurm_unknown_keys_do_not_corrupt():
    fields = sc.job_fields(sc.parse_job_line(JOB_2511))
    assert fields["partition"] == "trays" and fields["nodes"][-1] == "tray04"
    assert fields["admin_comment"].endswith("tray03 a.2)")


def test_forged_key_in_jobname_is_reported():
    line = JOB_2205.replace("JobName=wrap", "JobName=x NodeList=tray[05-08] AdminComment=ok")
    parsed = sc.parse_job_line(line)
    assert {"NodeList", "AdminComment"} <= parsed.ambiguous


def test_forged_admin_comment_in_comment_is_reported():
    line = JOB_2205.replace("Comment=imexctl: prolog requeuehold test",
                            "Comment=hi AdminComment=imexctl: forged")
    assert "AdminComment" in sc.parse_job_line(line).ambiguous


def test_node_drained_with_stamp_and_json_extra():
    parsed = sc.parse_node_line(NODE_DRAINED)
    assert sc.node_fields(parsed) == {
        "name": "tray03", "addr": "10.77.0.13", "hostname": "tray03", "state": "IDLE+DRAIN",
        "reason": "imexctl: prolog/wait-ready: domain DEGRADED after 60s (tray07 UNAVAILABLE)",
        "extra": '{"imex":{"clique_id":3,"cluster_uuid":"c0ffee"},"rack":"r7 Comment=x Reason=y"}',
        "features": ("tray", "imex"), "comment": "flagged by prolog"}
    assert parsed.ambiguous == set()


def test_node_idle_without_optional_fields():
    fields = sc.node_fields(sc.parse_node_line(NODE_IDLE))
    assert fields["state"] == "IDLE" and fields["reason"] == "" and fields["extra"] == ""
    assert fields["features"] == () and fields["addr"] == "10.77.0.11"


def test_node_non_json_extra_kept_verbatim():
    line = NODE_IDLE + " Extra=rack 7 slot 3"
    assert sc.node_fields(sc.parse_node_line(line))["extra"] == "rack 7 slot 3"


def test_node_reason_without_stamp_and_with_equals():
    line = NODE_IDLE.replace("State=IDLE", "State=DOWN+NOT_RESPONDING") + \
        " Reason=imexctl: epilog/ports: port=33800 busy Comment=c"
    fields = sc.node_fields(sc.parse_node_line(line))
    assert fields["reason"] == "imexctl: epilog/ports: port=33800 busy"
    assert fields["comment"] == "c"


@pytest.mark.parametrize("value, uid", [("nobody(65534)", 65534), ("0", 0), ("root(0)", 0)])
def test_parse_uid(value, uid):
    assert sc.parse_uid(value) == uid


def test_parse_uid_error():
    with pytest.raises(sc.ParseError):
        sc.parse_uid("nobody")


@pytest.mark.parametrize("bad", ["", "garbage line", " NodeName=x"])
def test_not_a_record(bad):
    with pytest.raises(sc.ParseError):
        sc.parse_node_line(bad)


def test_job_line_needs_jobid():
    with pytest.raises(sc.ParseError):
        sc.parse_job_line("NodeName=x State=IDLE")


def test_bad_nodelist_is_parse_error():
    with pytest.raises(sc.ParseError):
        sc.job_fields(sc.parse_job_line(JOB_2205.replace("NodeList=tray[01-04]",
                                                          "NodeList=tray[04-01]")))


def test_config_value():
    text = ("Configuration data as of 2026-11-22T08:30:00\n"
            "SuspendTime             = NONE\n"
            "SwitchParameters        = (null)\n"
            "SwitchType              = switch/nvidia_imex\n"
            "TaskPlugin              = task/affinity\n")
    assert sc.parse_config_value(text, "SwitchType") == "switch/nvidia_imex"
    assert sc.parse_config_value(text, "Missing") is None


def test_squeue_line():
    assert sc.parse_squeue_job("7|7|RUNNING|65534|trays|tray[01-02]\n", 7) == {
        "job_id": 7, "state": "RUNNING", "user_id": 65534, "partition": "trays",
        "nodes": ("tray01", "tray02"), "het_job_id": None}
    assert sc.parse_squeue_job("junk\n", 7) is None
    assert sc.parse_squeue_job("7|7|RUNNING|65534|trays|tray[01-02]\n", 8) is None


def test_forged_admin_comment_alone_in_jobname_is_reported():
    line = JOB_PENDING.replace("JobName=interactive", "JobName=x AdminComment=imexctl: fake")
    assert "AdminComment" in sc.parse_job_line(line).ambiguous


def test_real_2205_double_space_separators():
    """Taken from Debian's 22.05 on the harness: some fields end with two spaces."""
    line = ("JobId=6 JobName=wrap UserId=nobody(65534) GroupId=nogroup(65534) "
            "JobState=RUNNING Reason=None Partition=trays NodeList=tray[01-02] "
            "BatchFlag=1 Comment=hello  world  StdErr=/dev/null StdIn=/dev/null "
            "StdOut=/dev/null Power=")
    values = sc.parse_job_line(line).values
    assert values["Comment"] == "hello  world" and values["StdErr"] == "/dev/null"


# Real lines from the harness: Slurm 24.11.5 (trixie root) and 26.05.5 (sid root), job as
# nobody with an AdminComment set by root. 26.05 adds Exclusive, SubmitLine (the user's whole
# command line), and prints StdErr= empty.
JOB_2411 = (
    "JobId=1 JobName=keys UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A Priority=1 Nice=0 "
    "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-23T04:59:05 EligibleTime=2026-11-23T04:59:05 AccrueTime=2026-11-23T04:59:05 "
    "StartTime=2026-11-23T04:59:05 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-11-23T04:59:05 Scheduler=Main Partition=trays AllocNode:Sid=vm:4208 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=tray[01-02] BatchHost=tray01 NumNodes=2 NumCPUs=2 "
    "NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* ReqTRES=cpu=2,mem=2000M,node=2,billing=2 "
    "AllocTRES=cpu=2,node=2,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 "
    "MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 "
    "Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/imexctl-harness-keys/jobs "
    "AdminComment=imexctl: channel=7  Comment=my run  StdErr=/tmp/imexctl-harness-keys/jobs/1.out "
    "StdIn=/dev/null StdOut=/tmp/imexctl-harness-keys/jobs/1.out "
)
JOB_2605 = (
    "JobId=1 JobName=keys UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A Priority=1 Nice=0 "
    "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-23T04:58:24 EligibleTime=2026-11-23T04:58:24 AccrueTime=2026-11-23T04:58:24 "
    "StartTime=2026-11-23T04:58:25 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-11-23T04:58:25 Scheduler=Main Partition=trays AllocNode:Sid=vm:4208 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=tray[01-02] BatchHost=tray01 NumNodes=2 NumCPUs=2 "
    "NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* ReqTRES=cpu=2,mem=2000M,node=2,billing=2 "
    "AllocTRES=cpu=2,node=2,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 "
    "MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Exclusive=NO "
    "Contiguous=0 Licenses=(null) LicensesAlloc=(null) Network=(null) Command=(null) "
    "SubmitLine=/usr/bin/sbatch --parsable --output=/tmp/imexctl-harness-keys/jobs/%j.out "
    "--chdir=/tmp/imexctl-harness-keys/jobs -N 2 --comment my run -J keys --wrap sleep 20 "
    "WorkDir=/tmp/imexctl-harness-keys/jobs AdminComment=imexctl: channel=7 Comment=my run StdErr= "
    "StdIn=/dev/null StdOut=/tmp/imexctl-harness-keys/jobs/1.out"
)
NODE_2605 = (
    "NodeName=tray01 Arch=x86_64 CoresPerSocket=2  CPUAlloc=2 CPUEfctv=2 CPUTot=2 CPULoad=3.06 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.213.92.11 NodeHostName=tray01 "
    "Version=26.05.5 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 "
    "FreeMem=21943 Sockets=1 Boards=1 State=ALLOCATED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=trays  BootTime=2026-11-23T04:36:50 SlurmdStartTime=2026-11-23T04:56:23 "
    "LastBusyTime=2026-11-23T04:56:23 ResumeAfterTime=None SuspendTime=INFINITE "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES=cpu=2 CurrentWatts=0 AveWatts=0"
)


# 26.05 prints OverSubscribe=NO beside Exclusive=NO for a job that may share its nodes:
# there only SLURM_JOB_EXCLUSIVE tells (policy.shared_node_refusal never asks the record).
@pytest.mark.parametrize("line,oversubscribe", [(JOB_2411, "OK"), (JOB_2605, "NO")],
                         ids=["24.11", "26.05"])
def test_real_newer_job_lines_every_key_known(line, oversubscribe):
    parsed = sc.parse_job_line(line)
    assert parsed.ambiguous == set()
    assert set(parsed.values) <= set(sc.JOB_KEYS)
    assert sc.job_fields(parsed) == {
        "job_id": 1, "state": "RUNNING", "user_id": 65534, "nodes": ("tray01", "tray02"),
        "partition": "trays", "features": "", "admin_comment": "imexctl: channel=7",
        "comment": "my run", "batch": True, "segment_size": 0,
        "oversubscribe": oversubscribe, "het_job_id": None}


def test_2605_submit_line_keeps_its_spaces():
    values = sc.parse_job_line(JOB_2605).values
    assert values["SubmitLine"].endswith("--comment my run -J keys --wrap sleep 20")
    assert values["Exclusive"] == "NO" and values["WorkDir"] == "/tmp/imexctl-harness-keys/jobs"


@pytest.mark.parametrize("forged", [
    "--comment x NodeList=tray[05-08] AdminComment=imexctl: forged",  # collides with the real ones
    "--wrap true WorkDir=/x AdminComment=imexctl: forged",           # a forged WorkDir before it
])
def test_2605_forged_keys_in_submit_line_are_reported(forged):
    line = JOB_2605.replace("--wrap sleep 20", forged)
    assert "AdminComment" in sc.parse_job_line(line).ambiguous
    no_real = line.replace(" AdminComment=imexctl: channel=7", "")
    assert "AdminComment" in sc.parse_job_line(no_real).ambiguous


def test_forged_admin_comment_after_comment_without_a_real_one():
    line = JOB_2411.replace("AdminComment=imexctl: channel=7  ", "").replace(
        "Comment=my run", "Comment=my run AdminComment=imexctl: forged")
    assert "AdminComment" in sc.parse_job_line(line).ambiguous


def test_real_2605_node_line_every_key_known():
    parsed = sc.parse_node_line(NODE_2605)
    assert parsed.ambiguous == set() and set(parsed.values) <= set(sc.NODE_KEYS)
    assert sc.node_fields(parsed)["state"] == "ALLOCATED" and parsed.values["SuspendTime"] == "INFINITE"


# `scontrol -o show job` of a `sbatch -N 4 --segment=2` job on the sid harness (26.05.5,
# topology/block). 24.11.5 prints no SegmentSize for the same job (nor --json): libslurm
# 24.11 has segment_size in the submit descriptor only, not in the job record.
JOB_2605_SEGMENT = (
    "JobId=1 JobName=wrap UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A Priority=1 "
    "Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-23T08:14:26 EligibleTime=2026-11-23T08:14:26 AccrueTime=2026-11-23T08:14:26 "
    "StartTime=2026-11-23T08:14:26 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-11-23T08:14:26 Scheduler=Main Partition=trays AllocNode:Sid=vm:5776 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=tray[01-04] BatchHost=tray01 NumNodes=4 "
    "NumCPUs=8 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:* ReqTRES=cpu=4,mem=4000M,node=4,billing=4 "
    "AllocTRES=cpu=8,node=4,billing=8 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=NO Exclusive=NODE Contiguous=0 Licenses=(null) LicensesAlloc=(null) "
    "Network=(null) Command=(null) SubmitLine=/usr/bin/sbatch --parsable --exclusive "
    "--output=/tmp/imexctl-scale-probe/jobs/%j.out --chdir=/tmp/imexctl-scale-probe/jobs -N 4 "
    "--segment=2 --wrap srun sleep 20 WorkDir=/tmp/imexctl-scale-probe/jobs StdErr= "
    "StdIn=/dev/null StdOut=/tmp/imexctl-scale-probe/jobs/1.out SegmentSize=2"
)


def test_real_2605_segment_job():
    parsed = sc.parse_job_line(JOB_2605_SEGMENT)
    assert parsed.ambiguous == set() and set(parsed.values) <= set(sc.JOB_KEYS)
    fields = sc.job_fields(parsed)
    assert fields["segment_size"] == 2 and fields["nodes"][-1] == "tray04"
    # the user's own "--segment=2" in SubmitLine is not mistaken for the key
    assert parsed.values["SubmitLine"].endswith("--segment=2 --wrap srun sleep 20")


def test_segment_size_absent_set_and_forged():
    assert sc.job_fields(sc.parse_job_line(JOB_2205))["segment_size"] == 0
    assert sc.job_fields(sc.parse_job_line(JOB_2511))["segment_size"] == 2
    # the job's user can write "SegmentSize=" into its name: the value is then unknown
    forged = JOB_2511.replace("JobName=wrap", "JobName=x SegmentSize=1")
    assert sc.job_fields(sc.parse_job_line(forged))["segment_size"] is None
    assert sc.parse_segment_size("junk") is None and sc.parse_segment_size("16") == 16


def test_show_resources_channel_per_node():
    # `scontrol show resources 1` on the sid harness (26.05.5, switch/nvidia_imex)
    text = ("Node=tray01 AbstractCores=0x3 Memory=0 Channel=1\n"
            "Node=tray02 AbstractCores=0x3 Memory=0 Channel=1\n")
    assert sc.parse_resources(text) == {"tray01": 1, "tray02": 1}
    assert sc.parse_resources("Node=tray01 AbstractCores=0x3 Memory=0\n") == {}
    assert sc.parse_resources("missing JobId: No error\nNode=a/b Channel=3\nNode=x Channel=y") == {}


@pytest.mark.parametrize("tz, text, epoch", [
    ("UTC", "SubmitTime=2026-11-22T08:24:14", 1795335854),
    ("Europe/Berlin", "SubmitTime=2026-11-22T09:24:14", 1795335854),
    ("Europe/Berlin", "SubmitTime=2026-10-25T02:30:00", 1792888200),   # twice: the earlier
    ("UTC", "SubmitTime=1795335854", 1795335854),
])
def test_submit_time_in_local_time_or_epoch_seconds(monkeypatch, tz, text, epoch):
    """An scontrol that prints local time (no SLURM_TIME_FORMAT=%s) still gives the right
    epoch, and an hour that occurs twice gives its earlier reading (never a later one:
    a later SubmitTime could refuse the job's own record)."""
    import time

    from imexctl.slurm.scontrol import submit_time

    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        assert submit_time(f"JobId=1 JobName=x {text} EligibleTime=x") == epoch
    finally:
        monkeypatch.undo()
        time.tzset()
