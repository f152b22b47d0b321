"""What users wrote (a process's argv, a job's fields) reaches the admin's terminal, the
hooks' stderr line, the journal's MESSAGE and the Slurm reason escaped (audit F4-8),
through the real command line: ``imexctl health`` beside a process named ``nvidia-imex``
whose argv carries ESC, OSC and BEL bytes. A user's such process is a note, a root one a
second owner (audit F4-3); the text is escaped either way."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time

import pytest


from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK
from tests.support.cli_tray import Tray, run_hook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root")

# clears the screen, retitles the terminal to a fake root prompt, rings, turns red; a C1
# CSI and a right-to-left override for good measure
HOSTILE = "/x\x1b[2J\x1b]0;root@ctl: rm -rf /\x07\x1b[31mOK\x9b1m\u202etxt.exe"
SHOWN = "/x\\x1b[2J\\x1b]0;root@ctl: rm -rf /\\x07\\x1b[31mOK\\x9b1m\\u202etxt.exe"
SLEEP = "import time; time.sleep(60)"


def raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on (a newline ends a line, nothing more)."""
    return [c for c in text if c != "\n" and not c.isprintable()]


class Journal:
    """A stand-in for journald's socket, read while the command runs (a datagram socket
    nobody reads blocks its sender after a few lines)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.data: list[bytes] = []
        self.open = True
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while self.open:
            try:
                self.data.append(self.sock.recv(1 << 20))
            except (TimeoutError, socket.timeout):
                continue

    def messages(self) -> list[str]:
        return [line[len(b"MESSAGE="):].decode() for data in self.data
                for line in data.split(b"\n") if line.startswith(b"MESSAGE=")]

    def close(self):
        self.open = False
        self.reader.join()
        self.sock.close()


@pytest.fixture
def tray(tmp_path):
    tray = Tray(tmp_path)
    with open(tray.config, "a") as cfg:
        cfg.write(f'[log]\nsink = "journal"\nsocket = "{tmp_path}/journal.sock"\n')
    journal = Journal(tmp_path / "journal.sock")
    yield tray, journal
    journal.close()


def named_nvidia_imex(user: int) -> subprocess.Popen:
    """``exec -a nvidia-imex python3 -c SLEEP HOSTILE`` as ``user``."""
    proc = subprocess.Popen(["nvidia-imex", "-c", SLEEP, HOSTILE],
                            executable=shutil.which("python3", path="/usr/bin:/bin"),
                            user=user, group=user, cwd="/")
    deadline = time.monotonic() + 5
    while HOSTILE.encode() not in open(f"/proc/{proc.pid}/cmdline", "rb").read():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


@pytest.mark.parametrize("user", [65534, 0], ids=["look-alike", "root-daemon"])
def test_health_escapes_an_argv_on_the_terminal_stderr_journal_and_reason(tray, user):
    tray, journal = tray
    proc = named_nvidia_imex(user)
    try:
        rc, out, err = run_hook(["health"], tray.env())
    finally:
        proc.kill()
        proc.wait()
    messages = journal.messages()
    assert SHOWN in out, out
    for text in (out, err, *messages, tray.node()["Reason"] or ""):
        assert raw_controls(text) == [], text
    if user:        # a note, no drain (F4-3)
        assert rc == EXIT_OK, (out, err)
        assert f"note: a process of uid {user} named like an IMEX daemon is not a second " \
               f"owner (not root's; left alone): pid {proc.pid}: nvidia-imex -c {SLEEP} " \
               f"{SHOWN}" in out
        assert "DRAIN" not in tray.node()["State"]
        assert any(m.startswith("imexctl[tray01]: health check passed") and SHOWN in m
                   for m in messages), messages
    else:
        assert rc == EXIT_NODE_FAULT, (out, err)
        assert f"FAIL foreign-imex: a second owner of IMEX runs here: " in out
        assert f"pid {proc.pid}: nvidia-imex -c {SLEEP} {SHOWN[:30]}" in tray.node()["Reason"]
        assert any(line.startswith("imexctl[tray01]: health check failed") and SHOWN in line
                   for line in err.splitlines()), err
        assert any(m.startswith("imexctl[tray01]: health check failed") and SHOWN in m
                   for m in messages), messages


@pytest.mark.parametrize("text, shown", [
    ("plain text, ünïcode", "plain text, ünïcode"),
    ("a\nb\tc\r\u2028d", "a b c  d"),
    ("\x1b[2J\x07\x00\x7f\x9b", "\\x1b[2J\\x07\\x00\\x7f\\x9b"),
    ("\u202e\u200b\ufeff\U000e0041", "\\u202e\\u200b\\ufeff\\U000e0041"),
])
def _test_printable_escapes_what_a_terminal_acts_on(text, shown):
    assert printable(text) == shown
