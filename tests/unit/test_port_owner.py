"""A per-job port held by a non-root process is the job's problem, not the tray's (audit
2026-11b F3-6): the prolog refuses the job naming port, pid and uid; a root or unknown
holder still drains. Real listening sockets, opened by forked children that drop to uid
65534 (or stay root)."""

from __future__ import annotations

import os
import socket

import pytest

from imexctl.errors import JobFault, NodeFault
from imexctl.tray.ports import check_ports_free
from tests.support.ports import free_job_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setuid to another user needs root")
NOBODY = 65534


class Listening:
    """A forked child listening on 127.0.0.1:``port``; ``uid``: the uid it drops to
    (None: stays root); ``bind_first``: open the socket as root, then drop."""

    def __init__(self, port: int, uid: int | None, bind_first: bool = False):
        self.port, self.uid, self.bind_first = port, uid, bind_first

    def __enter__(self) -> "Listening":
        ready_r, ready_w = os.pipe()
        self._hold_r, self._hold_w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: never returns into pytest
            code = 1
            try:
                os.close(ready_r)
                os.close(self._hold_w)
                if self.bind_first:
                    sock = socket.socket()   # the kernel records its creator's uid
                    sock.bind(("127.0.0.1", self.port))
                    sock.listen()
                if self.uid is not None:
                    os.setgroups([])
                    os.setgid(self.uid)
                    os.setuid(self.uid)
                if not self.bind_first:
                    sock = socket.socket()
                    sock.bind(("127.0.0.1", self.port))
                    sock.listen()
                os.write(ready_w, b"y")
                os.read(self._hold_r, 1)   # until the test is done
                code = 0
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(self._hold_r)
        self.pid = pid
        got = os.read(ready_r, 1)
        os.close(ready_r)
        if got != b"y":
            os.waitpid(pid, 0)
            raise RuntimeError("the listening child failed")
        return self

    def __exit__(self, *exc) -> None:
        os.close(self._hold_w)
        os.waitpid(self.pid, 0)


def test_non_root_listener_refuses_the_job_naming_port_pid_and_uid():
    port = free_job_port()
    with Listening(port, NOBODY) as child:
        with pytest.raises(JobFault) as caught:
            check_ports_free([port], "127.0.0.1")
    text = str(caught.value)
    assert f"{port} (pid {child.pid}, uid {NOBODY})" in text, text
    assert text.startswith("per-job port held by a non-root process: ")


def test_root_listener_still_drains():
    port = free_job_port()
    with Listening(port, None) as child:
        with pytest.raises(NodeFault) as caught:
            check_ports_free([port], "127.0.0.1")
    assert not isinstance(caught.value, JobFault)
    assert str(caught.value) == f"port {port} (pid {child.pid}) already in use"


def test_socket_bound_by_root_then_handed_to_a_user_is_roots():
    """A daemon that binds as root and drops privileges is the system's: drain."""
    port = free_job_port()
    with Listening(port, NOBODY, bind_first=True):
        with pytest.raises(NodeFault) as caught:
            check_ports_free([port], "127.0.0.1")
    assert not isinstance(caught.value, JobFault)


def test_unknown_holder_still_drains(mocker):
    """No process found for the socket (another pid namespace): owner unknown."""
    from imexctl.tray import ports as mod
    mocker.patch.object(mod, "_owners", return_value={})
    port = free_job_port()
    with Listening(port, NOBODY):
        with pytest.raises(NodeFault) as caught:
            check_ports_free([port], "127.0.0.1")
    assert not isinstance(caught.value, JobFault)
    assert str(caught.value) == f"port {port} (pid ?) already in use"


def test_one_root_port_among_user_ports_drains():
    first = free_job_port()
    second = free_job_port()
    if second == first:
        pytest.skip("no second free port")
    with Listening(first, NOBODY), Listening(second, None):
        with pytest.raises(NodeFault) as caught:
            check_ports_free([first, second], "127.0.0.1")
    assert not isinstance(caught.value, JobFault)


def test_user_listener_on_another_address_does_not_count():
    port = free_job_port()
    with Listening(port, NOBODY):
        check_ports_free([port], "127.0.0.2")   # a different tray's loopback address


def test_holders_report_the_socket_and_process_owner():
    from imexctl.tray.ports import Holder, holders, process_uids
    port = free_job_port()
    with Listening(port, NOBODY) as child:
        assert holders([port]) == {port: Holder(child.pid, NOBODY)}
        assert process_uids(child.pid) == (NOBODY,) * 4
    with Listening(port, None) as child:
        assert holders([port]) == {port: Holder(child.pid, 0)}
    assert holders([port]) == {}


def test_listeners_carry_the_socket_uid_from_both_sources():
    from imexctl.tray.ports import diag_listeners, proc_listeners
    port = free_job_port()
    with Listening(port, NOBODY):
        diag = [s.uid for s in diag_listeners() if s.port == port]
        table = [s.uid for s in proc_listeners() if s.port == port]
    assert diag == table == [NOBODY]
