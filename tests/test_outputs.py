"""No data is lost by any file headroom writes: an output is never one of the command's inputs nor another of its
outputs, a folder that cannot be written is refused before any work (exit 2, naming the flag), a write that fails
midway leaves the earlier file, and `headroom run --timeline` keeps every step it finished when it is stopped."""
from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.demo import MARKER_TEXT, WRITES, check_demo_folder
from cli.main import build_parser, main
from cli.outputs import NamedStream
from controller.simulate import TIMELINE_COLUMNS
from core.errors import BadRequest
from core.files import append_whole, cannot_write_in, create_whole, replace_whole
from dashboards.report import PAGE_HEAD
from forecast.synthetic import synthetic_demand, write_csv
from tests.test_bad_input import _policy_file, exits

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demand(tmp_path_factory):
    path = tmp_path_factory.mktemp("d") / "demand.csv"
    write_csv(synthetic_demand(days=6, step="10min"), path)
    return path


@pytest.fixture
def policy(tmp_path):
    return _policy_file(tmp_path / "p.yaml")


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process cannot make a file in: read-only by its mode, or (as root, whom modes do not stop)
    /sys/kernel."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if cannot_write_in(folder) is None:
        folder = Path("/sys/kernel")
        if not folder.is_dir() or cannot_write_in(folder) is None:
            pytest.skip("no folder this process cannot write in")
    return folder


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """run keeps its MLflow store and forecast log in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


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


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.none() | st.binary(max_size=2000), new=st.binary(max_size=2000))
def test_a_new_file_is_made_whole_and_never_replaces_one(tmp_path, old, new):
    """create_whole (tune --write-policy): a file at the name when the draft is put in place, also one made after
    the command checked, is left as it was, with nothing beside it."""
    folder = tmp_path / f"f{len(os.listdir(tmp_path))}"
    folder.mkdir()
    path = folder / "policy.yaml"

    def write(draft: Path) -> None:
        if old is not None:  # made while the command worked, after it found no file there
            path.write_bytes(old)
        draft.write_bytes(new)

    if old is None:
        assert create_whole(path, write) == path and path.read_bytes() == new
    else:
        with pytest.raises(FileExistsError):
            create_whole(path, write)
        assert path.read_bytes() == old
    assert os.listdir(folder) == ["policy.yaml"]


def test_a_symlinked_output_stays_a_link_and_its_file_keeps_its_permissions(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    replace_whole(link, lambda draft: draft.write_text("new\n"))
    assert link.is_symlink() and real.read_text() == "new\n"
    assert real.stat().st_mode & 0o777 == 0o640


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=8), cut=st.integers(0, 299),
       fail_at=st.integers(0, 7))
def test_an_append_is_whole_or_nothing(tmp_path, monkeypatch, records, cut, fail_at):
    """A full disk midway through a step's rows leaves the file with the steps before it, not half a row."""
    path = tmp_path / f"t{len(os.listdir(tmp_path))}.csv"
    path.write_bytes(b"header\n")
    real_write = os.write
    handle = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for k, record in enumerate(records):
            if k == fail_at:
                def partial(fd, data, limit=cut % len(record)):  # a part reaches the file, then the disk is full
                    if limit:
                        real_write(fd, bytes(data[:limit]))
                    raise OSError(errno.ENOSPC, "No space left on device")

                monkeypatch.setattr(os, "write", partial)
                with pytest.raises(OSError):
                    append_whole(handle, record)
                monkeypatch.setattr(os, "write", real_write)
                break
            append_whole(handle, record)
    finally:
        os.close(handle)
    assert path.read_bytes() == b"header\n" + b"".join(records[:fail_at])


# ---------------------------------------------------------------------------- never an input, never another output
@pytest.mark.parametrize("how", ["symlink", "hard link", "dot-dot path"])
def test_an_output_that_is_the_commands_demand_by_another_name_is_refused(demand, tmp_path, capsys, how):
    other = tmp_path / "other.csv"
    if how == "symlink":
        other.symlink_to(demand)
    elif how == "hard link":
        os.link(demand, other)
    else:
        other = demand.parent / ".." / demand.parent.name / demand.name
    before = demand.read_bytes()
    status, err = exits(["simulate", demand, "--days", "1", "--timeline", other], capsys)
    assert status == 2 and f"--timeline {other} is the file DEMAND" in err, err
    assert demand.read_bytes() == before


