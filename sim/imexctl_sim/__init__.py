"""Simulated NVIDIA IMEX stack: ``nvidia-imex`` (daemon) and ``nvidia-imex-ctl``.

Faithful enough to drive imexctl's prolog/epilog without GPUs: the real config keys,
node id = line index of the node config, peers over TCP on SERVER_PORT with node-map and
version checks, a command service on IMEX_CMD_PORT, ``-q`` / ``-N`` / ``-N -j`` output in
the real shapes, signal semantics, reconnect back-off and the recovery wait after an
unclean stop. Faults are switched at run time (see :mod:`imexctl_sim.faults`).
See docs/simulator.md.
"""

DEFAULT_VERSION = "580.95.05"


def run_and_exit(main) -> None:
    """Run a simulated tool's ``main`` and leave with its code through ``os._exit``, after
    flushing stdout and stderr: the real tools are native binaries that exit at once,
    while a Python interpreter's teardown of every module costs 3-5 ms of CPU. The
    harness runs the ctl at every readiness check of every tray, and an epilog waits for
    the stopped daemon to exit, so that teardown was pure simulator overhead inside the
    figures measured for imexctl. Everything the tools write is written by then (the
    IMEX log is flushed line by line, persist.dat closed on shutdown)."""
    import os
    import sys

    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken pipe: nothing more to say
            pass
    os._exit(0 if rc is None else rc if isinstance(rc, int) else 1)   # as sys.exit(rc)
