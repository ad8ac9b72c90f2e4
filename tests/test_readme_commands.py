"""The README's shell blocks, run as written: a new user copies them, so each command must run and say what the
README says it does. The set-up block (`pip install`, `bash tests/run.sh`) is the suite's own way in and is left out;
the README's placeholders (DEMAND, `<simulate.csv's first timestamp>`) are filled in here as a user would."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from cli.main import main
from forecast.synthetic import synthetic_demand, write_csv

README = Path(__file__).resolve().parents[1] / "README.md"
FIRST_TIMESTAMP = "<simulate.csv's first timestamp>"


def runnable_blocks(markdown: str) -> list[list[str]]:
    """Each ```bash block's commands (comments and blank lines dropped), but the set-up block's."""
    blocks = re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.S | re.M)
    commands = [[line.split("  #")[0].strip() for line in block.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")] for block in blocks]
    return [block for block in commands if not any(line.startswith(("pip ", "bash ")) for line in block)]


def run_line(line: str, demand: Path) -> None:
    line = line.replace("DEMAND", str(demand))
    if FIRST_TIMESTAMP in line:
        line = line.replace(FIRST_TIMESTAMP, pd.read_csv("simulate.csv")["timestamp"].iloc[0])
    assert "<" not in line, f"a placeholder this test cannot fill: {line}"
    words = shlex.split(line)
    if words[0] == "headroom":
        assert main(words[1:]) == 0, line
    elif words[0] == "cmp":
        assert Path(words[1]).read_bytes() == Path(words[2]).read_bytes(), line
    else:
        pytest.fail(f"a command this test does not run: {line}")


def test_the_readme_has_a_runnable_block():
    blocks = runnable_blocks(README.read_text(encoding="utf-8"))
    assert any(line.startswith("headroom tune DEMAND") for block in blocks for line in block)


def test_every_readme_block_runs_as_written(tmp_path, monkeypatch):
    """What-if to cluster: tune writes a policy, simulate and the embedded run replay it, and cmp finds the two
    timelines identical."""
    monkeypatch.chdir(tmp_path)  # the embedded run keeps its MLflow store and forecast log in the working directory
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    demand = tmp_path / "demand_5min.csv"
    write_csv(synthetic_demand(days=8), demand)  # over the week simulate.days asks; tune replays its last 4 days
    for block in runnable_blocks(README.read_text(encoding="utf-8")):
        for line in block:
            run_line(line, demand)
    assert Path("policy.yaml").is_file() and len(pd.read_csv("run.csv")) > 1


def test_a_block_with_a_failing_command_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.csv").write_text("x\n")
    (tmp_path / "b.csv").write_text("y\n")
    with pytest.raises(AssertionError, match="cmp a.csv b.csv"):
        run_line("cmp a.csv b.csv", tmp_path / "demand.csv")
    with pytest.raises(AssertionError, match="headroom forecast"):
        run_line("headroom forecast DEMAND", tmp_path / "missing.csv")
