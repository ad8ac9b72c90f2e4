"""`headroom report`: the page is built from a real simulation and loaded in a real headless chromium."""
from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from cli.main import main
from controller.simulate import POLICIES, REFERENCES, Scenario, default_spec, demand_per_gpu
from controller.tune import tune
from core.settings import TuneConfig
from dashboards.report import compare_policies, comparison_table, format_table, render_report
from forecast.synthetic import synthetic_demand, write_csv
from tests.servers import unavailable

GRID = TuneConfig(target_quantiles=[0.5, 0.9], warm_buffers=[0.0, 1.0, 3.0], margins_gpus=[0, 4, 8, 16, 32])

INSTALL = "bash scripts/install-chromium.sh"


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        unavailable(f"chromium is not installed: {INSTALL}")
    return path


def load_in_browser(page: Path, tmp_path: Path) -> dict[str, str]:
    """The <body> data attributes after chromium loaded the page (set by the report's self-check script)."""
    out = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000",
         "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", out.stdout)
    assert body, f"no <body> in the dumped DOM: {out.stdout[:500]}"
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """headroom's own synthetic demand, the last 1.5 of 5 days simulated under every policy, each tuned on the
    history to the same objective (the references as they are), as `headroom report` does."""
    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1.5)
    base = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    specs, tuned = {}, None
    for policy in POLICIES:
        if policy in REFERENCES:
            specs[policy] = base
            continue
        t = tune(scenario, base, GRID, reference=policy)
        specs[policy] = t.recommended
        tuned = t if policy == "forecast" else tuned
    results = compare_policies(scenario, specs, timeline_policy="forecast")
    out = tmp_path_factory.mktemp("report")
    page = render_report(out, results, "forecast", 128, {"demand trace": "synthetic, 5 days"}, tuned)
    return page, results, tuned


def test_page_loads_in_chromium_with_every_plot_decoded(report, tmp_path):
    page, _, _ = report
    body = load_in_browser(page, tmp_path)
    assert body.get("images") == "4", body  # demand, GPUs by use, preemptions, trade-off
    assert body.get("images-ok") == "4", body
    assert "errors" not in body, body


def test_the_browser_check_catches_a_broken_plot_and_a_script_error(report, tmp_path):
    page, _, _ = report
    text = page.read_text()
    broken = tmp_path / "broken.html"
    # corrupt one embedded PNG and add a failing script: both must show in the browser's verdict
    text = text.replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    broken.write_text(text.replace("</body>", "<script>undefinedFunction()</script></body>"))
    body = load_in_browser(broken, tmp_path)
    assert body.get("images") == "4" and body.get("images-ok") == "3", body
    assert "undefinedFunction" in body.get("errors", ""), body


def test_page_is_self_contained_and_explains_itself(report):
    page, results, tuned = report
    text = page.read_text()
    assert not re.search(r'<img[^>]+src="(?!data:image/png;base64,)', text)  # every plot embedded
    for png in ("demand.png", "gpus_by_use.png", "preemptions.png", "tradeoff.png"):
        assert (page.parent / png).stat().st_size > 10_000  # also written beside the page
    for words in ("GPUs", "utilization", "shortage", "short steps", "training goodput", "cost vs dedicated",
                  "hourly oracle", "objective met"):
        assert words in text, words
    assert text.count("<figcaption>") == 4
    f, h = results["forecast"], results["hourly-oracle"]
    # the headline is this simulation's, not a template's
    assert f"kept {f.utilization:.1%} of the GPUs busy" in text and "hourly oracle" in text
    assert f"{h.utilization:.1%}" in text and f"{f.shortage_within_cluster:.3%}" in text
    assert html.escape(tuned.reason) in text  # the trade-off plot says why the recommendation


def test_comparison_table_has_every_policy_and_sane_values(report):
    _, results, _ = report
    table = comparison_table(results)
    assert list(table.index) == list(POLICIES)
    assert table["utilization"].between(0, 1).all() and table["shortage_within_cluster"].between(0, 1).all()
    assert (table["headroom_violations"] == 0).all()
    assert table.loc["oracle", "utilization"] >= table.loc["hourly-oracle", "utilization"] >= table.loc[
        "static", "utilization"]
    assert bool(table.loc["oracle", "objective_met"]) and bool(table.loc["hourly-oracle", "objective_met"])
    text = format_table(table)
    assert all(p in text for p in POLICIES) and "short steps" in text


