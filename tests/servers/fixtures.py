"""Session-scoped pytest fixtures for the real servers.

Enable with `pytest_plugins = ["tests.servers.fixtures"]` in tests/conftest.py.
Missing binaries skip the test with the install command -- unless CI is set,
where they fail: CI installs them (scripts/install-servers.sh) and a silent
skip there would hide a broken install.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from . import INSTALL_HINT, ROOT, unavailable
from . import kube as kube_servers
from . import prometheus as prom_servers

NASA_TRACE = ROOT.parent / "shared" / "data" / "traces" / "nasa_http_1995_5min.csv"


def _missing(what: str, names: list[str]) -> None:
    unavailable(f"{what}: {', '.join(names)} not installed ({INSTALL_HINT})")


@pytest.fixture(scope="session")
def nasa_trace() -> tuple[Path, pd.Series]:
    """The real NASA HTTP 1995 trace at 5 min (blank value = gap), as the CSV loader reads it."""
    if not NASA_TRACE.is_file():
        pytest.skip(f"real trace not found at {NASA_TRACE} (../shared/data beside the repo)")
    from forecast.history import load_history
    return NASA_TRACE, load_history(NASA_TRACE)


@pytest.fixture(scope="session")
def prometheus_blocks(tmp_path_factory, nasa_trace) -> Path:
    """TSDB blocks backfilled from the NASA trace (a read-only template: copy before serving)."""
    missing = [n for n, p in prom_servers.binaries().items() if not p]
    if missing:
        _missing("Prometheus", missing)
    work = tmp_path_factory.mktemp("prom-backfill")
    text = work / "demand.om"
    prom_servers.write_openmetrics(nasa_trace[1], text)
    blocks = work / "blocks"
    prom_servers.backfill(text, blocks)
    return blocks


@pytest.fixture(scope="session")
def prometheus_server(prometheus_blocks, tmp_path_factory):
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path_factory.mktemp("prom"))
    yield server
    server.stop()


@pytest.fixture
def private_prometheus(prometheus_blocks, tmp_path):
    """A Prometheus of the test's own, for tests that stop or freeze it."""
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory):
    """etcd + kube-apiserver 1.20, RBAC on; `.apiserver.token` is a system:masters token."""
    missing = [n for n, p in kube_servers.binaries().items() if not p]
    if missing:
        _missing("Kubernetes API server", missing)
    servers = kube_servers.start_kube(tmp_path_factory.mktemp("kube"))
    yield servers
    servers.stop(remove=False)  # tmp_path_factory cleans up; logs stay for a failed run


@pytest.fixture(scope="session")
def crd_dir() -> Path:
    """headroom's own CRD (deploy/crds)."""
    return ROOT / "deploy" / "crds"


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd_documents(crd_dir: Path) -> list[dict]:
    import yaml

    docs = []
    for path in sorted(crd_dir.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture(scope="session")
def kueue_crds() -> list[dict]:
    """Kueue v0.19.2's genuine CRDs (../shared/kueue/crds; the Workload CRD transformed for the 1.20 server,
    see tests/servers/kube.py: for_apiserver_1_20)."""
    if not kube_servers.KUEUE_CRDS.is_dir():
        pytest.skip(f"Kueue's CRDs not found at {kube_servers.KUEUE_CRDS} (../shared/kueue beside the repo)")
    return kube_servers.kueue_crd_documents()


def _established(kube, names: list[str], timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            # a CRD just created may have "conditions": null until the server has looked at it
            conditions = (kube.get(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conditions}"
            time.sleep(0.2)


@pytest.fixture(scope="session")
def kube_admin(kube_server, crd_dir, kueue_crds):
    """A system:masters KubeCluster on the real API server, with headroom's CRD (server-side applied) and
    Kueue's genuine CRDs (created as `kubectl create --validate=false` does: the 1.20 server refuses a
    server-side apply of them) established."""
    from adapters.kube import KubeCluster
    from core.errors import Conflict

    kube = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=30)
    for crd in crd_documents(crd_dir):
        kube.apply(f"{CRD_PATH}/{crd['metadata']['name']}", crd)
    for crd in kueue_crds:
        try:
            kube.create(CRD_PATH, crd)
        except Conflict:  # already there (a restarted session on the same server)
            pass
    _established(kube, [c["metadata"]["name"] for c in crd_documents(crd_dir) + kueue_crds])
    kube.request_timeout = 5
    yield kube
    kube.close()
