"""A real `mlflow server` for tests: 127.0.0.1, a free port, sqlite backend and artifacts in a temp dir.

Started in its own session (setsid) and stopped by process group, so no
worker outlives the fixture (see /work/shared/notes/real-servers.md).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MlflowServer:
    root: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> MlflowServer:
        exe = shutil.which("mlflow")
        if not exe:
            raise RuntimeError("mlflow executable not found (pip install mlflow==3.17.2)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()  # a restart keeps its port
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        env.pop("MLFLOW_TRACKING_URI", None)
        self.log = (self.root / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [exe, "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"],
            cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}: "
                                   f"{(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy on {self.uri} after {timeout}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group: gunicorn/uvicorn workers too
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)
        self.log.close()
        self.proc = None