def test_report_command_writes_the_page(tmp_path, capsys):
    trace = tmp_path / "demand.csv"
    write_csv(synthetic_demand(days=4), trace)
    out = tmp_path / "out"
    config = tmp_path / "headroom.yaml"  # a small sweep: the default grid's runs are not what this tests
    config.write_text("tune: {target_quantiles: [0.5, 0.9], warm_buffers: [0.0, 1.0, 3.0], margins_gpus: [0, 8, 32]}\n")
    c = ["--config", str(config)]
    assert main(["report", *c, str(trace), "--days", "1", "--out", str(out), "--policy", "reactive"]) == 0
    printed = capsys.readouterr()
    assert str(out / "index.html") in printed.out and "simulated hourly-oracle" in printed.err
    assert {line.split()[0] for line in printed.out.splitlines()[2:2 + len(POLICIES)]} == set(POLICIES)
    assert (out / "tradeoff.png").exists()  # the forecast policy was tuned on the history
    page = (out / "index.html").read_text()
    assert "What the reactive policy did" in page
    # the trade-off among the reactive plots is the forecast policy's tuning, and says so
    assert "<h2>Tuning trade-off of the forecast policy</h2>" in page
    # the plots follow reactive, as tuned: the page names it with the margin it ran with (it named forecast's alone)
    named = re.search(r"<dt>plotted policy</dt><dd>reactive: (.*?) \(marginGpus (\d+)\)</dd>", html.unescape(page))
    assert named and int(named[2]) in (0, 8, 32) and named[1] == "the last hour's peak, an hour late, plus a margin"
    timeline = tmp_path / "report-timeline.csv"
    assert main(["report", *c, str(trace), "--days", "1", "--out", str(out / "j"), "--json", "--policy", "oracle",
                 "--timeline", str(timeline)]) == 0
    out_json = json.loads(capsys.readouterr().out)
    assert set(out_json["policies"]) == set(POLICIES) and out_json["report"].endswith("index.html")
    oracle_page = " ".join(Path(out_json["report"]).read_text().split())
    assert "It is a reference, not a policy anyone can deploy: it knows every step" in html.unescape(oracle_page)
    # --timeline (simulate's option, which report takes) writes the plotted policy's steps, as simulate writes them
    assert main(["simulate", *c, str(trace), "--days", "1", "--json", "--policy", "oracle",
                 "--timeline", str(tmp_path / "simulate-timeline.csv")]) == 0
    assert timeline.exists(), "report --timeline wrote nothing"
    assert timeline.read_text() == (tmp_path / "simulate-timeline.csv").read_text()


def test_report_help_says_what_its_policy_flag_picks(capsys):
    """report's --policy picks the policy the plots follow (every policy is simulated); its help was simulate's."""
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--help"])
    assert exit_.value.code == 0
    assert "the policy the plots and --timeline follow" in " ".join(capsys.readouterr().out.split())


def test_report_of_a_policy_file_does_not_say_it_tuned(tmp_path, capsys):
    """--policy-file runs every policy with the file's fields, nothing tuned: the progress lines said "tuning on
    the history" for each and the page that every policy's parameters were tuned on the history."""
    import yaml

    trace = tmp_path / "demand.csv"
    write_csv(synthetic_demand(days=4), trace)
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                      "metadata": {"name": "chat", "namespace": "inference"}, "spec": {
                                          "query": "up", "capacity": {"demandPerGpu": 10}, "mode": "active",
                                          "target": {"kind": "Deployment", "name": "chat"}}}))
    out = tmp_path / "out"
    assert main(["report", str(trace), "--policy-file", str(policy), "--days", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "tuning" not in err and f"static: {policy}, as is" in err, err
    page = " ".join((out / "index.html").read_text().split())
    assert "tuned on the history" not in page and "nothing tuned" in page
    assert not (out / "tradeoff.png").exists()

    # the page names the file and the scale it ran with (it said '99.9th percentile = 100 GPUs', the flag's default)
    assert f"one GPU serves 10 of the trace's demand (spec.capacity.demandPerGpu of {policy})" in html.unescape(page)
    assert "99.9th percentile" not in page and f"(from {policy})" in page


@pytest.mark.parametrize("command", ["report", "forecast", "simulate"])
def test_a_command_without_history_is_an_invalid_request(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command]) == 2  # a missing argument (README: 2 invalid request), not failed work
    assert "no history" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a refused request leaves nothing behind (report's empty --out folder did)"


def test_demand_plot_marks_the_short_steps_the_table_counts(tmp_path, monkeypatch):
    """The red dots are the steps the simulator counted short (the table's "short steps"), not a recount of its own
    (which took the first step, before anything was warm, for a shortage the simulator does not count)."""
    from matplotlib.collections import PathCollection

    import dashboards.report as report_module
    from controller.simulate import simulate
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1.5)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    figures = []
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or path)
    plot_demand(r, tmp_path / "demand.png")
    ax = figures[-1].axes[0]
    dots = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    # the label counts the steps the figures count: every row but the first, whose interval is before the replay
    accounted = r.steps - 1
    short = r.short_steps * accounted
    assert math.isclose(short, round(short), abs_tol=1e-9) and dots == round(short), \
        f"{dots} red dots, the table counts {short} short steps"
    labels = ax.get_legend_handles_labels()[1]
    assert any(f"({dots} of {accounted} steps)" in label for label in labels), labels


