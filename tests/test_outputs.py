"""No data is lost by any file headroom writes: a write that fails midway leaves the earlier file."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main
from core.files import replace_whole
from forecast.synthetic import synthetic_demand, write_csv


@pytest.fixture(scope="module")
def demand(tmp_path_factory):
    path = tmp_path_factory.mktemp("d") / "demand.csv"
    write_csv(synthetic_demand(days=6, step="10min"), path)
    return path


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                    "metadata": {"name": "chat"}, "spec": {
                                        "query": "up", "capacity": {"demandPerGpu": 10},
                                        "target": {"kind": "Deployment", "name": "chat"}}}))
    return path


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """run keeps its MLflow store and forecast log in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def exits(argv, capsys):
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# ---------------------------------------------------------------------------- the writers' helpers
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.binary(max_size=2000), new=st.binary(max_size=2000), fail_after=st.none() | st.integers(0, 2000))
def test_a_whole_file_or_the_earlier_one(tmp_path, old, new, fail_after):
    """Whatever is written reads back identical; a write that fails midway (a full disk, a signal's exception)
    leaves the earlier file as it was and nothing beside it."""
    folder = tmp_path / f"f{len(os.listdir(tmp_path))}"
    folder.mkdir()
    path = folder / "out.csv"
    path.write_bytes(old)

    def write(draft: Path) -> None:
        with draft.open("wb") as handle:
            handle.write(new[:fail_after])
            if fail_after is not None:
                raise OSError(errno.ENOSPC, "No space left on device")

    if fail_after is None:
        assert replace_whole(path, write) == path
        assert path.read_bytes() == new
    else:
        with pytest.raises(OSError):
            replace_whole(path, write)
        assert path.read_bytes() == old
    assert os.listdir(folder) == ["out.csv"]


def test_a_symlinked_output_stays_a_link_and_its_file_keeps_its_permissions(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    replace_whole(link, lambda draft: draft.write_text("new\n"))
    assert link.is_symlink() and real.read_text() == "new\n"
    assert real.stat().st_mode & 0o777 == 0o640


# ---------------------------------------------------------------------------- a write that fails midway
@pytest.mark.parametrize("argv, written", [
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{policy}", "--timeline", "{out}/t.csv"], "t.csv"),
    (["report", "{demand}", "--days", "1", "--policy-file", "{policy}", "--out", "{out}"], "index.html"),
    (["tune", "{demand}", "--days", "1", "--plot", "{out}/t.png"], "t.png"),
], ids=["simulate-timeline", "report-page", "tune-plot"])
def test_a_full_disk_leaves_the_earlier_output(demand, policy, tmp_path, capsys, monkeypatch, argv, written):
    """Each writer goes through the whole-or-nothing write: a disk that fills as a file is flushed leaves the earlier
    run's file, not a truncated one, and no draft beside it."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(demand=demand, policy=policy, out=out) for a in argv]
    assert exits(argv, capsys)[0] in (0, 1)
    before = listing(out)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    status, err = exits(argv, capsys)
    assert status == 1 and "No space left on device" in err, err
    assert written in before and listing(out) == before
