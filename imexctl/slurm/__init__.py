"""Slurm side of imexctl: hook context, hostlists, and one adapter with two backends.

* :mod:`imexctl.slurm.context`   - the job as a hook's environment describes it (validated)
* :mod:`imexctl.slurm.hostlist`  - ``tray[01-04]`` <-> names, pure Python
* :mod:`imexctl.slurm.adapter`   - JobRecord, NodeRecord, the rules every backend keeps, get_adapter
* :mod:`imexctl.slurm.interface` - the SlurmAdapter protocol
* :mod:`imexctl.slurm.cli_backend` / :mod:`imexctl.slurm.pyslurm_backend` - the backends
* :mod:`imexctl.slurm.scontrol`  - pure parsers of scontrol output

Nothing heavy is imported here: every job start pays for imports on every tray.
"""