def test_demand_above_a_too_small_cluster_is_said_not_reported_as_no_shortage(tmp_path, monkeypatch, capsys):
    """--gpus below the demand: no policy can serve what is above the cluster, and the table's shortage and objective
    leave it out (as simulate's do); the page, its demand plot and the command say so instead of 'nothing unmet'."""
    from matplotlib.lines import Line2D

    import dashboards.report as report_module

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 16, 1.5)  # demand peaks near 100 GPUs
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    results = compare_policies(scenario, {"forecast": spec, "hourly-oracle": spec})
    over = results["forecast"].shortage_over_capacity
    assert over > 0.3 and results["forecast"].shortage_within_cluster == 0  # the case: all of it above the cluster
    figures = []
    save = report_module._save
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    page = render_report(tmp_path / "out", results, "forecast", 16, {})
    text = page.read_text()
    assert f"{over:.2%} of inference demand GPU-time is above the 16-GPU cluster" in text
    demand_axes = figures[0].axes[0]
    assert any(isinstance(a, Line2D) and "capacity 16 GPUs" in a.get_label() for a in demand_axes.get_lines())

    trace = tmp_path / "demand.csv"
    write_csv(demand, trace)
    config = tmp_path / "headroom.yaml"
    config.write_text("tune: {target_quantiles: [0.9], warm_buffers: [0.0], margins_gpus: [0, 8]}\n")
    assert main(["report", "--config", str(config), str(trace), "--days", "1", "--gpus", "16",
                 "--out", str(tmp_path / "cmd")]) == 0
    assert "above the 16-GPU cluster" in capsys.readouterr().err
    # --json: no progress on stderr, so the note is in the object, beside a table whose shortage reads 0
    assert main(["report", "--config", str(config), str(trace), "--days", "1", "--gpus", "16", "--json",
                 "--out", str(tmp_path / "cmd-json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["policies"]["forecast"]["shortage_within_cluster"] == 0
    assert any("above the 16-GPU cluster" in note for note in printed["notes"]), printed


def with_a_gap(demand: pd.Series) -> pd.Series:
    """`demand` without samples from 20 to 14 hours before its end."""
    gap = (demand.index >= demand.index[-1] - pd.Timedelta(hours=20)) & \
        (demand.index < demand.index[-1] - pd.Timedelta(hours=14))
    return demand.mask(gap)


def _shaded_span(ax, words: str) -> tuple[pd.Timestamp, pd.Timestamp]:
    """Where the shading whose legend entry says `words` begins and ends on the time axis."""
    import matplotlib.dates as mdates

    (shaded,) = [a for a in [*ax.collections, *ax.patches] if words in str(a.get_label())]
    ax.figure.canvas.draw()
    box = shaded.get_window_extent()
    (x0, _), (x1, _) = ax.transData.inverted().transform([(box.x0, box.y0), (box.x1, box.y1)])
    return pd.Timestamp(mdates.num2date(x0)), pd.Timestamp(mdates.num2date(x1))  # in UTC, as matplotlib draws


def test_a_gap_in_the_trace_is_shown_as_a_gap_not_as_demand(tmp_path, monkeypatch):
    """Six hours without samples in the simulated days: the simulator takes the last sample seen for them (and the
    timeline's demand is flat there); the demand plot must say so (shaded, in its legend), not draw it as demand."""
    import dashboards.report as report_module
    from dashboards.report import missing_steps, plot_demand

    demand = with_a_gap(synthetic_demand(days=5))
    scenario = Scenario(demand, 128, 1.5)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    results = compare_policies(scenario, {"forecast": spec, "hourly-oracle": spec})
    missing = missing_steps(scenario)
    assert len(missing) == 72  # the six hours without samples
    figures = []
    save = report_module._save
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    plot_demand(results["forecast"], tmp_path / "demand.png", missing=missing)
    ax = figures[-1].axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert any("no data" in label and "72 steps" in label and "last sample" in label for label in labels), labels
    # shaded over the six hours whose demand is the last sample seen: the intervals ending at the missing steps
    start, end = _shaded_span(ax, "no data")
    assert abs(start - (missing[0] - pd.Timedelta(minutes=5))) < pd.Timedelta(seconds=30), (start, missing[0])
    assert abs(end - missing[-1]) < pd.Timedelta(seconds=30), (end, missing[-1])
    # the page says it too
    page = render_report(tmp_path / "out", results, "forecast", 128, {}, missing=missing)
    assert "72 steps" in page.read_text() and "no data" in page.read_text()


def test_docs_list_the_tables_columns_as_the_page_heads_them():
    from dashboards.report import COLUMNS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    listed = re.search(r"a table comparing the policies: (.*?)\. ", " ".join(doc.split()))
    assert listed, "docs/report.md: no list of the table's columns"
    columns = [c.strip().removeprefix("and ") for c in listed[1].split(",")]
    assert columns == [header for header, _ in COLUMNS.values()], columns


def test_the_docs_example_of_the_rendering_functions_runs(tmp_path, monkeypatch):
    """docs/report.md shows how other code reuses the rendering functions: the example must run as written."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/report.md", "exec"), {})  # noqa: S102 - the documentation's own example
    assert (tmp_path / "out" / "index.html").exists() and (tmp_path / "out" / "demand.png").exists()


@pytest.mark.parametrize("reference", ["static", "oracle"])
def test_the_demand_plot_of_a_baseline_does_not_call_its_level_a_forecast_band(reference, tmp_path, monkeypatch):
    """--policy static (or a reference) plots that policy's timeline: the shaded level is what it plans for (the
    lookback's peak, the future itself), not forecast quantiles it never had."""
    import dashboards.report as report_module
    from controller.simulate import simulate
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference=reference,
                 timeline=True, detail=True)
    assert r.detail["target_gpus"].notna().any()  # the simulator records its level where a forecast would be
    figures = []
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or path)
    plot_demand(r, tmp_path / "demand.png")
    ax = figures[-1].axes[0]
    texts = [*ax.get_legend_handles_labels()[1], ax.get_title()]
    assert not any("forecast" in t for t in texts), texts
    assert any(f"what {reference} plans for" in t for t in texts), texts
    # a reference knows the future: its plot is not drawn as a policy one could run (it was titled '(oracle policy)')
    assert ("not deployable" in ax.get_title()) == (reference in REFERENCES), ax.get_title()


@pytest.mark.parametrize("reference", ["forecast", "static"])
def test_the_demand_plots_legend_hides_no_data(reference, tmp_path, monkeypatch):
    """The legend sits where nothing is drawn: a static reservation near the top of the plot, and the red dots on it,
    were under it."""
    import numpy as np

    import dashboards.report as report_module
    from controller.simulate import simulate
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference=reference,
                 timeline=True, detail=True)
    figures = []
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or path)
    plot_demand(r, tmp_path / "demand.png")
    fig = figures[-1]
    ax = fig.axes[0]
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    points = np.concatenate([line.get_xydata() for line in ax.get_lines()]
                            + [c.get_offsets() for c in ax.collections if len(c.get_offsets())])
    shown = ax.transData.transform(np.asarray(points, dtype=float))
    hidden = [p for p, (x, y) in zip(points, shown) if box.contains(x, y)]
    assert not hidden, f"{len(hidden)} of {len(points)} plotted points under the legend, e.g. {hidden[:3]}"


