"""A domain record (ownership.DomainRecord) with test defaults: job 7 on tray01 and tray02."""

from imexctl.tray.ownership import DomainRecord


def make_record(**kw):
    base = dict(job_id=7, uid=65534, user="nobody", nodes=["tray01", "tray02"],
                addresses=["10.0.0.1", "10.0.0.2"], node_id=0, digest="abc", server_port=1,
                cmd_port=2, channel=8, channel_rule="job-id", job_dir="/run/x/job-7")
    base.update(kw)
    return DomainRecord(**base)
