"""Grouping by clique, the multi-clique policies, and the AdminComment decision record."""

import pytest

from imexctl.rules import decision as dec
from imexctl.config import parse_config
from imexctl.rules.decision import fallback_decision
from imexctl.rules.groups import (DOMAINS, NONE, PENDING, REFUSE, SKIP, group_trays, judge,
                                  policy_for)
from imexctl.rules.cliques import TrayIdentity, identity_from_extra
from imexctl.slurm.munge import MungeSeal
from tests.support.memory_slurm import FAKE_MUNGE, SEAL, tray_view

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
NODES = [f"tray{i:02d}" for i in range(1, 9)]


def ident(uuid=U1, clique=32766):
    return TrayIdentity(uuid, clique, 4)


def two_racks():
    """tray01-04 in rack U1, tray05-08 in rack U2; both racks use clique 32766."""
    return {n: ident(U1 if i < 4 else U2) for i, n in enumerate(NODES)}


def test_groups_key_on_uuid_and_clique_in_slurm_order():
    ids = two_racks()
    ids["tray02"] = ident(U1, 7)  # same rack UUID, other clique: its own group
    grouping = group_trays(["tray05", *NODES], ids)  # a duplicate name is counted once
    assert [g.key for g in grouping.groups] == [f"{U2}.32766", f"{U1}.32766", f"{U1}.7"]
    assert grouping.groups[0].members == ("tray05", "tray06", "tray07", "tray08")
    assert grouping.groups[1].members == ("tray01", "tray03", "tray04")
    assert grouping.group_of("tray02").members == ("tray02",)


def test_non_imex_and_unpublished_trays_get_no_group():
    ids = two_racks()
    ids["tray03"] = TrayIdentity.not_imex(4)
    ids["tray04"] = None
    grouping = group_trays(NODES, ids)
    assert grouping.non_imex == ("tray03",) and grouping.unpublished == ("tray04",)
    assert grouping.group_of("tray03") is None
    verdict = judge(grouping, "per-clique")
    assert verdict.action == PENDING and "tray04" in verdict.reason


@pytest.mark.parametrize("policy, action, words", [
    ("per-clique", DOMAINS, ""),
    ("refuse", REFUSE, "spans 2 NVLink cliques: tray[01-04] in " + U1),
    ("skip", SKIP, "running without IMEX (policy skip)"),
])
def test_policies_on_a_two_rack_job(policy, action, words):
    verdict = judge(group_trays(NODES, two_racks()), policy)
    assert verdict.action == action
    assert words in verdict.reason


def test_one_clique_is_domains_under_every_policy_and_no_imex_is_none():
    one = {n: ident() for n in NODES}
    for policy in ("per-clique", "refuse", "skip"):
        assert judge(group_trays(NODES, one), policy).action == DOMAINS
    none = {n: TrayIdentity.not_imex() for n in NODES}
    assert judge(group_trays(NODES, none), "refuse").action == NONE
    with pytest.raises(ValueError):
        judge(group_trays(NODES, one), "sometimes")


def test_policy_per_partition_falls_back_to_site_default():
    cfg = parse_config({"policy": {"multi_clique": "skip",
                                   "partition": {"nvl": {"multi_clique": "refuse"}}}}, None, "t")
    assert policy_for(cfg, "nvl") == "refuse"
    assert policy_for(cfg, "batch") == "skip" and policy_for(cfg, None) == "skip"
    assert policy_for(parse_config({}, None, "t"), "x") == "per-clique"


@pytest.mark.parametrize("extra", [
    "", "not json", "[]", '{"imex": 5}', '{"other": {}}',
    "[" * 100000 + "]" * 100000,                                     # RecursionError
    '{"imex": {"cluster_uuid": "%s", "clique_id": 1e999}}' % U1,     # OverflowError
    '{"imex": {"cluster_uuid": "%s", "clique_id": NaN}}' % U1,
    '{"imex": {"cluster_uuid": "%s", "clique_id": true}}' % U1,
    '{"imex": {"cluster_uuid": "%s", "clique_id": -1}}' % U1,
    '{"imex": {"cluster_uuid": "rack7", "clique_id": 1}}',
    '{"imex": {"cluster_uuid": "%s", "clique_id": 1, "gpu_count": "4"}}' % U1,
    '{"imex": {"cluster_uuid": "%s", "clique_id": 1, "pad": "%s"}}' % (U1, "x" * 20000),
])
def test_unusable_extra_is_not_published(extra):
    assert identity_from_extra(extra) is None