def _drawn(monkeypatch, plot, *args):
    """The matplotlib Figure a report plot draws (and saves, as every plot after it does)."""
    import dashboards.report as report_module

    figures = []
    save = report_module._save
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    plot(*args)
    return figures[-1]


def test_a_policy_that_preempts_nothing_gets_a_preemption_plot_that_says_so(tmp_path, monkeypatch):
    """Flat demand: the reservation never moves, so nothing is preempted. The plot's axis ran from -0.04 to 0.04 GPUs,
    its title gave a 'reclaim p99 0 s' of no reclaim, and nothing said there was nothing to draw."""
    from controller.simulate import simulate
    from dashboards.report import plot_preemptions

    varying = synthetic_demand(days=5)
    demand = varying * 0 + varying.mean()
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="static",
                 timeline=True, detail=True)
    assert r.preemptions == 0 and r.events.empty  # the case
    ax = _drawn(monkeypatch, plot_preemptions, r, tmp_path / "p.png").axes[0]
    assert ax.get_ylim()[0] == 0, ax.get_ylim()
    assert any("no training job was preempted" in t.get_text() for t in ax.texts), [t.get_text() for t in ax.texts]
    assert "reclaim p99" not in ax.get_title() and "no preemptions" in ax.get_title()


def test_the_preemption_plots_legend_hides_no_bar(tmp_path, monkeypatch):
    """The bars' axis ended at the tallest bar, so the legend in its upper left could cover the bars there."""
    from controller.simulate import simulate
    from dashboards.report import plot_preemptions

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 2)  # a tall bar in the first hours
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    assert r.preemptions > 0
    fig = _drawn(monkeypatch, plot_preemptions, r, tmp_path / "p.png")
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    covered = [p for p in ax.patches if p.get_height() > 0 and p.get_window_extent().overlaps(legend)]
    assert not covered, f"{len(covered)} bars under the legend"
    assert ax.get_ylim()[0] == 0


def test_a_planned_level_above_the_cluster_is_drawn_with_the_cluster(tmp_path, monkeypatch):
    """A spike in the history puts static's level (the lookback's peak) above the 128-GPU cluster while the simulated
    day's demand stays below it: the plot drew the level at ~3x demand with no cluster line, as if it were reserved."""
    from matplotlib.lines import Line2D

    from controller.simulate import simulate
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=5)
    per_gpu = demand_per_gpu(demand, peak_gpus=100)
    demand.iloc[len(demand) // 3:len(demand) // 3 + 24] = 2 * demand.max()  # two hours of history, in the lookback
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, per_gpu), reference="static", timeline=True, detail=True)
    assert r.detail["high_gpus"].max() > 128 >= r.timeline["demand_gpus"].max()  # the case
    ax = _drawn(monkeypatch, plot_demand, r, tmp_path / "demand.png", 128).axes[0]
    capacity = [a for a in ax.get_lines() if isinstance(a, Line2D) and "capacity 128 GPUs" in a.get_label()]
    assert capacity and set(capacity[0].get_ydata()) == {128}, [a.get_label() for a in ax.get_lines()]
    assert "cannot be served" not in capacity[0].get_label()  # no demand went above it


