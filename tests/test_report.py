"""`headroom report`: the page is built from a real simulation and loaded in a real headless chromium."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cli.main import main
from controller.simulate import POLICIES, SimSettings
from controller.tune import tune
from dashboards.report import comparison_table, compare_policies, render_report
from forecast.models import MODELS
from forecast.synthetic import synthetic_demand, write_csv
from tests.servers import in_ci

INSTALL = "bash scripts/install-chromium.sh"


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if in_ci():
            pytest.fail(f"chromium is not installed (CI must run {INSTALL})")
        pytest.skip(f"chromium is not installed: {INSTALL}")
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
    demand = synthetic_demand(days=10)
    settings = SimSettings()
    results = compare_policies(demand, settings, days=2, make_forecaster=MODELS["profile"])
    tuned = tune(demand, MODELS["profile"], target_quantiles=(0.3, 0.7), lead_times_seconds=(900.0,),
                 headroom_quantiles=(0.99,), days=2)
    out = tmp_path_factory.mktemp("report")
    page = render_report(out, results, "forecast", settings, 128, {"demand trace": "synthetic, 10 days"}, tuned)
    return page, results


def test_page_loads_in_chromium_with_every_plot_decoded(report, tmp_path):
    page, _ = report
    body = load_in_browser(page, tmp_path)
    assert body.get("images") == "4", body  # demand, GPUs by use, preemptions, trade-off
    assert body.get("images-ok") == "4", body
    assert "errors" not in body, body


def test_the_browser_check_catches_a_broken_plot_and_a_script_error(report, tmp_path):
    page, _ = report
    text = page.read_text()
    broken = tmp_path / "broken.html"
    # corrupt one embedded PNG and add a failing script: both must show in the browser's verdict
    text = text.replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    broken.write_text(text.replace("</body>", "<script>undefinedFunction()</script></body>"))
    body = load_in_browser(broken, tmp_path)
    assert body.get("images") == "4" and body.get("images-ok") == "3", body
    assert "undefinedFunction" in body.get("errors", ""), body


def test_page_is_self_contained_and_explains_itself(report):
    page, results = report
    text = page.read_text()
    assert not re.search(r'<img[^>]+src="(?!data:image/png;base64,)', text)  # every plot embedded
    for png in ("demand.png", "gpus_by_use.png", "preemptions.png", "tradeoff.png"):
        assert (page.parent / png).stat().st_size > 10_000  # also written beside the page
    for words in ("GPUs", "utilization", "inference shortage", "training goodput", "cost vs dedicated"):
        assert words in text
    assert text.count("<figcaption>") == 4
    f = results["forecast"]
    assert f"{f.utilization:.1%}" in text  # the headline is this simulation's, not a template's


def test_comparison_table_has_every_policy_and_sane_values(report):
    _, results = report
    table = comparison_table(results)
    assert list(table.index) == list(POLICIES)
    assert table["utilization"].between(0, 1).all() and table["inference_shortage"].between(0, 1).all()
    assert table.loc["oracle", "utilization"] >= table.loc["static", "utilization"]
    assert table.loc["static", "preemptions"] == 0  # static never takes GPUs back: it never lends the peak


def test_report_command_writes_the_page(tmp_path, capsys):
    trace = tmp_path / "demand.csv"
    write_csv(synthetic_demand(days=9), trace)
    out = tmp_path / "out"
    assert main(["report", str(trace), "--days", "2", "--out", str(out), "--no-tune", "--policy", "reactive"]) == 0
    printed = capsys.readouterr()
    assert str(out / "index.html") in printed.out and "simulated oracle" in printed.err
    assert {line.split()[0] for line in printed.out.splitlines()[2:7]} == set(POLICIES)
    assert not (out / "tradeoff.png").exists()  # --no-tune skips the sweep
    assert "What the reactive policy did" in (out / "index.html").read_text()


def test_report_without_history_is_an_error(capsys):
    assert main(["report", "--no-tune"]) == 1
    assert "no history" in capsys.readouterr().err