def test_published_extra_parses_and_keeps_other_keys_irrelevant():
    got = identity_from_extra('{"rack": 7, "imex": {"cluster_uuid": "%s", "clique_id": 3,'
                              ' "gpu_count": 4, "state": "Completed", "observed": 1e999}}'
                              % U1.upper())
    assert got.clique == f"{U1}.3" and got.imex and got.observed == 0.0


def record(**kw):
    base = dict(job_id=42, action="domains", channel_mode="imexctl",
                groups=(dec.GroupDecision(f"{U1}.32766", 5, tuple(NODES[:4])),
                        dec.GroupDecision(f"{U2}.32766", 9, tuple(NODES[4:]))),
                restart_count=0, nodes_hash=dec.nodes_hash(NODES), cluster=CLUSTER)
    base.update(kw)
    return dec.Decision(**base)


CLUSTER = "unit"
SUBMITTED = 1795335854      # the job's SubmitTime: before every record sealed here


def find(text, seal, job_id, restart, nodes, **kw):
    kw.setdefault("cluster", CLUSTER)
    kw.setdefault("submit_time", SUBMITTED)
    return dec.find(text, seal, job_id, restart, nodes, **kw)


def test_record_round_trip_is_compact_space_free_and_sealed():
    text = dec.encode(record(note="two domains; 100%"), SEAL)
    assert text.startswith("imexctl:v3;j=42;r=0;c=unit;")
    assert f"g={U1}.32766/5/tray[01-04]" in text and ";n=two_domains%3B_100%25;" in text
    assert " " not in text and ";s=MUNGE:" in text
    back = dec.decode(text)
    assert back.groups == record().groups and back.note == "two domains; 100%"
    assert dec.sealed(text, SEAL)


def test_find_gives_each_tray_its_group_and_rejects_stale_records():
    text = dec.encode(record(), SEAL)
    mine = dec.for_node(find(text, SEAL, 42, 0, NODES).decision, "tray06")
    assert mine.source == "controller" and mine.group.channel == 9
    assert mine.group.members == tuple(NODES[4:])
    assert find(text, SEAL, 43, 0, NODES).decision is None            # another job
    assert find(text, SEAL, 42, 0, NODES[:7]).decision is None        # another allocation
    assert find(text, SEAL, 42, 1, NODES).decision is None            # an earlier attempt
    assert dec.for_node(dec.decode(text), "tray99").group is None


def test_slurm_mode_record_has_no_channels():
    groups = tuple(dec.GroupDecision(g.key, None, g.members) for g in record().groups)
    text = dec.encode(record(channel_mode="slurm", groups=groups), SEAL)
    assert "/-/tray[05-08]" in text
    node = tray_view(text, "tray01")
    assert node.channel_mode == "slurm" and node.group.channel is None