def test_steps_without_a_forecast_are_said_on_the_plot_and_the_page(tmp_path, monkeypatch):
    """A day and a half of history: the forecaster needs 48 hours, so the plan falls back for the first hours. The plot
    drew no band there and said nothing (a one-day trace: a 'forecast band' plot without any band), nor did the page."""
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=3)
    scenario = Scenario(demand, 128, 1.5)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    results = compare_policies(scenario, {"forecast": spec, "hourly-oracle": spec})
    r = results["forecast"]
    without = int(r.detail["target_gpus"].isna().sum())
    assert 0 < without < len(r.detail) and r.forecast_fallback_hours > 0  # the case
    ax = _drawn(monkeypatch, plot_demand, r, tmp_path / "demand.png").axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert f"no forecast for {without} of {len(r.detail)} steps: the planner's fallback" in labels, labels
    page = render_report(tmp_path / "out", results, "forecast", 128, {}).read_text()
    assert f"plan fell back in {r.forecast_fallback_hours} simulated hours" in page


def test_the_usage_plot_shows_the_demand_served_that_utilization_counts(tmp_path, monkeypatch):
    """The stack's blue is every GPU held for inference (warm buffer and warming replicas too) while utilization counts
    the demand served: the demo's plot showed 98% of the cluster busy under a title of 90% utilization, its caption
    calling all of blue 'serving', and its legend over the foot of the stack."""
    import numpy as np

    from dashboards.report import plot_usage

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1.5)
    from controller.simulate import simulate

    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    fig = _drawn(monkeypatch, plot_usage, r, 128, tmp_path / "usage.png")
    ax = fig.axes[0]
    (served,) = [line for line in ax.get_lines() if line.get_label() == "inference demand served"]
    expected = r.timeline["demand_gpus"].clip(upper=128).to_numpy() - r.detail["unmet_gpus"].to_numpy()
    assert np.allclose(served.get_ydata(), expected, equal_nan=True)
    # a row's demand is the interval ending at it, which the previous row's held GPUs served: the line is under blue
    held = r.detail["inference_gpus"].to_numpy()
    assert served.get_drawstyle() == "steps-pre"
    assert (held[:-1] >= expected[1:] - 1e-9).all() and held.mean() > np.nanmean(expected)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.y0 >= ax.transData.transform((0, 128))[1], "the legend covers the stack"


def test_the_demand_plot_says_what_its_band_forecasts_and_where_demand_should_be(tmp_path, monkeypatch):
    """The band forecasts each hour's peak (spec.statistic max) from q0.5 up: a step's demand is below it most of the
    time, yet the caption said 'demand should stay inside the shaded band' and the legend 'forecast q0.5 to q0.99
    (hourly)', not of what."""
    import dashboards.report as report_module
    from controller.simulate import simulate
    from dashboards.report import plot_demand

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1.5)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    r = simulate(scenario, spec, reference="forecast", timeline=True, detail=True)
    s, d = r.timeline.set_index("timestamp")["demand_gpus"], r.detail
    known = d["target_gpus"].notna()
    below, above = (s < d["target_gpus"])[known].mean(), (s > d["high_gpus"])[known].mean()
    assert spec.statistic == "max" and below > 0.5 and above < 0.05, (below, above)  # below the band, not inside
    figures = []
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or path)
    caption = plot_demand(r, tmp_path / "demand.png").caption
    labels = figures[-1].axes[0].get_legend_handles_labels()[1]
    assert f"forecast of each hour's max, q{spec.target_quantile:g} to q{spec.headroom_quantile:g}" in labels, labels
    assert "inside" not in caption and "should stay below its top" in caption


def test_the_demand_plots_legend_stays_on_the_figure(tmp_path, monkeypatch):
    """hourly-oracle's long band label beside a gap's and a fallback's: the legend, two columns over the data, ran off
    the figure's right edge (nasa_http_1995_5min.csv up to 1995-08-05, report --days 6 --policy hourly-oracle)."""
    from dashboards.report import missing_steps, plot_demand

    demand = with_a_gap(synthetic_demand(days=4))
    scenario = Scenario(demand, 128, 2)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    results = compare_policies(scenario, {"hourly-oracle": spec}, timeline_policy="hourly-oracle")
    fig = _drawn(monkeypatch, plot_demand, results["hourly-oracle"], tmp_path / "d.png", 128, missing_steps(scenario))
    ax = fig.axes[0]
    assert len(ax.get_legend().get_texts()) >= 6  # the case: band, no band, gap and the lines
    box, page = ax.get_legend().get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert not box.overlaps(ax.get_window_extent()), "the legend is over the data"


def test_the_preemption_caption_does_not_understate_the_work_lost(tmp_path, monkeypatch):
    """Every preemption also loses the GPU-time it takes to stop (adapters/embedded.py counts it in training_lost, as
    goodput does); the caption said each emergency one lost 'at most the work since its last checkpoint'."""
    from controller.simulate import simulate
    from dashboards.report import plot_preemptions

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    assert r.preemptions > 0 and r.training_goodput < 1
    caption = plot_preemptions(r, tmp_path / "p.png").caption
    assert "at most" not in caption and "the GPU-time it takes to stop" in caption, caption


