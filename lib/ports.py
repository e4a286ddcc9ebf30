"""A free TCP port on loopback, for the servers the tests, the benchmarks and `jobs.serve`'s
helpers start. The port is free when asked: a server that loses it to another process before
binding it must be started again on another (tests/prometheus_servers.py does)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
