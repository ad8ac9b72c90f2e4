"""Real servers for integration tests: Prometheus, etcd + kube-apiserver on 127.0.0.1.

Each server runs in its own process group (so teardown kills everything it
spawned), on a free port, in a temp directory, and is only handed out once a
readiness probe answers. Binaries come from scripts/install-servers.sh.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HEADROOM_CACHE", Path.home() / ".cache" / "headroom"))
INSTALL_HINT = "run scripts/install-servers.sh"


class ServerError(RuntimeError):
    """A server did not start, or did not become ready in time."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def unavailable(message: str) -> NoReturn:
    """A tool the tests need is not installed: a skip saying how to install it, but a failure under CI, which
    installs every one (tests/run.sh), so that a skip there cannot hide a broken install."""
    import pytest

    if in_ci():
        pytest.fail(f"{message}; CI=true, so this is a failure, not a skip", pytrace=False)
    pytest.skip(message)


def find_binary(name: str, env_var: str | None = None, cached: Path | None = None) -> str | None:
    """An explicit env override, then the build cache, then PATH."""
    if env_var and os.environ.get(env_var):
        path = os.environ[env_var]
        return path if os.access(path, os.X_OK) else None
    if cached is not None and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which(name)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(probe: Callable[[], bool], timeout: float, what: str,
               proc: ServerProcess | None = None, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise ServerError(f"{what}: process exited with {proc.popen.returncode}; log tail:\n{proc.log_tail()}")
        try:
            if probe():
                return
        except Exception:  # not up yet
            pass
        time.sleep(interval)
    tail = proc.log_tail() if proc is not None else ""
    raise ServerError(f"{what}: not ready after {timeout:.0f} s\n{tail}")


@dataclass
class ServerProcess:
    """One child process in its own process group, logging to a file."""
    argv: list[str]
    log_path: Path
    cwd: Path | None = None
    popen: subprocess.Popen = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=self.cwd,
                                          start_new_session=True)
        finally:
            log.close()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers; always reaps."""
        if self.popen.poll() is None:
            self.signal_group(signal.SIGCONT)  # a stopped process cannot handle TERM
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(timeout)
        # Children that outlived the leader (same group) go too.
        self.signal_group(signal.SIGKILL)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