@pytest.mark.parametrize("text", [
    None, "", "imexctl: allocation spans cliques", "imexctl:v2;j=1", "imexctl:v2",
    "imexctl:v1;j=42;r=0;h=000000000000;m=imexctl;a=none",                    # version 1
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl",                           # missing a=
    "imexctl:v2;j=42;j=43;r=0;h=000000000000;m=imexctl;a=none",                # duplicate
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=none;q=1",                 # unknown
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=none;g=%s.1/3/t1" % U1,    # groups w/o domains
    "imexctl:v2;j=42;r=0;h=000000000000;m=slurm;a=domains;g=%s.1/3/t1" % U1,   # slurm with channel
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;g=%s.1/0/t1" % U1,  # channel 0
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;g=%s.1/3/t[1-9999999]" % U1,
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;g=%s.1/3/t[0-999999,0-999999]" % U1,
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;g=%s.1/3/t1;g=%s.2/4/t1" % (U1, U1),
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;g=%s.1/3/t[1-" % U1,
    "imexctl:v2;j=42;r=0;h=000000000000;m=imexctl;a=domains;n=a b;g=%s.1/3/t1" % U1,
])
def test_garbage_is_no_decision(text):
    assert dec.decode(text) is None
    assert tray_view(text, "t1") is None


def test_a_well_formed_record_without_a_valid_seal_is_not_believed():
    body = dec.body(record())
    forged = f"{body};s=MUNGE:" + "QUFB" * 20 + ":"
    assert dec.decode(forged) is not None                         # readable...
    assert find(forged, SEAL, 42, 0, NODES).decision is None  # ...but not believed
    real = dec.encode(record(), SEAL)
    other_body = dec.body(record(groups=(dec.GroupDecision(f"{U1}.32766", 77, NODES),)))
    spliced = f"{other_body};s={real.rpartition(';s=')[2]}"        # a real seal, other text
    assert find(spliced, SEAL, 42, 0, NODES).decision is None


def test_a_seal_made_by_an_untrusted_uid_is_not_believed(monkeypatch):
    import subprocess
    body = dec.body(record())
    cred = subprocess.run([str(FAKE_MUNGE / "munge"), "--string", dec.SEAL_PREFIX
                           + __import__("hashlib").sha256(body.encode()).hexdigest()],
                          capture_output=True, text=True, check=True,
                          env={"FAKEMUNGE_UID": "65534"}).stdout.strip()
    text = f"{body};s={cred}"
    assert find(text, SEAL, 42, 0, NODES).decision is None
    trusting = MungeSeal(FAKE_MUNGE, None, frozenset({0, 65534}))
    assert find(text, trusting, 42, 0, NODES).decision is not None


def test_oversized_record_is_refused_before_anything_else():
    members = tuple(f"n{i}x" for i in range(25_000))   # names that do not compress
    with pytest.raises(dec.DecisionTooLarge):
        dec.body(record(groups=(dec.GroupDecision(f"{U1}.1", 3, members),)))


def test_a_thousand_cliques_fit_one_record():
    groups = tuple(dec.GroupDecision(f"5b1b3a1e-1c1a-4d0e-9a5e-{r:012d}.32766", 1 + r % 2000,
                                     tuple(f"gb{r:04d}{t:02d}" for t in range(1, 19)))
                   for r in range(1000))
    nodes = [n for g in groups for n in g.members]
    big = dec.Decision(job_id=42, action="domains", groups=groups, nodes_hash=dec.nodes_hash(nodes),
                       cluster=CLUSTER)
    text = dec.encode(big, SEAL)
    assert len(text) <= dec.MAX_RECORD
    found = find(text, SEAL, 42, 0, nodes).decision
    assert found.groups == groups


def test_the_largest_record_with_its_seal_fits_one_admin_comment_update():
    """What decode accepts (MAX_SEALED) is written whole by both backends (MAX_COMMENT, what
    one `scontrol update` argument carries); a seal that would push a record past it is
    refused by encode, before anything is written."""
    from imexctl.slurm.records import MAX_COMMENT

    assert dec.MAX_RECORD < dec.MAX_SEALED <= MAX_COMMENT

    class HugeSeal:
        def seal(self, payload):
            return "MUNGE:" + "A" * dec.MAX_SEALED + ":"
    with pytest.raises(dec.DecisionTooLarge, match=r"job 42 is over \d+ characters with its seal"):
        dec.encode(record(), HugeSeal())


def test_fallback_uses_published_identities_and_the_job_id_rule():
    ids = two_racks()
    first = fallback_decision(4242, NODES, ids, "tray02")
    other = fallback_decision(4242, NODES, ids, "tray07")
    assert first.source == "fallback" and first.channel_rule == "job-id"
    assert first.group.members == tuple(NODES[:4]) and other.group.members == tuple(NODES[4:])
    assert first.group.channel == other.group.channel == 1 + 4242 % 2047
    refused = fallback_decision(4242, NODES, ids, "tray02", policy="refuse")
    assert refused.action == REFUSE and refused.group is None
    slurm = fallback_decision(4242, NODES, ids, "tray02", slurm_channels=True)
    assert slurm.group.channel is None and slurm.channel_mode == "slurm"


def test_fallback_channel_rule_honours_the_channel_count():
    nd = fallback_decision(4242, NODES, two_racks(), "tray02", channel_count=64)
    assert nd.group.channel == 1 + 4242 % 63


def test_segments_that_span_cliques_are_named():
    from imexctl.rules.groups import segments_spanning_cliques
    ids = two_racks()
    ids["tray05"] = ident(U1)             # rack 1 holds 5 trays, rack 2 holds 3
    grouping = group_trays(NODES, ids)
    assert segments_spanning_cliques(grouping, 4) == [
        f"{U1}.32766 holds 5 trays, not a multiple of the segment size 4",
        f"{U2}.32766 holds 3 trays, not a multiple of the segment size 4"]
    assert segments_spanning_cliques(group_trays(NODES, two_racks()), 4) == []
    assert segments_spanning_cliques(grouping, 0) == []


# ------------------------------------------------------ decoding bounded by the text (F4-4)
def hostile_groups(count, digits=7):
    """Audit F4-4's job name: ``count`` groups of a million names each, for another job."""
    hi = "9" * digits
    return ";".join(f"g={U1}.{i}/{i + 1}/a{i}x[{'0' * digits}-{hi}]" for i in range(count))


@pytest.fixture
def expanded(monkeypatch):
    """Every hostlist name any decode builds (the work F4-4 was about)."""
    from imexctl.slurm import hostlist

    names = []
    real = hostlist.expand
    monkeypatch.setattr(hostlist, "expand", lambda expr: names.extend(real(expr)) or real(expr))
    return names


def test_a_16_group_hostile_job_name_expands_nothing(expanded):
    """1 KB naming 16 million names: once 11-15 s and 1.28 GB per tray, now refused by
    counting (and the record names another job: its groups are never looked at)."""
    name = (f"imexctl:v3;{hostile_groups(16)};j=999;r=0;c=unit;h=000000000000;m=imexctl;"
            "a=domains")
    assert len(name) < 1200
    assert dec.decode(name) is None
    assert find(name, SEAL, 42, 0, NODES).decision is None
    assert dec.find_all([dec.JobText(999, name)], SEAL, cluster=CLUSTER).decisions == ()
    assert expanded == []


def test_members_are_bounded_by_the_records_text_before_any_expansion(expanded):
    """Under MAX_MEMBERS but far over what the text can name honestly (32 per character)."""
    small = (f"imexctl:v3;j=42;r=0;c=unit;h=000000000000;m=imexctl;a=domains;"
             f"g={U1}.1/2/a[00000-49999]")
    assert dec._name_count("a[00000-49999]") < dec.MAX_MEMBERS
    assert dec.decode(small) is None and expanded == []
    fine = small.replace("a[00000-49999]", "a[00000-00017]")
    assert len(dec.decode(fine).groups[0].members) == 18


def test_find_expands_only_a_record_whose_seal_opened(expanded):
    """Unsealed copies naming this very job, attempt and allocation (the user can write
    them) are matched by their fields and opened, never expanded."""
    real = dec.encode(record(), SEAL)
    forged = dec.body(record()) + ";s=MUNGE:" + "QUFB" * 20 + ":"
    found = find(f"{forged} {forged.replace('QUFB', 'QUFC')} {real}", SEAL, 42, 0, NODES)
    assert found.decision is not None and found.candidates == 3
    assert sorted(expanded) == sorted(NODES)          # the real record's names, once


def test_the_record_at_admin_comments_position_is_preferred():
    """Two genuinely sealed records of this job instance (an admin re-ran the controller,
    a user copied an earlier one): the one at AdminComment's own position wins, not the
    one printed first."""
    first = dec.encode(record(groups=(dec.GroupDecision(f"{U1}.1", 5, tuple(NODES)),)), SEAL)
    admin = dec.encode(record(groups=(dec.GroupDecision(f"{U1}.1", 7, tuple(NODES)),)), SEAL)
    text = f"JobName={first} WorkDir=/x AdminComment={admin} Comment=y"
    assert find(text, SEAL, 42, 0, NODES).decision.groups[0].channel == 5   # text order
    assert find(text, SEAL, 42, 0, NODES,
                admin_comment=admin).decision.groups[0].channel == 7


def test_a_replayed_record_is_refused_and_a_v2_record_asks_for_a_requeue():
    import time

    text = dec.encode(record(), SEAL)
    later = int(time.time()) + 3600
    replay = find(text, SEAL, 42, 0, NODES, submit_time=later)
    assert replay.decision is None and replay.refused and "replayed" in replay.why
    # within ENCODE_SLACK_S of the SubmitTime (Slurm's requeue "now + 1"): the job's own
    assert find(text, SEAL, 42, 0, NODES,
                submit_time=int(time.time()) + dec.ENCODE_SLACK_S - 1).decision is not None
    unknown = find(text, SEAL, 42, 0, NODES, submit_time=None)
    assert unknown.refused and "SubmitTime is unknown" in unknown.why
    foreign = find(text, SEAL, 42, 0, NODES, cluster="other")
    assert foreign.refused and "sealed for cluster 'unit', this is 'other'" in foreign.why


def test_rebuild_attributes_records_to_their_own_line_and_caps_its_work(monkeypatch):
    opened = []
    real_open = MungeSeal.open_sealed
    monkeypatch.setattr(MungeSeal, "open_sealed",
                        lambda self, cred: opened.append(cred) or real_open(self, cred))
    victim = dec.encode(record(job_id=9), SEAL)
    body = victim.rpartition(";s=")[0]
    copies = " ".join(f"{body};s=MUNGE:forgedcopy{i:02d}AAAA:" for i in range(4))
    jobs = [dec.JobText(5, f"JobId=5 JobName={copies}", "", SUBMITTED),
            dec.JobText(9, f"JobId=9 AdminComment={victim}", victim, SUBMITTED)]
    got = dec.find_all(jobs, SEAL, cluster=CLUSTER)
    assert [d.job_id for d in got.decisions] == [9] and got.unverified == ()
    assert len(opened) == 1                              # the copies cost nothing
    capped = dec.find_all(jobs, SEAL, cluster=CLUSTER, max_opens=0)
    assert capped.capped and capped.unverified == (9,)
