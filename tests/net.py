"""Free TCP ports on 127.0.0.1 for servers that tests and benchmarks start (no pytest, no side effects on import)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that were free a moment ago: all are bound at once, so none is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