def _lying_on_one_another(ax) -> list[tuple[str, str]]:
    """Pairs of lines (under, over) drawn at the same height at some time where the one over is not the narrower:
    there it hides the one under it."""
    import numpy as np

    def heights(line) -> pd.Series:  # its height at each time; an axhline's (x in axes units, 0 to 1) everywhere
        y = np.asarray(line.get_ydata(), float)
        if line.get_transform() is not ax.transData and len(set(y)) == 1:
            return pd.Series(y[0], index=["everywhere"])
        return pd.Series(y, index=pd.to_datetime(np.asarray(line.get_xdata())))

    lines = sorted(ax.get_lines(), key=lambda line: line.get_zorder())  # as drawn: by zorder, then in order
    hidden = []
    for i, under in enumerate(lines):
        for over in lines[i + 1:]:
            a, b = heights(under), heights(over)
            if "everywhere" in a.index or "everywhere" in b.index:
                same = np.isclose(a.to_numpy()[:, None], b.to_numpy()[None, :]).any()
            else:
                common = a.index.intersection(b.index)
                same = np.isclose(a[common], b[common]).any()
            if same and over.get_linewidth() >= under.get_linewidth():
                hidden.append((under.get_label(), over.get_label()))
    return hidden


def test_a_one_gpu_clusters_lines_are_seen(tmp_path, monkeypatch):
    """--gpus 1 under demand peaking near 100 GPUs: the reservation and the warm GPUs (1 GPU) were a line along the
    foot of an axis running to 120, drawn one over the other and under the cluster's line, all at 1; in the usage
    plot the demand served lay under the cluster's line. Each now shows: a panel of the cluster's own range, and lines
    on one another drawn wider under narrower."""
    from controller.simulate import simulate
    from dashboards.report import plot_demand, plot_usage

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 1, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    assert r.timeline["reserved_gpus"].max() == 1 and r.timeline["demand_gpus"].max() > 50  # the case
    fig = _drawn(monkeypatch, plot_demand, r, tmp_path / "demand.png", 1)
    for name in ("forecast reservation", "warm, serving GPUs"):
        # some panel draws the line at least half-way up its axis
        heights = [max(line.get_ydata()) / ax.get_ylim()[1] for ax in fig.axes for line in ax.get_lines()
                   if line.get_label() == name]
        assert heights and max(heights) >= 0.5, (name, heights)
    for ax in fig.axes:
        assert not _lying_on_one_another(ax), _lying_on_one_another(ax)
    usage = _drawn(monkeypatch, plot_usage, r, 1, tmp_path / "usage.png").axes[0]
    assert not _lying_on_one_another(usage), _lying_on_one_another(usage)


def test_the_demand_plot_draws_every_step_whole(tmp_path, monkeypatch):
    """Each row's plan holds from its time to the next row's, and its demand is the interval ending at its time: the
    step lines ended at the last row's time, so its plan was not drawn, and a shaded run of steps (no data, no
    forecast) was drawn one step short: a step alone without a sample was not shaded at all, though counted."""
    import matplotlib.dates as mdates

    from controller.simulate import simulate
    from dashboards.report import missing_steps, plot_demand

    demand = synthetic_demand(days=5)
    demand.iloc[-100] = float("nan")  # one sample missing in the simulated day
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    missing = missing_steps(scenario)
    assert len(missing) == 1  # the case
    step = r.timeline["timestamp"].diff().iloc[-1]
    ax = _drawn(monkeypatch, plot_demand, r, tmp_path / "demand.png", 128, missing).axes[0]
    (reserved,) = [line for line in ax.get_lines() if line.get_label() == "forecast reservation"]
    last = r.timeline.iloc[-1]
    ends = mdates.date2num(last["timestamp"] + step)
    assert mdates.date2num(reserved.get_xdata()[-1]) == pytest.approx(ends, rel=0, abs=1e-6)  # a second is 1.2e-5
    assert reserved.get_ydata()[-1] == last["reserved_gpus"]
    # the grey span covers the interval whose sample is missing: the step ending at it
    start, end = _shaded_span(ax, "no data")
    assert abs(end - start - step) < pd.Timedelta(seconds=30), (start, end, step)
    (demand_line,) = [line for line in ax.get_lines() if line.get_label() == "demand"]
    assert demand_line.get_drawstyle() == "steps-pre"  # each row's demand over the interval ending at its time


def test_the_tuning_plot_marks_the_closest_setting_and_its_caption_says_what_is_drawn(tmp_path, monkeypatch):
    """An objective no setting meets (no short step at all, without a warm buffer): the plot circled nothing, not
    even the closest setting tune writes, yet the caption said 'The circled one is recommended: no setting meets the
    objective ...'; and a history too short to sweep drew no dot under a caption of dots and a circle."""
    import matplotlib.pyplot as plt

    from dashboards.report import plot_tune

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    base = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    strict = TuneConfig(target_quantiles=[0.5], warm_buffers=[0.0, 0.5], warm_buffer_quantiles=[0.0],
                        max_shortage=0.0, max_short_steps=0.0)
    missed = tune(scenario, base, strict)
    assert not missed.met and not missed.table.empty  # the case
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    caption = plot_tune(missed, tmp_path / "missed.png").caption
    assert "circled one is recommended" not in caption and "the dashed circle is the closest" in caption, caption
    assert missed.reason in caption
    # the dashed circle is on the setting tune wrote: the closest
    (circled,) = [c for c in figures[-1].axes[0].collections if str(c.get_label()).startswith("closest")]
    row = missed.table[missed.table["warm_buffer"] == missed.recommended.warm_buffer].iloc[0]
    assert circled.get_offsets().tolist() == [[row.shortage_within_cluster * 100, row.utilization * 100]]
    too_short = tune(Scenario(demand.iloc[-2 * 288:], 128, 1), base, GRID)
    assert too_short.table.empty  # the case: nothing swept
    caption = plot_tune(too_short, tmp_path / "short.png").caption
    assert "dot" not in caption and "circled" not in caption and too_short.reason in caption, caption
    met = tune(scenario, base, GRID)
    assert met.met and f"The circled one is recommended: {met.reason}." in plot_tune(met, tmp_path / "m.png").caption


def test_the_usage_and_preemption_plots_say_where_demand_is_the_last_sample_seen(tmp_path, monkeypatch):
    """Six hours without samples: utilization counts the last sample seen as the demand served there, and the usage
    plot drew it as a flat line of demand served, the preemption plot as demand, with nothing said (the demand plot
    shaded them)."""
    import dashboards.report as report_module
    from dashboards.report import missing_steps

    demand = with_a_gap(synthetic_demand(days=5))
    scenario = Scenario(demand, 128, 1.5)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100))
    results = compare_policies(scenario, {"forecast": spec, "hourly-oracle": spec})
    missing = missing_steps(scenario)
    figures = []
    save = report_module._save
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    page = render_report(tmp_path / "out", results, "forecast", 128, {}, missing=missing).read_text()
    usage = next(f.axes[0] for f in figures if f.axes[0].get_title().startswith("GPUs by use"))
    start, end = _shaded_span(usage, "no data")
    assert abs(start - (missing[0] - pd.Timedelta(minutes=5))) < pd.Timedelta(seconds=30), (start, missing[0])
    assert abs(end - missing[-1]) < pd.Timedelta(seconds=30), (end, missing[-1])
    assert "Hatched steps have no sample in the trace" in page
    fig = usage.figure
    legend = usage.get_legend().get_window_extent()
    assert legend.y0 >= usage.transData.transform((0, 128))[1] and legend.x1 <= fig.bbox.x1, "legend over the stack"
    # the preemption plot's demand line is the same stand-in there: hatched too, its legend over no bar
    bars = next(f.axes[0] for f in figures if f.axes[0].get_title().startswith("Training preemptions"))
    assert _shaded_span(bars, "no data") == (start, end)
    legend = bars.get_legend().get_window_extent()
    assert not [b for b in bars.patches if b.get_height() > 0 and b.get_window_extent().overlaps(legend)
                and "no data" not in str(b.get_label())]
    assert "the demand line there is the last sample seen" in page


def test_a_policy_on_another_clock_has_its_plots_say_which_zone_they_are_drawn_in(tmp_path, monkeypatch, capsys):
    """spec.timezone America/New_York: the policy's hours of day (its hourly band, its business hours) are New York's,
    and matplotlib draws the timestamps in UTC; the axes said 'time (UTC)' and the page named no zone."""
    import matplotlib.dates as mdates

    from controller.simulate import simulate
    from dashboards.report import plot_demand, plot_preemptions, plot_usage

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    spec = default_spec(scenario, demand_per_gpu(demand, peak_gpus=100), timezone="America/New_York")
    r = simulate(scenario, spec, reference="forecast", timeline=True, detail=True)
    drawn = [_drawn(monkeypatch, plot_demand, r, tmp_path / "d.png").axes[0],
             _drawn(monkeypatch, plot_usage, r, 128, tmp_path / "u.png").axes[0],
             _drawn(monkeypatch, plot_preemptions, r, tmp_path / "p.png").axes[0]]
    for ax in drawn:
        assert "UTC" in ax.get_xlabel() and "America/New_York" in ax.get_xlabel(), ax.get_xlabel()
    # and UTC is the zone the axis is drawn in: the first step sits at its UTC time
    (reserved,) = [line for line in drawn[0].get_lines() if line.get_label() == "forecast reservation"]
    first = r.timeline["timestamp"].iloc[0]
    assert mdates.num2date(mdates.date2num(reserved.get_xdata()[0])).hour == first.tz_convert("UTC").hour
    trace = tmp_path / "demand.csv"
    write_csv(demand, trace)
    config = tmp_path / "headroom.yaml"
    config.write_text("tune: {target_quantiles: [0.9], warm_buffers: [0.0], margins_gpus: [0]}\n")
    assert main(["report", "--config", str(config), str(trace), "--days", "1", "--timezone", "America/New_York",
                 "--out", str(tmp_path / "out")]) == 0
    assert "hours of day on America/New_York&#x27;s clock" in (tmp_path / "out" / "index.html").read_text()


def test_an_all_zero_demand_is_drawn_from_zero_and_said(tmp_path, monkeypatch):
    """A trace of zeros (report --per-gpu 1): the demand plot's axis ran from -0.04 to 0.04 GPUs with every line along
    its middle, and the preemption plot's demand axis from 0 to 0.05, with nothing said."""
    from controller.simulate import simulate
    from dashboards.report import plot_demand, plot_preemptions

    demand = synthetic_demand(days=5) * 0
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, 1.0), reference="forecast", timeline=True, detail=True)
    assert (r.timeline["demand_gpus"].fillna(0) == 0).all()  # the case
    ax = _drawn(monkeypatch, plot_demand, r, tmp_path / "d.png", 128).axes[0]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1, ax.get_ylim()
    assert any("no inference demand" in t.get_text() for t in ax.texts), [t.get_text() for t in ax.texts]
    twin = _drawn(monkeypatch, plot_preemptions, r, tmp_path / "p.png").axes[1]
    assert twin.get_ylim()[0] == 0 and twin.get_ylim()[1] >= 1, twin.get_ylim()


def test_the_page_says_what_a_job_trace_left_out(tmp_path, capsys):
    """A job trace with a pod never scheduled: left out of the replay (said on stderr and in --json's notes), but the
    page, whose training figures leave it out, said only 'job trace JOBS.csv'."""
    demand = synthetic_demand(days=4)
    trace, jobs, config = tmp_path / "demand.csv", tmp_path / "jobs.csv", tmp_path / "headroom.yaml"
    write_csv(demand, trace)
    rows = [f"{g},{h * 3600},{h * 3600 + 60},{h * 3600 + 7200}" for h, g in zip(range(24), [1, 2, 4] * 8)]
    jobs.write_text("num_gpu,creation_time,scheduled_time,deletion_time\n" + "\n".join(rows) + "\n1,5000,,9000\n")
    config.write_text("tune: {target_quantiles: [0.9], warm_buffers: [0.0], margins_gpus: [0]}\n")
    assert main(["report", "--config", str(config), str(trace), "--days", "1", "--jobs", str(jobs),
                 "--out", str(tmp_path / "out")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "never scheduled" in line]
    assert said, "the case: stderr says the pod is left out"
    page = html.unescape((tmp_path / "out" / "index.html").read_text())
    assert "1 pod(s) of the window never scheduled" in page, said


def test_a_policy_file_of_several_workloads_is_refused_naming_what_runs_one(tmp_path, capsys):
    """report --policy-file with two ReservationPolicies: refused, exit 2, with nothing written, but the message said
    'simulate runs one' to a report."""
    trace, policies = tmp_path / "demand.csv", tmp_path / "policies.yaml"
    write_csv(synthetic_demand(days=4), trace)
    one = ("apiVersion: headroom.dev/v1alpha1\nkind: ReservationPolicy\n"
           "metadata: {{name: {name}, namespace: default}}\n"
           "spec: {{query: q, mode: active, target: {{kind: Deployment, name: {name}}}, "
           "capacity: {{demandPerGpu: 10}}}}\n")
    policies.write_text(one.format(name="a") + "---\n" + one.format(name="b"))
    assert main(["report", str(trace), "--days", "1", "--policy-file", str(policies),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "holds 2 ReservationPolicies" in err and "simulate runs one" not in err and "report" in err, err
    assert not (tmp_path / "out").exists()


def test_every_plot_of_one_run_spans_its_steps_each_whole(tmp_path, monkeypatch):
    """The demand plot drew the last row's plan through its step, the usage plot's stack ended at the last row's time
    (its GPUs not drawn) and the preemption plot's bars ran from the first row's clock hour: each plot's axis followed
    what it drew, so one moment lay at a different place on each. Now each spans the first row's time to one step past
    the last row's, the usage stack too."""
    import matplotlib.dates as mdates
    from matplotlib.collections import PolyCollection

    import dashboards.report as report_module
    from controller.simulate import simulate

    demand = synthetic_demand(days=5)
    scenario = Scenario(demand, 128, 1)
    r = simulate(scenario, default_spec(scenario, demand_per_gpu(demand, peak_gpus=100)), reference="forecast",
                 timeline=True, detail=True)
    times = r.timeline["timestamp"]
    span = (mdates.date2num(times.iloc[0]), mdates.date2num(times.iloc[-1] + (times.iloc[1] - times.iloc[0])))
    figures = []
    save = report_module._save
    monkeypatch.setattr(report_module, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    report_module.plot_demand(r, tmp_path / "demand.png", 128)
    report_module.plot_usage(r, 128, tmp_path / "usage.png")
    report_module.plot_preemptions(r, tmp_path / "preemptions.png")
    assert len(figures) == 3
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlim() == pytest.approx(span, rel=0, abs=1e-6), ax.get_title()  # a second is 1.2e-5
    stack = [c for c in figures[1].axes[0].collections if isinstance(c, PolyCollection)]
    assert max(path.vertices[:, 0].max() for c in stack for path in c.get_paths()) == pytest.approx(span[1], abs=1e-6)
