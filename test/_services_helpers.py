"""Services for ``test_services.py``: Ray actors import them from here by module name."""

from __future__ import annotations


class Accumulator:
    """A plain service: adds values to a total."""

    def __init__(self, start: int = 0) -> None:
        self.total = start
        self.stopped = False

    def add(self, value: int) -> int:
        self.total += value
        return self.total

    def shutdown(self) -> None:
        self.stopped = True


class OwnedServer:
    """A running Service with a restricted client."""

    def __init__(self) -> None:
        self.alive = False

    def start(self) -> OwnedServer:
        self.alive = True
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        self.alive = False

    def client(self) -> tuple[str, int]:
        return ("server-client", 7)

    @property
    def is_alive(self) -> bool:
        return self.alive
