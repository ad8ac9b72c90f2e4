from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real public traces beside the repo; tests that need them skip without them."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real traces not found at {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA
