"""`headroom run` on its way out, and a replica that no longer leads: the signals that stop it, the work beside the
reconciles (the hour's refits, the trainings) that it must neither wait for nor go on with, and MLflow, which is
outside the Lease. On the real kube-apiserver, Prometheus and `mlflow server` (tests/servers/,
tests/mlflow_server.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.conftest import ROOT


def test_a_process_with_trainings_queued_exits_without_running_them(tmp_path, shared_data):
    """Retraining runs beside the reconciles, a series at a time (10 s each on three weeks of hours): the schedule
    queues every series at once. The trainer's ThreadPoolExecutor had the interpreter run every queued training
    before it exited: `headroom run` told to stop, its Lease already let go, went on registering model versions for
    minutes, until the kubelet killed it. It exits at once now; the training under way is cut, as a kill cuts it."""
    script = textwrap.dedent(f"""
        import time
        import pandas as pd
        from controller.loop import BackgroundTrainer
        from forecast.history import load_history
        from training.pipeline import TrainSettings

        hourly = load_history({str(shared_data / "traces" / "nasa_http_1995_5min.csv")!r}).resample("1h").max()
        hourly = hourly.dropna().iloc[-24 * 21:]
        trainer = BackgroundTrainer("sqlite:///{tmp_path / 'mlflow.db'}", TrainSettings(statistic="max"))
        for k in range(4):
            trainer(f"series{{k}}", hourly, pd.Timestamp(hourly.index[-1]))
        time.sleep(2)  # the first under way
        print("leaving", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "leaving" in line:
                break
        left = time.monotonic()
        status = proc.wait(timeout=120)
        took = time.monotonic() - left
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status == 0 and took < 5, took
