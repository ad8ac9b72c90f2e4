import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

# A property's examples take what a loaded machine gives them: on a busy 2-core CI runner an example of
# test_history.py that takes 80 ms took 350 ms, and Hypothesis' default 200 ms deadline failed the run as "flaky"
# (and slow example generation fails its too_slow health check the same way). No property here is about time; what
# the code under test must do in time, the tests that claim it assert themselves.
settings.register_profile("headroom", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# CI runs the same examples every time (seeded from each test, with Hypothesis pinned in pyproject.toml), so a
# submission's CI answers for the code, not for the day's draw; a developer's run draws new examples, and what it
# finds becomes an @example. (A random draw in CI failed a whole submission on a test whose bound was too strict.)
settings.register_profile("ci", parent=settings.get_profile("headroom"), derandomize=True, database=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "headroom")

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
