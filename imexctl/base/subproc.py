"""Start helper commands and the daemon: a wall-clock bound that also covers children,
without the ``subprocess`` module.

Every hook that starts a process paid for ``subprocess`` (with locale, selectors,
threading and signal). ``os.posix_spawn`` is glibc's
vfork + exec: safe beside threads, returns as soon as the child runs, and an
exec failure comes back as OSError. Each command runs in its own session; when the bound
expires the whole process group is killed (SIGKILL), so a wrapper script's children do
not outlive the call (audit F-23). Nothing goes through a shell, and no PATH is searched:
callers pass absolute paths.
"""

from __future__ import annotations

import os
import select
import time

from imexctl.base.dataclass import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

_DRAIN_S = 2.0        # after a kill: how long the pipes may still be read
# The most a command may write on stdout or on stderr. imexctl's largest legitimate answer
# (squeue of every job of a big cluster, scontrol of a 1,000-tray job's nodes) is a few MiB;
# a client that floods its output is stopped there instead of read whole into memory
# (audit S3-6: 400 MB of output took the prolog to 800 MB RSS).
MAX_OUTPUT = 16 << 20


@dataclass(frozen=True)
class Bounded:
    rc: int | None           # None: could not start, or killed at the bound
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    error: str = ""          # why rc is None


@dataclass(frozen=True)
class Completed:
    """A finished command with text output (what ``subprocess.run`` would return)."""
    args: list
    returncode: int
    stdout: str = ""
    stderr: str = ""


def _seal_inherited() -> None:
    """Make descriptors this process inherited (from slurmd, a shell) close-on-exec, so a
    child sees only stdin, stdout and stderr (what ``close_fds=True`` gave). Descriptors
    Python opens are close-on-exec already (PEP 446); a listing costs microseconds, so
    it is made before every start."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = [str(fd) for fd in range(3, 256)]
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
            except OSError:
                pass          # the listing's own descriptor, closed by now


def _above_stdio(fd: int) -> int:
    """A descriptor to dup2 onto 0-2 must not itself be 0-2 (dup2 onto itself would keep
    it close-on-exec): only when this process was started with stdio closed."""
    if fd > 2:
        return fd
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def spawn(argv: list[str], env: Mapping[str, str], *, stdout: int, stderr: int,
          cwd: str | None = None, stdin: int | None = None) -> int:
    """Start ``argv`` in a new session with stdin from /dev/null (or ``stdin``) and the
    given output descriptors; return its pid. OSError when it cannot be executed.

    ``cwd``: the child's working directory. posix_spawn has none in Python 3.11, so this
    process changes directory around the call and back: only from a single-threaded
    caller (the prolog starting its daemon)."""
    _seal_inherited()
    made = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)]   # closed again below
    fds = []
    for fd in (made[0] if stdin is None else stdin, stdout, stderr):
        high = _above_stdio(fd)
        if high != fd:
            made.append(high)
        fds.append(high)
    here = -1
    try:
        if cwd is not None:
            try:
                here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                here = -1     # a vanished cwd: nothing to come back to
            os.chdir(cwd)
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
        try:
            return os.posix_spawn(argv[0], argv, dict(env), file_actions=actions, setsid=True)
        except NotImplementedError as exc:   # a libc without POSIX_SPAWN_SETSID
            raise OSError(f"cannot start {argv[0]} in its own session here: {exc}") from None
    finally:
        if here >= 0:
            os.fchdir(here)
            os.close(here)
        for fd in made:
            os.close(fd)


class Started:
    """A command under way (:func:`start`): its output is read, and the bound enforced,
    when :meth:`finish` is called. PrologSlurmctld sends its Slurm queries this way and
    imports what its decision needs while slurmctld answers, without a thread (a thread
    waits for the GIL while the importing thread holds it)."""

    def __init__(self, argv: list[str], pid: int, out_r: int, err_r: int, timeout_s: float,
                 max_output: int = MAX_OUTPUT):
        self.argv, self.pid, self.timeout_s = list(argv), pid, timeout_s
        self.max_output = max_output
        self._fds = (out_r, err_r)
        self._deadline = time.monotonic() + timeout_s

    def finish(self) -> Bounded:
        """Wait for the command (at most what is left of its bound), killing its whole
        group at the bound; once only."""
        out_r, err_r = self._fds
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        try:
            try:
                done = _collect(self.pid, chunks, self._deadline, self.max_output)
            except _Overflow as over:
                self._kill()
                stream = "stdout" if over.fd == out_r else "stderr"
                return Bounded(None, error=f"{_command(self.argv)} wrote more than "
                                           f"{_size(self.max_output)} on {stream}: stopped, "
                                           "its output not used")
            if done is None:
                self._kill(drain=chunks)
                return Bounded(None, timed_out=True,
                               error=f"timed out after {self.timeout_s:g}s")
        finally:
            for fd in chunks:
                os.close(fd)
        return Bounded(done, b"".join(chunks[out_r]), b"".join(chunks[err_r]))

    def _kill(self, drain: dict[int, list[bytes]] | None = None) -> None:
        """SIGKILL the command's whole group; read what is left (timeout) and reap it."""
        try:
            os.killpg(self.pid, 9)     # SIGKILL, the whole session's group
        except (ProcessLookupError, PermissionError):
            pass
        if drain is not None:
            try:
                _collect(self.pid, drain, time.monotonic() + _DRAIN_S, self.max_output)
            except _Overflow:
                pass
        _reap(self.pid)

    def finish_text(self) -> Completed | Bounded:
        """:meth:`finish` with text output, as :func:`run_text` returns it."""
        return _text(self.argv, self.finish())


