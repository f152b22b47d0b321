"""Simulated NVIDIA IMEX stack: ``nvidia-imex`` (daemon) and ``nvidia-imex-ctl``.

Faithful enough to drive imexctl's prolog/epilog without GPUs: the real config keys,
node id = line index of the node config, peers over TCP on SERVER_PORT with node-map and
version checks, a command service on IMEX_CMD_PORT, ``-q`` / ``-N`` / ``-N -j`` output in
the real shapes, signal semantics, reconnect back-off and the recovery wait after an
unclean stop. Faults are switched at run time (see :mod:`imexctl.sim.faults`).
See docs/simulator.md.
"""

DEFAULT_VERSION = "580.95.05"
