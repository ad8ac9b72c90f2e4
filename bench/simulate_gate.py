"""The simulator's test-on units in one tally: the gate a planner or forecaster experiment is decided by.

36 units of the forecast policy, each tuned on its history alone to the default objective: the three evaluated weeks
(bench/simulate_bench.py), the synthetic kinds' seeds 2-9 (bench/simulate_kinds.py; seed 1 is the part to choose on)
and each evaluated week after only 4, 5 and 6 days of history (simulate_bench.py --short-history 4,5,6). Per unit:
utilization, shortage, short steps, whether the objective is met and each part within 1.5x its bound, training
goodput, headroom violations; then the counts a gate is written in.

    python bench/simulate_gate.py                  -> the shipped results in bench/results ->
                                                      bench/results/simulate_gate.json, docs/bench-simulate-gate.md
    python bench/simulate_gate.py --candidate DIR  -> the same for an experiment's results in DIR, written there,
                                                      with every unit whose verdict or utilization moved

An experiment's results come from a checkout of it:

    nice python bench/simulate_bench.py --out DIR
    nice python bench/simulate_bench.py --short-history 4,5,6 --out DIR
    nice python bench/simulate_kinds.py --seeds 2,3,4,5,6,7,8,9 --out DIR/simulate_kinds.json \
        --md DIR/bench-simulate-kinds.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kinds import TEST_SEEDS  # noqa: E402
from simulate_bench import within  # noqa: E402

RESULTS = REPO / "bench" / "results"
FILES = ("simulate.json", "simulate_kinds.json", "simulate_short.json")
KIND_PREFIX = {"bursts every two hours": "bursts", "level shifts": "level shifts", "one-week tokens": "tokens"}
MOVED = 0.01  # a unit whose utilization moved by more than a point is listed beside those whose verdict did


def units(folder: Path) -> dict[str, dict]:
    """Every test-on unit's forecast-policy row, by name, from the three result files in `folder`."""
    missing = [name for name in FILES if not (folder / name).exists()]
    if missing:
        raise SystemExit(f"{folder}: no {', '.join(missing)} (the module docstring says which command writes each)")
    weeks = json.loads((folder / "simulate.json").read_text())["results"]
    out = {f"{trace}/week": rows["forecast"] for trace, rows in weeks.items()}
    for kind, seeds in json.loads((folder / "simulate_kinds.json").read_text()).items():
        absent = [s for s in TEST_SEEDS if str(s) not in seeds]
        if absent:
            raise SystemExit(f"{folder / 'simulate_kinds.json'}: {kind} has no seed {absent[0]} (run --seeds 2-9)")
        out.update({f"{kind}/{s}": seeds[str(s)]["forecast"] for s in TEST_SEEDS})
    out.update({name: row for name, row in json.loads((folder / "simulate_short.json").read_text()).items()})
    return out


def group(unit: str) -> str:
    """traces, or the kind a synthetic unit belongs to (its goodput floor is counted apart)."""
    return next((short for kind, short in KIND_PREFIX.items() if unit.startswith(kind + "/")), "traces")


def tally(rows: dict[str, dict]) -> dict:
    """The counts a gate is written in."""
    groups = sorted({group(u) for u in rows})
    return {"units": len(rows),
            "met": sum(bool(r["objective_met"]) for r in rows.values()),
            "within_1.5x": sum(within(r) for r in rows.values()),
            "mean_utilization": sum(r["utilization"] for r in rows.values()) / len(rows),
            "headroom_violations": sum(int(r["headroom_violations"]) for r in rows.values()),
            "lowest_goodput": {g: min(r["training_goodput"] for u, r in rows.items() if group(u) == g)
                               for g in groups}}


def moved(shipped: dict[str, dict], candidate: dict[str, dict]) -> list[str]:
    """The units whose verdict changed or whose utilization moved by more than MOVED."""
    return [u for u in shipped if u in candidate and (
        (bool(shipped[u]["objective_met"]), within(shipped[u])) != (bool(candidate[u]["objective_met"]),
                                                                   within(candidate[u]))
        or abs(shipped[u]["utilization"] - candidate[u]["utilization"]) > MOVED)]


def _row(unit: str, r: dict) -> str:
    return (f"| {unit} | {r['utilization']:.3f} | {r['shortage_within_cluster']:.3%} | {r['short_steps']:.2%} | "
            f"{'met' if r['objective_met'] else 'missed'} | {'yes' if within(r) else 'no'} | "
            f"{r['training_goodput']:.3f} | {r['headroom_violations']} |")


def summary(t: dict) -> str:
    floors = ", ".join(f"{g} {v:.3f}" for g, v in t["lowest_goodput"].items())
    return (f"objective met on {t['met']} of {t['units']} units, within 1.5x its bounds on {t['within_1.5x']}, mean "
            f"utilization {t['mean_utilization']:.3f}, {t['headroom_violations']} headroom violations; lowest "
            f"training goodput: {floors}")


def report(rows: dict[str, dict], t: dict, shipped: dict[str, dict] | None = None) -> str:
    head = "| unit | utilization | shortage | short steps | objective | within 1.5x | goodput | violations |"
    lines = ["# The simulator's test-on units (the gate experiments are decided by)", "",
             "Generated by `python bench/simulate_gate.py` from bench/simulate_bench.py's evaluated weeks and "
             "`--short-history 4,5,6` units and bench/simulate_kinds.py's seeds 2-9: the forecast policy, tuned on "
             "each unit's history alone to the default objective (shortage <= 0.1 % of demand GPU-time, short steps "
             "<= 1 %). An experiment is run on these units only after its gate is written down, against these counts "
             "(the module docstring has the commands).", "", "**" + summary(t) + "**", ""]
    if shipped is not None:
        lines += ["Shipped: " + summary(tally(shipped)), "", "Units whose verdict changed or whose utilization moved "
                  f"by more than {MOVED:.0%} point (candidate, then shipped):", "", head, "|---" * 8 + "|"]
        for u in moved(shipped, rows):
            lines += [_row(u, rows[u]), _row(u + " (shipped)", shipped[u])]
        lines += [""]
    lines += ["Every unit:", "", head, "|---" * 8 + "|", *(_row(u, r) for u, r in rows.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", type=Path, help="an experiment's results folder, compared with the shipped ones")
    args = ap.parse_args(argv)
    shipped = units(RESULTS)
    rows, against = (units(args.candidate), shipped) if args.candidate else (shipped, None)
    t = tally(rows)
    folder = args.candidate or RESULTS
    json_path = folder / "simulate_gate.json"
    doc_path = args.candidate / "bench-simulate-gate.md" if args.candidate else REPO / "docs" / "bench-simulate-gate.md"
    json_path.write_text(json.dumps({"tally": t, "shipped": tally(shipped),
                                     "moved": moved(shipped, rows) if against else [], "units": rows},
                                    indent=1, sort_keys=True, default=str))
    doc_path.write_text(report(rows, t, against))
    print(summary(t))
    print(f"[bench] wrote {json_path} and {doc_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