MAX_INPUT = 65536     # what a pipe holds without a reader: written whole before the start


class FdExhausted(OSError):
    """No file descriptor left to start a command (EMFILE: this process's RLIMIT_NOFILE;
    ENFILE: the system's file table): a fault of the tray, not of the command or of Slurm
    (audit 2026-11b: at RLIMIT_NOFILE 10 the prolog blamed Slurm)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def fd_shortage(errno_: int | None) -> str:
    """What ran out, for EMFILE/ENFILE (the soft limit named); "" for any other errno."""
    import errno
    if errno_ == errno.EMFILE:
        import resource
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return f"out of file descriptors (RLIMIT_NOFILE {soft}; raise LimitNOFILE of slurmd)"
    if errno_ == errno.ENFILE:
        return "out of file descriptors (the system's file table is full: fs.file-max)"
    return ""


def fd_error_text(exc: BaseException) -> str:
    """A cause naming the limit when ``exc`` is running out of file descriptors, else ""."""
    if isinstance(exc, FdExhausted):
        return str(exc)
    if not isinstance(exc, OSError) or not (why := fd_shortage(exc.errno)):
        return ""
    return f"{why}: {exc.strerror}" + (f": {exc.filename}" if exc.filename else "")


def _exhausted(exc: OSError, argv: list[str]) -> OSError:
    why = fd_shortage(exc.errno)
    if not why:
        return exc
    return FdExhausted(exc.errno, f"{why}: cannot run {os.path.basename(str(argv[0]))}")


def start(argv: list[str], timeout_s: float, env: Mapping[str, str],
          input: bytes | None = None, max_output: int = MAX_OUTPUT) -> Started | Bounded:
    """Start ``argv`` with its output on pipes and return at once; the Bounded failure
    when it cannot be started. The ``timeout_s`` bound counts from now. ``input`` (at
    most MAX_INPUT bytes, e.g. a credential for ``unmunge``) is its stdin. More than
    ``max_output`` bytes on stdout or on stderr stops the command (a Bounded failure
    naming it)."""
    if input is not None and len(input) > MAX_INPUT:
        raise ValueError(f"input of {len(input)} bytes is over {MAX_INPUT}")
    opened: list[int] = []
    try:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        opened += (out_r, out_w)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        opened += (err_r, err_w)
        in_r = -1
        if input is not None:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            try:
                os.write(in_w, input)    # fits the pipe: never blocks
            finally:
                os.close(in_w)
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        raise _exhausted(exc, argv) from None
    try:
        pid = spawn(argv, env, stdout=out_w, stderr=err_w, stdin=None if in_r < 0 else in_r)
    except OSError as exc:
        for fd in (out_r, err_r):
            os.close(fd)
        if fd_shortage(exc.errno):
            raise _exhausted(exc, argv) from None
        return Bounded(None, error=f"cannot run {argv[0]}: {exc.strerror or exc}")
    finally:
        os.close(out_w)
        os.close(err_w)
        if in_r >= 0:
            os.close(in_r)
    return Started(argv, pid, out_r, err_r, timeout_s, max_output)


def run_bounded(argv: list[str], timeout_s: float, env: Mapping[str, str],
                input: bytes | None = None, max_output: int = MAX_OUTPUT) -> Bounded:
    """Run ``argv`` to completion, reading its output, for at most ``timeout_s`` and at
    most ``max_output`` bytes per stream."""
    started = start(argv, timeout_s, env, input, max_output)
    return started if isinstance(started, Bounded) else started.finish()


class _Overflow(Exception):
    def __init__(self, fd: int):
        super().__init__(fd)
        self.fd = fd


def _command(argv: list[str]) -> str:
    """The command for an error message: its name and arguments, shortened."""
    text = " ".join([os.path.basename(str(argv[0])), *map(str, argv[1:])])
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


def _collect(pid: int, chunks: dict[int, list[bytes]], deadline: float,
             limit: int = MAX_OUTPUT) -> int | None:
    """Read the pipes until both are closed and the child has ended; its exit code
    (negative: killed by that signal), or None at the deadline. _Overflow when a pipe
    brings more than ``limit`` bytes."""
    sizes = {fd: sum(map(len, got)) for fd, got in chunks.items()}
    poller = select.poll()
    pidfd = -1
    try:
        pidfd = os.pidfd_open(pid)
        poller.register(pidfd, select.POLLIN)
    except (OSError, AttributeError):
        pidfd = -1            # no pidfd (old kernel): the exit is polled below
    open_fds = set()
    for fd in chunks:
        try:
            poller.register(fd, select.POLLIN)
            open_fds.add(fd)
        except ValueError:
            pass
    status: int | None = None
    try:
        while True:
            if not open_fds and status is None:
                got, raw = os.waitpid(pid, os.WNOHANG)
                if got:
                    status = os.waitstatus_to_exitcode(raw)
            if not open_fds and status is not None:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait_ms = left * 1000 if pidfd >= 0 or open_fds else min(left * 1000, 10)
            for fd, _ in poller.poll(wait_ms):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    os.close(pidfd)
                    pidfd = -1
                    continue
                data = os.read(fd, 65536)
                if data:
                    sizes[fd] += len(data)
                    if sizes[fd] > limit:
                        raise _Overflow(fd)
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_fds.discard(fd)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _reap(pid: int) -> None:
    """Collect a killed child so no zombie is left (bounded: it was sent SIGKILL)."""
    deadline = time.monotonic() + _DRAIN_S
    while time.monotonic() < deadline:
        try:
            got, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if got:
            return
        time.sleep(0.01)


def run_text(argv: list[str], timeout_s: float, env: Mapping[str, str],
             input: bytes | None = None, max_output: int = MAX_OUTPUT) -> Completed | Bounded:
    """``run_bounded`` with text output: Completed, or the Bounded failure (not started,
    timed out, too much output)."""
    return _text(argv, run_bounded(argv, timeout_s, env, input, max_output))


def _text(argv: list[str], ran: Bounded) -> Completed | Bounded:
    if ran.rc is None:
        return ran
    return Completed(list(argv), ran.rc, ran.stdout.decode(errors="replace"),
                     ran.stderr.decode(errors="replace"))


__all__ = ["Bounded", "Completed", "FdExhausted", "MAX_OUTPUT", "Started", "fd_error_text", "fd_shortage",
           "run_bounded", "run_text", "spawn", "start"]
