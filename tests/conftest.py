import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

# Real Prometheus, etcd + kube-apiserver, started per session by the project's own fixtures.
pytest_plugins = ["tests.servers.fixtures"]

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real public traces beside the repo; tests that need them skip without them."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real traces not found at {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA


def bench_module(name: str) -> ModuleType:
    """A benchmark script under bench/ (not a package), imported for its functions."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