def test_an_output_that_is_the_config_or_the_policy_is_refused(demand, policy, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("simulate:\n  gpus: 64\n")
    status, err = exits(["simulate", demand, "--days", "1", "--config", config, "--timeline", config], capsys)
    assert status == 2 and "is the file --config names" in err, err
    status, err = exits(["run", "--policy-file", policy, "--history", demand, "--hours", "1", "--timeline", policy],
                        capsys)
    assert status == 2 and "is the file --policy-file names" in err, err
    assert config.read_text() == "simulate:\n  gpus: 64\n" and "ReservationPolicy" in policy.read_text()


def test_tune_refuses_one_file_for_its_plot_and_its_policy(demand, tmp_path, capsys):
    """The plot was written, then replaced by the manifest: the plot lost, exit 0."""
    both = tmp_path / "out.png"
    status, err = exits(["tune", demand, "--days", "1", "--plot", both, "--write-policy", both], capsys)
    assert status == 2 and f"--write-policy {both} is the file --plot names" in err, err
    assert not both.exists()


@pytest.mark.parametrize("name", ["plot.csv", "plot", "plot.svg"])
def test_tune_refuses_a_plot_that_is_not_named_png_before_any_work(demand, tmp_path, capsys, name):
    """A name matplotlib has no format for (plot.csv, or none: the draft's .part) was a traceback after the whole
    sweep, exit 1; plot.svg wrote an SVG that the next run refused to replace as not a PNG headroom wrote."""
    plot = tmp_path / name
    status, err = exits(["tune", demand, "--days", "1", "--plot", plot], capsys)
    assert status == 2 and f"--plot {plot}: the plot is a PNG; name a .png file" in err, err
    assert "Traceback" not in err and not plot.exists() and "[tune" not in err  # refused before the sweep


def test_report_refuses_a_timeline_that_is_one_of_its_pages(demand, tmp_path, capsys):
    """The timeline replaced the report's index.html, which the command then named as the report, exit 0."""
    out = tmp_path / "r"
    out.mkdir()
    status, err = exits(["report", demand, "--days", "1", "--out", out, "--timeline", out / "index.html"], capsys)
    assert status == 2 and f"--out {out}: its index.html is the file --timeline names" in err, err
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("name", ["index.html", "demand.png"])
def test_report_refuses_a_folder_whose_page_or_plot_it_did_not_write(demand, tmp_path, capsys, name):
    """`report --out ~/public_html` replaced the SRE's own index.html (or a demand.png of theirs) with its page,
    exit 0; a page and plots an earlier report wrote are replaced, as a re-run does."""
    out = tmp_path / "site"
    out.mkdir()
    (out / name).write_text("<html>my own page</html>")
    status, err = exits(["report", demand, "--days", "1", "--out", out], capsys)
    assert status == 2 and (f"--out {out}: its {name}: the file exists and is not a "
                            f"{'report page' if name == 'index.html' else 'PNG plot'} headroom wrote") in err, err
    assert "name a new folder" in err and "[report" not in err  # refused before any work
    assert listing(out) == {name: b"<html>my own page</html>"}
    if name != "index.html":
        return
    (out / name).unlink()
    assert main(["report", str(demand), "--days", "1", "--out", str(out)]) == 0
    first = listing(out)
    assert main(["report", str(demand), "--days", "1", "--out", str(out), "--policy", "static"]) == 0
    assert listing(out).keys() == first.keys() and listing(out)["index.html"] != first["index.html"]


def test_demo_refuses_a_folder_of_someone_elses_files(tmp_path, capsys):
    """The demo wrote its policy.yaml, history and MLflow store among them (an SRE's policy.yaml replaced)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "policy.yaml").write_text("my manifest\n")
    (mine / "notes.txt").write_text("my notes\n")
    before = listing(mine)
    status, err = exits(["demo", "--quick", "--out", mine], capsys)
    assert status == 2 and f"--out {mine}: the folder holds files the demo did not write (notes.txt)" in err, err
    assert listing(mine) == before
    config = tmp_path / "cfg" / "policy.yaml"  # a configuration that happens to bear the demo's policy's name
    config.parent.mkdir()
    config.write_text("simulate:\n  gpus: 64\n")
    status, err = exits(["demo", "--quick", "--out", config.parent, "--config", config], capsys)
    assert status == 2 and "its policy.yaml is the file --config names" in err, err
    assert config.read_text() == "simulate:\n  gpus: 64\n"


@pytest.mark.parametrize("name", ["policy.yaml", "report/index.html", ".headroom-demo"])
def test_demo_refuses_a_folder_holding_a_file_of_its_names_it_did_not_write(tmp_path, capsys, name):
    """A folder holding only the SRE's own policy.yaml (or report/index.html) passed for an earlier demo's: the
    demo replaced it, exit 0. A .headroom-demo the demo did not write is no mark of its folder either."""
    mine = tmp_path / "mine"
    (mine / name).parent.mkdir(parents=True, exist_ok=True)
    (mine / name).write_text("my own\n")
    status, err = exits(["demo", "--quick", "--out", mine], capsys)
    folder, file = (mine / name).parent, (mine / name).name
    assert status == 2 and f"--out {folder}: its {file}: the file exists and is not a" in err, err
    assert "[demo" not in err and (mine / name).read_text() == "my own\n"  # refused before any work


@pytest.mark.parametrize("name", ["demand_5min.csv", "mlflow.db"])
def test_demo_refuses_a_folder_holding_a_history_or_store_without_its_policy(tmp_path, capsys, name):
    """A folder holding only the SRE's own demand_5min.csv (or mlflow.db) passed for an earlier demo's: the demo
    replaced the history with its synthetic one (or wrote its runs into the store), exit 0. A history begins as any
    history does: only the demo's policy beside it says the folder is the demo's."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / name).write_text("timestamp,value\n2026-01-01T00:00:00Z,1\n")
    before = listing(mine)
    status, err = exits(["demo", "--quick", "--out", mine], capsys)
    assert status == 2 and f"--out {mine}: the folder holds {name} but no policy.yaml the demo wrote" in err, err
    assert "[demo" not in err and listing(mine) == before  # refused before any work


def test_a_demo_cut_off_midway_takes_its_own_folder_again(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a demo after it wrote its history and MLflow store, before its policy.yaml, left a folder the next
    `headroom demo --out` there refused as maybe the user's data ("holds demand_5min.csv and mlflow.db but no
    policy.yaml the demo wrote"), exit 2, until the user removed it. The demo marks its folder as its own before any
    other file (.headroom-demo): the rerun takes it and runs to the end. Without the marker such files stay refused
    (test_demo_refuses_a_folder_holding_a_history_or_store_without_its_policy)."""
    from controller.forecasts import Models

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C once the champion is trained: the history and the store are written

    out = tmp_path / "demo"
    with monkeypatch.context() as patch:
        patch.setattr(Models, "for_series", interrupted)
        status, err = exits(["demo", "--quick", "--out", out], capsys)
    assert status == 130 and "headroom: interrupted" in err, err
    left = {p.name for p in out.iterdir()}
    assert {"demand_5min.csv", "mlflow.db", ".headroom-demo"} <= left and "policy.yaml" not in left
    status, err = exits(["demo", "--quick", "--out", out], capsys)
    assert status == 0 and "report written" in err, err
    assert (out / "policy.yaml").read_text().startswith("# headroom demo:")


def test_a_demo_killed_outright_leaves_drafts_and_a_journal_its_folder_still_takes(tmp_path):
    """SIGKILL midway leaves a draft of a file the demo was writing (core.files: `.demand_5min.csv.<hex>.part.csv`)
    and maybe the sqlite store's journal beside its files; the next demo refused its own folder ("holds files the
    demo did not write"). With its marker there they are the demo's; without it, or with a name that is no draft of
    the demo's files, the folder is still someone's."""
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / ".headroom-demo").write_text(MARKER_TEXT)
    for name in ("demand_5min.csv", "mlflow.db", ".demand_5min.csv.1a2b3c4d.part.csv",
                 ".policy.yaml.00ff00ff.part.yaml", "mlflow.db-journal"):
        (folder / name).write_text("")
    assert check_demo_folder(str(folder), []) == folder.resolve()
    for stranger in (".demand_5min.csv.notahex!.part.csv", ".notes.txt.1a2b3c4d.part.txt", "mlflow.db-backup"):
        (folder / stranger).write_text("")
        with pytest.raises(BadRequest, match="files the demo did not write"):
            check_demo_folder(str(folder), [])
        (folder / stranger).unlink()
    (folder / ".headroom-demo").unlink()
    with pytest.raises(BadRequest, match="files the demo did not write"):
        check_demo_folder(str(folder), [])


def test_demo_takes_a_new_an_empty_or_an_earlier_demos_folder(tmp_path):
    assert check_demo_folder(str(tmp_path / "new" / "demo"), []).is_dir()
    assert check_demo_folder(str(tmp_path / "new" / "demo"), []).is_dir()  # now empty
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in WRITES:
        (earlier / name).write_text({"policy.yaml": "# headroom demo: an earlier demo's policy\n",
                                     ".headroom-demo": MARKER_TEXT}.get(name, ""))
    (earlier / "report").unlink()
    (earlier / "report").mkdir()  # the earlier demo's report folder, its page and plots
    (earlier / "report" / "index.html").write_text(PAGE_HEAD + "demo</title>")
    (earlier / "report" / "demand.png").write_bytes(b"\x89PNG\r\n")
    assert check_demo_folder(str(earlier), []) == earlier.resolve()
    with pytest.raises(BadRequest, match="is the file --config names"):
        check_demo_folder(str(earlier), [(earlier / "policy.yaml", "--config")])


@pytest.mark.parametrize("argv, flag", [
    (["report", "{demand}", "--days", "1", "--policy-file", "{policy}", "--out", ""], "--out"),
    (["demo", "--quick", "--out", ""], "--out"),
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{policy}", "--timeline", ""], "--timeline"),
    (["plan", "--policy-file", "", "--history", "{demand}"], "--policy-file"),
    (["plan", "--policy-file", "{policy}", "--history", ""], "--history"),
    (["run", "--policy-file", "{policy}", "--history", "", "--hours", "1"], "--history"),
], ids=["report-out", "demo-out", "simulate-timeline", "plan-policy-file", "plan-history", "run-history"])
def test_an_empty_path_is_refused_naming_its_flag(demand, policy, tmp_path, capsys, argv, flag):
    """README: an empty path is an error. report --out '' wrote its page among the working directory's files, exit 0;
    plan --policy-file '' said "invalid configuration (): cannot read file: Is a directory"; plan --history '' said
    "--policy-file needs --history DEMAND", of a flag the user had given."""
    before = set(tmp_path.iterdir())
    status, err = exits([a.format(demand=demand, policy=policy) for a in argv], capsys)
    assert status == 2 and f"{flag}: an empty path" in err, err
    assert set(tmp_path.iterdir()) == before


def test_a_file_flag_reads_a_tilde_as_the_home_directory(demand, tmp_path, monkeypatch, capsys):
    """README: `~` is the home directory in a flag as in the configuration, and no shell expands `--flag=~/f`. run's
    and plan's --history and --policy-file, and every output flag, read it as a folder named `~`: `plan
    --history=~/demand.csv` said "--history ~/demand.csv: no such file", `simulate --timeline=~/t.csv` "the folder
    .../~ does not exist" (and wrote there had the working directory held one)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / "demand.csv").write_bytes(demand.read_bytes())
    _policy_file(home / "p.yaml")
    for argv in (["plan", "--policy-file=~/p.yaml", "--history=~/demand.csv"],
                 ["run", "--policy-file=~/p.yaml", "--history=~/demand.csv", "--hours", "1", "--timeline=~/run.csv"],
                 ["simulate", "~/demand.csv", "--days", "1", "--policy-file=~/p.yaml", "--timeline=~/simulate.csv"],
                 ["report", "~/demand.csv", "--days", "1", "--policy-file=~/p.yaml", "--out=~/report"]):
        status, err = exits(argv, capsys)
        assert status == 0, (argv, err)
    assert {"run.csv", "simulate.csv"} <= set(listing(home)) and (home / "report" / "index.html").is_file()
    assert not (tmp_path / "~").exists()
    parser = build_parser()
    for argv, dest in ((["tune", "d.csv", "--write-policy=~/w.yaml"], "write_policy"),
                       (["tune", "d.csv", "--plot=~/w.png"], "plot"), (["demo", "--out=~/demo"], "out"),
                       (["train", "--history=~/demand.csv"], "history")):
        assert Path(getattr(parser.parse_args(argv), dest)).parent == home, argv
    status, err = exits(["simulate", "~/demand.csv", "--timeline", "~nobody-here/t.csv"], capsys)
    assert status == 2 and "argument --timeline: ~nobody-here/t.csv: ~nobody-here is no user's home" in err, err


def test_an_output_under_a_file_says_it_is_a_file(demand, policy, tmp_path, capsys):
    """--timeline notes.txt/t.csv said "the folder .../notes.txt does not exist" of a file that does."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", policy, "--timeline",
                         notes / "t.csv"], capsys)
    assert status == 2 and f"--timeline {notes / 't.csv'}: {notes} is a file, not a folder" in err, err
    assert notes.read_text() == "mine"


# ---------------------------------------------------------------------------- folders that cannot be written
@pytest.mark.parametrize("argv, flag", [
    (["simulate", "{demand}", "--days", "1", "--timeline", "{ro}/t.csv"], "--timeline"),
    (["report", "{demand}", "--days", "1", "--timeline", "{ro}/t.csv"], "--timeline"),
    (["report", "{demand}", "--days", "1", "--out", "{ro}"], "--out"),
    (["tune", "{demand}", "--days", "1", "--plot", "{ro}/t.png"], "--plot"),
    (["tune", "{demand}", "--days", "1", "--write-policy", "{ro}/p.yaml"], "--write-policy"),
    (["run", "--policy-file", "{policy}", "--history", "{demand}", "--hours", "1", "--timeline", "{ro}/t.csv"],
     "--timeline"),
], ids=["simulate-timeline", "report-timeline", "report-out", "tune-plot", "tune-write-policy", "run-timeline"])
def test_a_folder_that_cannot_be_written_is_refused_before_any_work(demand, policy, unwritable, capsys, monkeypatch,
                                                                    argv, flag):
    """simulate, tune and run did all their work first, then failed with a bare '[Errno 13] Permission denied',
    exit 1."""
    import cli.run
    import controller.simulate
    import controller.tune

    def work(*_, **__):
        raise AssertionError("the work started before the output's folder was checked")

    for module, name in ((controller.simulate, "simulate"), (controller.tune, "tune"), (cli.run, "build")):
        monkeypatch.setattr(module, name, work)
    status, err = exits([a.format(demand=demand, policy=policy, ro=unwritable) for a in argv], capsys)
    assert status == 2 and f"headroom: error: {flag} {unwritable}" in err and "cannot write in the folder" in err, err


# ---------------------------------------------------------------------------- a write that fails midway
@pytest.mark.parametrize("argv, written, named", [
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{policy}", "--timeline", "{out}/t.csv"], "t.csv",
     "--timeline {out}/t.csv"),
    (["report", "{demand}", "--days", "1", "--policy-file", "{policy}", "--out", "{out}"], "index.html", "--out {out}"),
    (["tune", "{demand}", "--days", "1", "--plot", "{out}/t.png"], "t.png", "--plot {out}/t.png"),
    (["run", "--policy-file", "{policy}", "--history", "{demand}", "--hours", "1", "--timeline", "{out}/t.csv"],
     "t.csv", "--timeline {out}/t.csv"),
], ids=["simulate-timeline", "report-page", "tune-plot", "run-timeline"])
def test_a_full_disk_leaves_the_earlier_output(demand, policy, tmp_path, capsys, monkeypatch, argv, written, named):
    """Each writer goes through the whole-or-nothing write: a disk that fills as a file is flushed leaves the earlier
    run's file, not a truncated one, and no draft beside it; the error names the flag and the file (it said a bare
    '[Errno 28] No space left on device')."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(demand=demand, policy=policy, out=out) for a in argv]
    assert exits(argv, capsys)[0] in (0, 1)
    before = listing(out)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    status, err = exits(argv, capsys)
    assert status == 1 and f"headroom: error: {named.format(out=out)}: cannot write it: No space left on device" \
        in err, err
    assert written in before and listing(out) == before


def test_a_full_disk_under_write_policy_names_it_and_leaves_no_file(demand, tmp_path, capsys, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    status, err = exits(["tune", demand, "--days", "1", "--write-policy", tmp_path / "p.yaml"], capsys)
    assert status == 1 and f"--write-policy {tmp_path / 'p.yaml'}: cannot write it: No space left" in err, err
    assert not any(p.name.endswith(".yaml") for p in tmp_path.iterdir()), os.listdir(tmp_path)


def test_an_output_that_is_a_device_or_a_pipe_is_refused_and_left_as_it_is(demand, tmp_path, capsys):
    """report's index.html linked to /dev/full was replaced by the page (as root, the device node itself); a
    --timeline that is a pipe hung, reading it to tell whether it was a timeline."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").symlink_to(fifo)
    for argv, said in ((["report", demand, "--days", "1", "--out", out], f"--out {out}: its index.html: is not a "
                                                                          "regular file"),
                       (["simulate", demand, "--days", "1", "--timeline", fifo], f"--timeline {fifo}: is not a "
                                                                                 "regular file")):
        status, err = exits(argv, capsys)
        assert status == 2 and said in err, err
        assert fifo.is_fifo()
    with pytest.raises(OSError, match="not a regular file"):
        replace_whole(out / "index.html", lambda draft: draft.write_text("page"))
    assert fifo.is_fifo() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ---------------------------------------------------------------------------- stdout: a reader gone, a full disk
@pytest.mark.parametrize("argv", [
    ["simulate", "{demand}", "--days", "1", "--policy", "oracle", "--timeline", "{tmp}/t.csv"],
    ["simulate", "{demand}", "--days", "1", "--policy", "oracle", "--json"],
    ["forecast", "{demand}", "--csv"],
    ["run", "--policy-file", "{policy}", "--history", "{demand}", "--hours", "3", "--timeline", "{tmp}/t.csv"],
], ids=["simulate-timeline", "simulate-json", "forecast-csv", "run-timeline"])
def test_a_reader_gone_ends_the_command_quietly_with_its_files_whole(demand, policy, tmp_path, argv):
    """`headroom ... | head -1` ended 'headroom: error: [Errno 32] Broken pipe', exit 1: now quietly, exit 141 (as a
    shell reports a command SIGPIPE ended), and a timeline written by then is whole."""
    argv = [a.format(demand=demand, policy=policy, tmp=tmp_path) for a in argv]
    run = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.stdout is not None
    run.stdout.close()  # the reader is gone before the first line
    err = run.communicate(timeout=300)[1].decode()
    assert run.returncode == 141 and "Traceback" not in err and "Broken pipe" not in err and "error" not in err, err
    timeline = tmp_path / "t.csv"
    if timeline.exists():
        _timeline_steps(timeline)
    assert [p.name for p in tmp_path.iterdir() if ".part" in p.name] == []


class _Recorded(io.StringIO):
    """A stream that is no terminal, keeping each write it was given."""

    def __init__(self):
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_an_output_that_fits_a_pipe_is_written_at_once(demand, tmp_path, monkeypatch):
    """Under PYTHONUNBUFFERED (the Dockerfile's, and many a CI's) each print was two writes, its text and then its
    newline, so `headroom simulate ... | head -1`, gone after the first, cut an output that fitted the pipe: exit 141
    (4 of 5 times) where README says 0. What a command prints is now written at once."""
    recorded = _Recorded()
    monkeypatch.setattr(sys, "stdout", recorded)
    assert main(["simulate", str(demand), "--days", "1", "--policy", "oracle"]) == 0
    assert len(recorded.writes) == 1 and recorded.writes[0].count("\n") > 5, recorded.writes
    for _ in range(3):  # as a shell's `| head -1`: the reader takes the first line and goes
        run = subprocess.Popen([sys.executable, "-m", "cli.main", "simulate", str(demand), "--days", "1", "--policy",
                                "oracle"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
        assert run.stdout is not None
        assert run.stdout.readline().startswith(b"policy")
        run.stdout.close()
        assert run.wait(timeout=300) == 0


def test_notes_on_stderr_keep_their_place_among_the_output_held():
    """stdout's writes are held until a flush; a note on stderr written after them goes after them where both are
    one terminal or file (2>&1)."""
    both = _Recorded()
    out = NamedStream(both, "stdout", collect=True)
    err = NamedStream(both, "stderr", first=out)
    print("result", file=out)
    print("note: after the result", file=err)
    print("more", file=out)
    out.flush()
    assert both.getvalue() == "result\nnote: after the result\nmore\n"


def test_stdout_on_a_full_disk_is_an_error_naming_stdout(demand, tmp_path):
    with open("/dev/full", "w") as full:
        run = subprocess.run([sys.executable, "-m", "cli.main", "simulate", str(demand), "--days", "1", "--policy",
                              "oracle", "--json"], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1 and "headroom: error: stdout: cannot write the output: No space left on device" in \
        run.stderr and "Traceback" not in run.stderr, run.stderr


# ---------------------------------------------------------------------------- run --timeline, stopped partway
def _timeline_steps(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    assert list(frame.columns) == list(TIMELINE_COLUMNS)
    assert frame.notna().all().all(), "no half rows"
    return frame


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT),
                                         (signal.SIGKILL, -signal.SIGKILL)])
def test_a_replay_stopped_partway_leaves_every_step_it_finished(demand, policy, tmp_path, sig, status):
    """run --timeline wrote the file only at the end: a replay stopped by SIGTERM or Ctrl-C (or killed) left no
    timeline at all. Now each step's rows reach the file as its reconcile ends."""
    timeline = tmp_path / "t.csv"
    run = subprocess.Popen([sys.executable, "-m", "cli.main", "run", "--policy-file", str(policy), "--history",
                            str(demand), "--hours", "130", "--timeline", str(timeline)], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (timeline.exists() and timeline.read_text().count("\n") > 20):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.stderr else ""
            time.sleep(0.2)
        run.send_signal(sig)
        err = run.communicate(timeout=60)[1]
    finally:
        run.kill()
    assert run.returncode == status, err
    assert "Traceback" not in err
    frame = _timeline_steps(timeline)
    steps = pd.DatetimeIndex(frame["timestamp"])
    assert (steps[1:] - steps[:-1] == pd.Timedelta("10min")).all(), "consecutive steps from the start"
    if sig != signal.SIGKILL:
        assert f"stopped by {sig.name} after {len(frame)} of 780 steps; the timeline {timeline} holds them" in err



def test_ctrl_c_midway_leaves_the_earlier_timeline_and_no_traceback(demand, tmp_path):
    """Ctrl-C during simulate ended in a traceback; the earlier timeline is kept, whole, and exit is 130."""
    timeline = tmp_path / "t.csv"
    argv = ["simulate", str(demand), "--days", "1", "--timeline", str(timeline)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=tmp_path, env=env, check=True, capture_output=True)
    before = timeline.read_bytes()
    _interrupt_once(argv, tmp_path, "tuning")
    assert timeline.read_bytes() == before


# Run before `headroom ARGS...` in its working folder: no output takes its name there (the last step of every write,
# core.files) until Ctrl-C has landed. On a busy machine the test may see the progress line it waits for only after
# the command has finished; held so, the command is still at work when the Ctrl-C comes, wherever the work was.
HELD_UNTIL_CTRL_C = """
import os, runpy, signal, sys, time

folder, landed = os.getcwd(), []

def ctrl_c(signum, frame):
    landed.append(signum)
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as without this hook

def hold(event, args):
    if event in ("os.rename", "os.link") and not landed and os.path.dirname(os.path.abspath(args[1])) == folder:
        deadline = time.monotonic() + 600
        while not landed:  # Ctrl-C raises KeyboardInterrupt from the sleep: the output is not put in place
            if time.monotonic() > deadline:
                print(f"test: no Ctrl-C came in 600 s; {args[1]} was held", file=sys.stderr, flush=True)
                os._exit(99)
            time.sleep(0.05)

signal.signal(signal.SIGINT, ctrl_c)
sys.addaudithook(hold)
sys.argv[0] = "headroom"
runpy.run_module("cli.main", run_name="__main__", alter_sys=True)
"""


def _interrupt_once(argv: list[str], folder, under_way: str) -> None:
    """Run headroom's `argv` in `folder`, press Ctrl-C once stderr shows `under_way`: exit 130, said, no traceback."""
    run = subprocess.Popen([sys.executable, "-c", HELD_UNTIL_CTRL_C, *argv], cwd=folder,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert run.stderr is not None
        said = []
        for line in run.stderr:  # reads up to that line
            said.append(line)
            if under_way in line:
                break
        assert said and under_way in said[-1], f"the work never got under way: {''.join(said)}"
        run.send_signal(signal.SIGINT)
        err = run.communicate(timeout=600)[1]
    finally:
        run.kill()
    assert run.returncode == 130 and "headroom: interrupted" in err and "Traceback" not in err, err


def test_ctrl_c_mid_sweep_leaves_no_policy_file_and_no_traceback(demand, tmp_path):
    """tune stopped by Ctrl-C while it sweeps: exit 130, no policy file (not half of one), nothing beside it."""
    policy = tmp_path / "policy.yaml"
    argv = ["tune", str(demand), "--days", "1", "--write-policy", str(policy), "--plot", str(tmp_path / "tune.png")]
    _interrupt_once(argv, tmp_path, "utilization")  # the sweep is under way
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
