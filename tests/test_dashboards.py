"""The Grafana dashboards: current with their generator, type-checked against @grafana/schema,
and querying only what headroom's live /metrics exports (checked by a real Prometheus too)."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller import metrics as m
from controller.state import StateHolder
from dashboards import generate
from tests.servers import CACHE, ServerProcess, free_port, unavailable, wait_until
from tests.servers import prometheus as prom_servers
from tests.test_run import reconciled_state

TYPECHECK = generate.OUT / "typecheck"
NPM_HINT = "run: bash scripts/install-npm.sh"
BOARDS = {name: build().json() for name, build in generate.BOARDS.items()}


def test_committed_json_is_what_the_generator_writes():
    on_disk = {p.name for p in generate.OUT.glob("*.json")}
    assert on_disk == set(generate.BOARDS), "stale or missing board files: run python -m dashboards.generate"
    for name, build in generate.BOARDS.items():
        assert (generate.OUT / name).read_text() == generate.render(build()), \
            f"{name} is stale: run python -m dashboards.generate"


def test_the_sidecar_command_of_the_docs_ships_the_boards_alone():
    """docs/observability.md's ConfigMap for Grafana's dashboard sidecar, up to its `kubectl apply` (which needs a
    cluster), run from the repository's root: its `--from-file=dashboards/` put dashboards/*.py in it beside the four
    boards, and the sidecar writes every key into Grafana's dashboard folder."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        unavailable("kubectl not found: run scripts/install-kubectl.sh")
    docs = (generate.OUT.parent / "docs" / "observability.md").read_text(encoding="utf-8")
    command = re.search(r"`(kubectl create configmap headroom-dashboards .*?) \| kubectl apply -f -`", docs).group(1)
    made = subprocess.run(["bash", "-c", command], cwd=generate.OUT.parent, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    config_map = yaml.safe_load(made.stdout)
    assert config_map["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert set(config_map["data"]) == set(BOARDS)
    assert {name: json.loads(text) for name, text in config_map["data"].items()} == BOARDS


def test_boards_take_the_datasource_and_filters_as_variables():
    for name, board in BOARDS.items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource", name
        assert {"policy", "team"} & set(variables) or name == "headroom-overview.json", name
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, panel["title"])
            assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= generate.WIDTH, (name, panel["title"])
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name


# --- @grafana/schema --------------------------------------------------------------------------------

def typescript() -> tuple[str, Path]:
    """tsc and the node_modules scripts/install-npm.sh installed (outside the repo)."""
    modules = CACHE / "npm" / "node_modules"
    tsc = modules / ".bin" / "tsc"
    if not shutil.which("node") or not tsc.exists() or not (modules / "@grafana" / "schema").is_dir():
        unavailable(f"node, typescript or @grafana/schema not installed under {modules.parent} ({NPM_HINT})")
    return str(tsc), modules


def as_typescript(board: dict) -> str:
    # A .json imported into TypeScript is typed loosely (false passes): the literal must be checked in place.
    return ('import type { Dashboard } from "@grafana/schema";\n'
            f"export const dashboard = {json.dumps(board, indent=2)} satisfies Dashboard;\n")


def test_boards_type_check_against_grafana_schema_and_a_broken_one_does_not(tmp_path):
    tsc, modules = typescript()
    shutil.copy(TYPECHECK / "tsconfig.json", tmp_path / "tsconfig.json")
    (tmp_path / "node_modules").symlink_to(modules)
    for name, board in BOARDS.items():
        (tmp_path / f"{Path(name).stem}.ts").write_text(as_typescript(board))
    broken = copy.deepcopy(BOARDS["headroom-overview.json"])
    broken["panels"][0]["gridPos"] = "x"
    (tmp_path / "broken.ts").write_text(as_typescript(broken))

    proc = subprocess.run([tsc, "-p", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    errors = [line for line in proc.stdout.splitlines() if "error TS" in line]
    assert proc.returncode != 0 and errors, proc.stdout + proc.stderr
    others = [e for e in errors if not e.startswith("broken.ts")]
    assert not others, "\n".join(others)
    assert any("GridPos" in e for e in errors), "\n".join(errors)


# --- the metrics the panels query ------------------------------------------------------------------

TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\d[\w.]*|[A-Za-z_:][\w:]*|\S')
IDENTIFIER = re.compile(r"[A-Za-z_:][\w:]*\Z")
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"offset", "bool", "and", "or", "unless"}
AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                "count_values", "group"}
CLOSING = {"(": ")", "[": "]", "{": "}"}


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names it matches on) for every vector selector in a PromQL expression."""
    tokens = TOKEN.findall(re.sub(r"\$\{?\w+\}?", "0", expr))  # Grafana variables stand for numbers or strings

    def skip(i: int) -> int:
        """Index just past the bracket that closes tokens[i]."""
        close = CLOSING[tokens[i]]
        while tokens[i] != close:
            i += 1
        return i + 1

    out, i = [], 0
    while i < len(tokens):
        tok, nxt = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in GROUPING and nxt == "(":
            i = skip(i + 1)
        elif tok == "[":
            i = skip(i)
        elif IDENTIFIER.match(tok) and tok not in KEYWORDS | AGGREGATIONS and nxt != "(":
            labels: set[str] = set()
            i += 1
            if nxt == "{":
                end = skip(i)
                labels = {tokens[j] for j in range(i + 1, end) if tokens[j - 1] in "{," and IDENTIFIER.match(tokens[j])}
                i = end
            out.append((tok, labels))
        else:
            i += 1
    return out


def test_selector_parser_on_the_shapes_the_boards_use():
    expr = ('histogram_quantile(0.99, sum by (le) (rate(a_bucket{x=~"$p", y="b,c"}[$__rate_interval]))) '
            '/ on(instance) group_left(z) (b offset 1h and on(instance) c == 1) * $cost + count(d) or vector(0)')
    assert selectors(expr) == [("a_bucket", {"x", "y"}), ("b", set()), ("c", set()), ("d", set())]


def panel_exprs() -> list[tuple[str, str, str]]:
    return [(name, panel["title"], target["expr"]) for name, board in BOARDS.items()
            for panel in board["panels"] for target in panel["targets"]]


def variable_queries() -> list[tuple[str, str, str]]:
    """(board, metric, label) of every label_values() variable."""
    out = []
    for name, board in BOARDS.items():
        for v in board["templating"]["list"]:
            if v["type"] == "query":
                match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["query"])
                assert match, (name, v["query"])
                out.append((name, match[1], match[2]))
    return out


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """headroom's real /metrics endpoint over the state the real controller loop published (a day on the
    embedded cluster: planned and emergency preemptions, realized error, teams, an invalid policy)."""
    state = reconciled_state(tmp_path_factory.mktemp("reconciled"))
    server = m.serve(StateHolder(state), 0, lambda: True, lambda: True, host="127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    yield server, state, text
    server.shutdown()


def exported_labels(text: str) -> dict[str, set[str]]:
    """Sample name -> every label name it carries, from an exposition text."""
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


def test_every_queried_metric_is_exported_by_the_live_endpoint(live):
    exported = exported_labels(live[2])
    queried = {}
    for board, title, expr in panel_exprs():
        for name, labels in selectors(expr):
            queried.setdefault(name, set()).update(labels)
            assert name in exported, f"{board} / {title}: {name} is not exported by /metrics ({expr})"
            assert labels <= exported[name], f"{board} / {title}: {name} has no label {labels - exported[name]}"
    for board, name, label in variable_queries():
        assert label in exported.get(name, ()), f"{board}: variable over {name}/{label} has nothing to list"
    # the parse found what the boards are about, so the check above cannot pass on nothing
    assert {m.RESERVED.name, m.FORECAST.name, m.TEAM_USED.name, m.RECONCILE_DURATION.name + "_bucket"} <= set(queried)
    panels_metrics = {n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in queried}
    unused = {x.name for x in m.METRICS} - panels_metrics
    assert not unused, f"exported but on no board: {unused}"


def test_counters_are_read_through_rate_or_increase_and_gauges_never_are():
    """A counter's value is its process's count since it started (a restart sets it back to 0, each replica counts its
    own): a panel reads it only as rate() or increase(). A gauge under rate() would chart its slope, not its value."""
    kinds = {x.name: x.kind for x in m.METRICS}
    rated = re.compile(r"\b(rate|increase)\((\w+)")
    for board, title, expr in panel_exprs():
        inside = {name for _, name in rated.findall(expr)}
        for name, _ in selectors(expr):
            base = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            kind = kinds.get(name) or kinds.get(base)
            if kind in ("counter", "histogram"):
                assert name in inside, f"{board} / {title}: counter {name} read without rate() or increase()"
            else:
                assert name not in inside, f"{board} / {title}: gauge {name} under rate() or increase()"


def concrete(expr: str, policy: str) -> str:
    """The query as Grafana sends it: variables filled in ("All" for multi-value ones)."""
    expr = (expr.replace('=~"$policy"', '=~".*"').replace('="$policy"', f'="{policy}"')
            .replace('=~"$team"', '=~".*"').replace("$__rate_interval", "1m").replace("$__range", "1h")
            .replace("$gpu_hour_cost", "2.5"))
    assert "$" not in expr, f"a variable the test does not fill in: {expr}"
    return expr


def query(url: str, expr: str, at: float) -> dict:
    import requests
    resp = requests.get(f"{url}/api/v1/query", params={"query": expr, "time": at}, timeout=10)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body.get('error')}"
    return body["data"]


@pytest.fixture(scope="module")
def prometheus_scraping(live, tmp_path_factory):
    """A real Prometheus scraping the live endpoint every second, once it has a few scrapes."""
    binary = prom_servers.binaries()["prometheus"]
    if not binary:
        unavailable("prometheus not installed (run scripts/install-servers.sh)")
    work = tmp_path_factory.mktemp("prom-scrape")
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: headroom\n    static_configs: [{{targets: ['127.0.0.1:{live[0].port}']}}]\n")
    port = free_port()
    proc = ServerProcess([binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                          f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], work / "prometheus.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=1).status == 200, 60, "prometheus", proc)
        wait_until(lambda: query(url, f"count_over_time({m.RECONCILES.name}[1m]) >= 4", time.time())["result"],
                   60, "four scrapes of /metrics", proc, interval=0.5)
        yield url
    finally:
        proc.stop()


def test_every_panel_query_returns_data_from_a_real_prometheus(live, prometheus_scraping):
    policy = next(name for name, p in live[1].policies.items() if p.valid)
    now = time.time()
    empty = []
    for board, title, expr in panel_exprs():
        if not query(prometheus_scraping, concrete(expr, policy), now)["result"]:
            empty.append(f"{board} / {title}: {expr}")
    assert not empty, "queries with no data:\n" + "\n".join(empty)
    for board, name, label in variable_queries():
        values = query(prometheus_scraping, f"count by ({label}) ({name})", now)["result"]
        assert values, f"{board}: label_values({name}, {label}) lists nothing"


def test_each_policy_the_forecast_board_lists_gets_a_forecast_panel_with_data(live, prometheus_scraping):
    """The forecast board repeats its first panel per value of its `policy` variable: a policy it lists but cannot
    draw (an invalid one exports only headroom_policy_valid) would be a panel that is always empty."""
    assert not live[1].policies["inference/broken"].valid  # the day holds an invalid policy to leave out
    variable = next(v for v in BOARDS["headroom-forecast.json"]["templating"]["list"] if v["name"] == "policy")
    name, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["query"]).groups()
    answer = query(prometheus_scraping, f"count by ({label}) ({name})", time.time())
    listed = [r["metric"][label] for r in answer["result"]]
    assert listed
    repeated = panel("headroom-forecast.json", "Forecast 1 h ahead vs actual: $policy")
    for policy in listed:
        for target in repeated["targets"]:
            assert query(prometheus_scraping, concrete(target["expr"], policy), time.time())["result"], (policy, target)


def test_leader_filter_drops_a_standbys_series(live, prometheus_scraping):
    # the one scraped replica is the leader: the filter keeps its series; inverted, it keeps none
    kept = query(prometheus_scraping, generate.leader(m.CAPACITY.name), time.time())["result"]
    assert [float(r["value"][1]) for r in kept] == [live[1].capacity_gpus]
    dropped = generate.leader(m.CAPACITY.name).replace("== 1", "== 0")
    assert query(prometheus_scraping, dropped, time.time())["result"] == []


def panel(board: str, title: str) -> dict:
    return next(p for p in BOARDS[board]["panels"] if p["title"] == title)


def test_realized_error_panels_name_the_naive_forecast_the_controller_scales_by():
    import inspect

    from controller import observe
    from forecast.metrics import seasonal_scale

    # the controller scales the realized error by the fitting window's seasonal difference at its default season:
    # the same hour one day earlier (24 hourly steps), not one week earlier
    assert "seasonal_scale(hourly.to_numpy())" in inspect.getsource(observe)
    assert inspect.signature(seasonal_scale).parameters["season"].default == 24
    for title in ("Realized scaled error", "Scaled error now"):
        description = panel("headroom-forecast.json", title)["description"]
        assert "last week" not in description, (title, description)
        assert "same hour the day before" in description, (title, description)


def test_forecast_panel_says_what_its_lines_mean(live):
    """The band is the forecast of each hour's statistic (the hourly peak for `statistic: max`) at every quantile the
    controller exports, the top one the headroom quantile; demand leans on preemption headroom above what the
    reservation serves, and is beyond the headroom above the top band."""
    p = panel("headroom-forecast.json", "Forecast 1 h ahead vs actual: $policy")
    description = p["description"]
    chat = live[1].policies["inference/chat"]
    assert max(chat.forecast.columns) == 0.99  # the headroom quantile tops the band (the policy's headroomQuantile)
    assert "Actual above the top band means the reservation leaned on preemption headroom" not in description
    assert "above the reservation line it leans on preemption headroom" in description
    assert "above the top band (the headroom quantile)" in description
    assert "hour's statistic" in description  # why single samples sit below the hourly peak's median
    assert [t["legendFormat"] for t in p["targets"]][1] == "actual (latest sample)"


# --- what the panels' PromQL answers over given series (promtool's rule unit tests: no server) ------------------

def promtool() -> str:
    binary = prom_servers.binaries()["promtool"]
    if not binary:
        unavailable("promtool not installed (run scripts/install-servers.sh)")
    return str(binary)


def promql_value(tmp_path: Path, series: dict[str, str], expr: str, at: str, expected: float | None) -> str:
    """promtool's rule unit test of `expr` evaluated `at` (e.g. "10m") over `series` (selector -> promtool's values
    notation, one value a minute): '' when the answer is one sample of `expected` (no sample at all for None),
    else promtool's report."""
    inputs = "".join(f"      - series: '{s}'\n        values: '{v}'\n" for s, v in series.items())
    samples = "[]" if expected is None else f"\n          - value: {expected}"
    (tmp_path / "test.yml").write_text(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" + inputs +
        f"    promql_expr_test:\n      - expr: {json.dumps(expr)}\n        eval_time: {at}\n"
        f"        exp_samples: {samples}\n")
    proc = subprocess.run([promtool(), "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                          timeout=60)
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


def stat_expr(board: str, title: str) -> str:
    (target,) = panel(board, title)["targets"]
    return concrete(target["expr"], "inference/chat")


def test_the_policies_not_planned_stat_names_every_refusal_that_exports_valid_0():
    """headroom_policy_valid is 0 for every policy the reconcile refuses, not only an invalid spec: one whose minimum
    does not fit (PlanInfeasible) or whose target is missing (TargetMissing) has a valid spec. The stat that counts them
    must say each reason, or a missing Deployment reads as a spec to fix."""
    import inspect

    from controller.reconcile import Reconciler

    refusals = re.search(r'why = ("\w+" if .*)', inspect.getsource(Reconciler))
    assert refusals, "the reconcile's refusal reasons moved: update this test"
    reasons = re.findall(r'"(\w+)"', refusals[1])
    assert reasons == ["PlanInfeasible", "TargetMissing", "InvalidSpec"], reasons
    p = panel("headroom-controller.json", "Policies not planned")
    assert [r for r in reasons if r not in p["description"]] == [], p["description"]
    assert "whose spec is invalid" not in p["description"]


def test_policies_not_planned_counts_the_leaders_policies_only(tmp_path):
    """A replica that lost the lease keeps exporting its last state (controller.loop publishes it with leader 0):
    a policy it last saw invalid, since fixed, is not invalid now; nor is one invalid policy two."""
    expr = stat_expr("headroom-controller.json", "Policies not planned")
    standby_saw_it_invalid = {
        'headroom_leader{instance="a"}': "1x10", 'headroom_leader{instance="b"}': "0x10",
        'headroom_policy_valid{instance="a", policy="inference/chat"}': "1x10",
        'headroom_policy_valid{instance="b", policy="inference/chat"}': "0x10"}
    assert promql_value(tmp_path, standby_saw_it_invalid, expr, "5m", 0) == ""
    both_see_it = {**standby_saw_it_invalid, 'headroom_policy_valid{instance="a", policy="inference/chat"}': "0x10"}
    assert promql_value(tmp_path, both_see_it, expr, "5m", 1) == ""


def test_time_since_the_last_reconcile_grows_when_no_replica_leads(tmp_path):
    """With the lease held by no one (the API server unreachable: both replicas publish leader 0), the stat must show
    how long ago a reconcile last finished, not 'No data'."""
    expr = stat_expr("headroom-controller.json", "Since the last reconcile")
    # replica a reconciled every minute until 5m, then lost the lease; b never led (its timestamp stays 0)
    series = {'headroom_leader{instance="a"}': "1x5 0x10", 'headroom_leader{instance="b"}': "0x15",
              'headroom_last_reconcile_timestamp_seconds{instance="a"}': "0+60x5 300x10",
              'headroom_last_reconcile_timestamp_seconds{instance="b"}': "0x15"}
    assert promql_value(tmp_path, series, expr, "4m", 0) == ""  # leading, reconciled this minute
    assert promql_value(tmp_path, series, expr, "10m", 300) == ""


def test_the_headroom_at_risk_panel_names_every_reason_that_sets_it():
    """headroom_headroom_at_risk is 1 for every reason HeadroomAtRisk is True or Unknown with: the panel that charts it
    must say what each means, or a 1 with an unnamed reason (CohortsUnreadable) is left to guess."""
    import inspect

    from controller.reconcile import headroom_condition

    at_risk = re.findall(r'"HeadroomAtRisk", "(?:True|Unknown)", "(\w+)"', inspect.getsource(headroom_condition))
    assert len(at_risk) >= 5, at_risk
    # a reason of a covered headroom that still asks for a fix (CohortReclaims) is named too
    at_risk += [r for r in re.findall(r'"HeadroomAtRisk", "False", "(\w+)"', inspect.getsource(headroom_condition))
                if r != "HeadroomCovered"]
    description = panel("headroom-overview.json", "Headroom at risk")["description"]
    assert "True or Unknown" in description
    assert [r for r in at_risk if r not in description] == []


def test_a_panel_mixing_seconds_and_counts_gives_the_seconds_their_unit():
    """'Statuses written beside' draws the status lag (seconds) beside the statuses waiting (a count): the lag must be
    shown in seconds, not as a bare number on the count's axis."""
    p = panel("headroom-controller.json", "Statuses written beside")
    lag = next(t["legendFormat"] for t in p["targets"] if "_seconds_bucket" in t["expr"])
    overrides = {o["matcher"]["options"]: {x["id"]: x["value"] for x in o["properties"]}
                 for o in p["fieldConfig"]["overrides"] if o["matcher"]["id"] == "byName"}
    assert p["fieldConfig"]["defaults"]["unit"] == "short"  # the waiting statuses
    assert overrides.get(lag, {}).get("unit") == "s", p["fieldConfig"]


def test_a_ratio_shown_in_percent_is_described_in_percent():
    """A percentunit panel shows a ratio of 1 as 100%: its description must speak of 100%, not of 1."""
    for name, board in BOARDS.items():
        for p in board["panels"]:
            if p["fieldConfig"]["defaults"]["unit"] == "percentunit":
                assert not re.search(r"\b(above|below|over|under) 1\b", p["description"]), (name, p["title"])


def test_the_headroom_guarantee_holds_the_reclaimable_gpus_against_the_band(tmp_path):
    """The controller's HeadroomAtRisk compares the GPUs reclaimable within the deadline with the headroom band, the
    policies' headroom within what is lent. Where the headroom quantiles ask for more than is lent (here 30 of 20), the
    guarantee panel must draw the band (20), which the 25 reclaimable GPUs cover, not the ask, which would show a
    breach the controller does not see (its reason is HeadroomAboveCapacity, drawn beside). The ask drawn is the one
    the controller compares with the band: not a forecast-only policy's beside the active one (the sum of every
    policy's headroom_preemption_headroom_gpus drew 66 here)."""
    p = panel("headroom-overview.json", "Preemption headroom guarantee")
    exprs = {t["legendFormat"]: concrete(t["expr"], "inference/chat") for t in p["targets"]}
    series = {'headroom_leader{instance="a"}': "1x10", 'headroom_leader{instance="b"}': "0x10",
              'headroom_preemption_headroom_gpus{instance="a", policy="inference/chat"}': "30x10",
              'headroom_headroom_band_gpus{instance="a"}': "20x10",
              'headroom_headroom_band_gpus{instance="b"}': "40x10",  # a standby's last state
              'headroom_preemption_headroom_gpus{instance="a", policy="inference/batch"}': "36x10",  # forecast-only
              'headroom_headroom_wanted_gpus{instance="a"}': "30x10",
              'headroom_headroom_wanted_gpus{instance="b"}': "50x10",
              'headroom_reclaimable_gpus{instance="a", policy="inference/chat"}': "25x10"}
    assert promql_value(tmp_path, series, exprs["reclaimable within deadline"], "5m", 25) == ""
    assert promql_value(tmp_path, series, exprs["headroom band"], "5m", 20) == ""
    assert promql_value(tmp_path, series, exprs["headroom quantiles ask"], "5m", 30) == ""


def test_gpus_by_use_stacks_only_what_active_policies_reserve(tmp_path):
    """A forecast-only policy's headroom_reserved_gpus is what it would reserve: its target keeps the replicas it has.
    Stacked as inference, it took GPUs from the idle ones that were not reserved (on the embedded cluster, two policies
    of which one forecast-only stacked 128 GPUs reserved beside 8 training, 8 over the 128-GPU cluster)."""
    p = panel("headroom-overview.json", "GPUs by use")
    exprs = {t["legendFormat"]: concrete(t["expr"], "inference/chat") for t in p["targets"]}
    series = {'headroom_leader{instance="a"}': "1x10", 'headroom_leader{instance="b"}': "0x10",
              'headroom_capacity_gpus{instance="a"}': "128x10", 'headroom_training_gpus{instance="a"}': "8x10",
              'headroom_policy_info{instance="a", policy="inference/chat", mode="active", model="auto: snaive168"}':
                  "1x10",
              'headroom_policy_info{instance="a", policy="inference/batch", mode="forecast-only", '
              'model="auto: snaive168"}': "1x10",
              'headroom_reserved_gpus{instance="a", policy="inference/chat"}': "90x10",
              'headroom_reserved_gpus{instance="a", policy="inference/batch"}': "38x10",
              # a standby's last state: the chat policy as it saw it
              'headroom_policy_info{instance="b", policy="inference/chat", mode="active", model="auto: snaive168"}':
                  "1x10",
              'headroom_reserved_gpus{instance="b", policy="inference/chat"}': "70x10"}
    assert promql_value(tmp_path, series, exprs["inference (reserved)"], "5m", 90) == ""
    assert promql_value(tmp_path, series, exprs["training"], "5m", 8) == ""
    assert promql_value(tmp_path, series, exprs["idle or not planned"], "5m", 30) == ""
    assert "forecast-only" in p["description"]


def test_the_savings_count_only_training_on_lent_capacity(tmp_path):
    """chat is active, lending to research (24 GPUs of training); batch is forecast-only and names product (40 GPUs of
    training headroom lends nothing to). The savings panels counted product's training as saved: 64 GPU-hours an hour
    (160 $ at 2.5 $ a GPU-hour) where 24 (60 $) ran on lent capacity. Only the GPU-seconds on lent capacity count."""
    series = {'headroom_leader{instance="a"}': "1x90", 'headroom_leader{instance="b"}': "0x90",
              'headroom_training_gpus{instance="a"}': "64x90",
              'headroom_team_used_gpu_seconds_total{instance="a", team="research"}': "0+1440x90",
              'headroom_team_used_gpu_seconds_total{instance="a", team="product"}': "0+2400x90",
              'headroom_team_used_on_lent_gpu_seconds_total{instance="a", team="research"}': "0+1440x90",
              'headroom_team_used_on_lent_gpu_seconds_total{instance="a", team="product"}': "0x90"}
    (saved_per_hour,) = panel("headroom-overview.json", "Saved per hour")["targets"]
    # Grafana's $__rate_interval is at least 4 scrapes: 5m here, 5 of the test's samples a minute apart
    saved_per_hour = concrete(saved_per_hour["expr"].replace("$__rate_interval", "5m"), "inference/chat")
    assert promql_value(tmp_path, series, saved_per_hour, "80m", 60) == ""
    assert promql_value(tmp_path, series, stat_expr("headroom-overview.json", "Training GPU-hours on lent capacity"),
                        "80m", 24) == ""
    assert promql_value(tmp_path, series, stat_expr("headroom-overview.json", "Cost saved vs dedicated clusters"),
                        "80m", 60) == ""
