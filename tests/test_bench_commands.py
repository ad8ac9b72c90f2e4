"""The benchmark scripts as commands: `--help` says what one does and writes without running it, and an unknown
flag is refused (exit 2) before any work."""
from __future__ import annotations

import pytest

from tests.conftest import ROOT, bench_module

COMMANDS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_the_benchmark_commands_are_found():
    assert "interval_peers" in COMMANDS and "simulate_bench" in COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_a_benchmark_command_s_help_runs_nothing_and_an_unknown_flag_is_refused(name, capsys):
    """`python bench/interval_peers.py --help` ran the benchmark (it had no parser), rewriting
    docs/bench-interval-peers.md and bench/results/interval_peers.json."""
    written = {p: p.stat().st_mtime_ns for p in [*(ROOT / "bench" / "results").iterdir(), *(ROOT / "docs").iterdir()]}
    main = bench_module(name).main
    with pytest.raises(SystemExit) as help_:
        main(["--help"])
    assert help_.value.code == 0 and capsys.readouterr().out.startswith("usage: ")
    with pytest.raises(SystemExit) as refused:
        main(["--no-such-flag"])
    assert refused.value.code == 2 and "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in written} == written
