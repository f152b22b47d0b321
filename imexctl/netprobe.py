"""Which TCP ports have a listening socket here, and whose (one function, so the prolog's
and epilog's port checks can be pointed at another probe without touching the steps)."""

from __future__ import annotations


def listeners(ports: list[int]) -> dict[int, int | None]:
    """port -> pid of a LISTEN socket on one of ``ports`` (pid None when not visible).
    Outgoing connections that happen to use a port do not count: they do not stop the
    daemon from binding it."""
    import psutil

    found: dict[int, int | None] = {}
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return found
    for conn in conns:
        if conn.laddr and conn.laddr.port in ports and conn.status == psutil.CONN_LISTEN:
            found.setdefault(conn.laddr.port, conn.pid)
    return found
