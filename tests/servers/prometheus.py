"""A real Prometheus with backfilled history (promtool create-blocks-from openmetrics)."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import ServerError, ServerProcess, find_binary, free_port, wait_until

METRIC = "headroom_demand"


def binaries() -> dict[str, str | None]:
    return {"prometheus": find_binary("prometheus", "HEADROOM_PROMETHEUS"),
            "promtool": find_binary("promtool", "HEADROOM_PROMTOOL")}


def write_openmetrics(series: pd.Series, path: Path, metric: str = METRIC,
                      labels: dict[str, str] | None = None) -> int:
    """Write one gauge series as OpenMetrics text; NaN (a gap) is no sample at all.

    Timestamps are in seconds (milliseconds land in the year ~58,000) and sorted
    (out-of-order samples inside a block are dropped silently). Returns the
    number of samples written.
    """
    series = series.sort_index()
    label_text = ""
    if labels:
        label_text = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    written = 0
    with path.open("w") as out:
        out.write(f"# HELP {metric} Backfilled demand for headroom tests.\n# TYPE {metric} gauge\n")
        for stamp, value in series.items():
            if value is None or not math.isfinite(float(value)):
                continue
            out.write(f"{metric}{label_text} {float(value)!r} {int(pd.Timestamp(stamp).timestamp())}\n")
            written += 1
        out.write("# EOF\n")
    return written


def backfill(openmetrics: Path, data_dir: Path, promtool: str | None = None,
             max_block_duration: str = "24h", timeout: float = 300.0) -> None:
    promtool = promtool or binaries()["promtool"]
    if not promtool:
        raise ServerError("promtool not found: run scripts/install-servers.sh")
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics),
                           str(data_dir), f"--max-block-duration={max_block_duration}"],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ServerError(f"promtool backfill failed ({proc.returncode}):\n"
                          f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@dataclass
class PrometheusServer:
    """A running Prometheus serving `data_dir`; `url` is its HTTP root."""
    data_dir: Path
    workdir: Path
    port: int = 0
    process: ServerProcess | None = field(default=None, repr=False)
    flags: tuple[str, ...] = ()  # more command-line flags (e.g. a short --query.timeout)
    route_prefix: str = ""  # --web.route-prefix: every path, the API's too, under it (e.g. "/prometheus")
    userinfo: str = ""  # "user:password" the server's --web.config.file asks for (basic auth)
    more_config: str = ""  # more of prometheus.yml (e.g. a remote_read section)
    scheme: str = "http"  # "https" with a tls_server_config in its --web.config.file

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.userinfo + '@' if self.userinfo else ''}127.0.0.1:{self.port}{self.route_prefix}"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        binary = binaries()["prometheus"]
        if not binary:
            raise ServerError("prometheus not found: run scripts/install-servers.sh")
        self.port = self.port or free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n" + self.more_config)
        self.process = ServerProcess(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.data_dir}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=3650d",  # backfilled history must survive start-up
             "--log.level=warn", *([f"--web.route-prefix={self.route_prefix}"] if self.route_prefix else []),
             *self.flags],
            self.workdir / "prometheus.log")
        try:
            wait_until(self._ready, timeout, f"prometheus on :{self.port}", self.process)
        except ServerError:
            self.stop()  # not left running behind a failed test
            raise
        return self

    def _ready(self) -> bool:
        import requests
        from urllib3.exceptions import InsecureRequestWarning

        with warnings.catch_warnings():  # whether it is up, not whether it is trusted: the tests' business
            warnings.simplefilter("ignore", InsecureRequestWarning)
            return requests.get(f"{self.url}/-/ready", timeout=1, verify=False).status_code == 200

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def restart(self) -> None:
        """Same port and data (waits for the data-dir lock to be released)."""
        self.stop()
        self.start()


def start_prometheus(blocks: Path, workdir: Path | None = None, flags: tuple[str, ...] = (),
                     route_prefix: str = "", userinfo: str = "", more_config: str = "",
                     scheme: str = "http") -> PrometheusServer:
    """Start a Prometheus on a private copy of backfilled `blocks`, with more command-line `flags`, its paths under
    `route_prefix`, its `url` holding `userinfo` and `scheme`, `more_config` in its prometheus.yml."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="headroom-prom-"))
    data_dir = workdir / "data"
    shutil.copytree(blocks, data_dir)
    return PrometheusServer(data_dir=data_dir, workdir=workdir, flags=flags, route_prefix=route_prefix,
                            userinfo=userinfo, more_config=more_config, scheme=scheme).start()


def connections_accepted(url: str) -> int:
    """Connections the Prometheus at `url` has accepted (its own metric; this read opens one more)."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return int(float(re.search(r'net_conntrack_listener_conn_accepted_total\{listener_name="http"\} (\S+)',
                               text).group(1)))


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1 signed by it, the server's key), made with openssl."""
    ca_key, ca, key, request, cert, names = (directory / n for n in ("ca.key", "ca.crt", "server.key", "server.csr",
                                                                     "server.crt", "names.ext"))
    names.write_text("subjectAltName=IP:127.0.0.1\n")
    for argv in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
                  "-subj", "/CN=headroom-test-ca"],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
                 ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                  "-days", "2", "-extfile", names]):
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True)
    return ca, cert, key


def range_queries_answered(url: str, code: str) -> float:
    """Range queries the Prometheus at `url` has answered with HTTP status `code` (its own metric)."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    found = re.search(rf'prometheus_http_requests_total\{{code="{code}",handler="/api/v1/query_range"\}} (\S+)', text)
    return float(found.group(1)) if found else 0.0
