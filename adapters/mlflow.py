"""Everything MLflow: the one module that imports it, lazily (import costs ~1.4 s).

Store: `tracking_uri` argument, else MLFLOW_TRACKING_URI, else the embedded
default sqlite:///<cwd>/mlflow.db (artifacts beside it under mlartifacts/).
Anything that cannot reach the store raises TrackingError naming the URI.
A series is named in the store (and in its lock's file name) as core.settings.held_series_name holds it: <series>
below is that name, the series itself up to 100 characters.

Locks (one training per series at a time):
  * sqlite store: an fcntl file lock <db dir>/.headroom-locks/<series>.lock;
    the kernel releases it when the process dies, so it never goes stale.
  * remote store: a mutex registered model "headroom.lock-<series>" (lease_name); creating a
    registered model is atomic (unique name), so exactly one trainer wins. It
    carries an expiry tag; a lease older than its expiry (a crashed trainer) is
    broken by deleting it. The only window is two trainers breaking the same
    stale lease at the same moment, which needs a crash plus a race.
"""
from __future__ import annotations

import base64
import contextlib
import logging
import os
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import BadRequest
from core.settings import checked_tracking_uri, held_series_name, shown_url

if TYPE_CHECKING:  # imported when used: mlflow is slow to import
    from mlflow.tracking import MlflowClient

CHAMPION = "champion"
log = logging.getLogger(__name__)


class TrackingError(RuntimeError):
    """The MLflow store cannot be used; the message names its URI."""


class TrainingLocked(RuntimeError):
    """Another training of the same series holds the lock."""


def default_uri() -> str:
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def resolve_uri(uri: str | None = None) -> str:
    """`uri` (checked with the configuration), else MLFLOW_TRACKING_URI (checked here, as it is), else the default."""
    if uri:
        return uri
    from_env = os.environ.get("MLFLOW_TRACKING_URI")
    if not from_env:
        return default_uri()
    try:
        return checked_tracking_uri(from_env)
    except ValueError as exc:
        raise BadRequest(f"MLFLOW_TRACKING_URI: {exc}") from None


def _not_found(exc: BaseException) -> bool:
    """Whether MLflow answered that the thing asked for does not exist."""
    return "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) + str(exc)


def registered_name(series: str) -> str:
    return f"headroom-{held_series_name(series)}"


def lease_name(series: str) -> str:
    """The registered model that is a series' training lease on a tracking server: never a series' own registered
    model (registered_name: headroom-<series>), which a trainer breaking a stale lease would delete."""
    return f"headroom.lock-{held_series_name(series)}"


def experiment_name(series: str) -> str:
    return f"headroom/{held_series_name(series)}"


class Tracker:
    def __init__(self, tracking_uri: str | None = None):
        self.uri = resolve_uri(tracking_uri)
        self.shown = shown_url(self.uri)  # what messages say: never a password
        self._client: MlflowClient | None = None

    # -- connection ---------------------------------------------------------------------------
    @property
    def is_sqlite(self) -> bool:
        return self.uri.startswith("sqlite:")

    @property
    def sqlite_dir(self) -> Path:
        path = self.uri.split(":///", 1)[1] if ":///" in self.uri else "mlflow.db"
        return Path(path).resolve().parent

    @property
    def client(self):
        if self._client is None:
            self.connect()
        return self._client

    def _fail(self, what: str, exc: BaseException) -> TrackingError:
        # MLflow's own message may carry the URL it requested, password and all
        password = urllib.parse.urlsplit(self.uri).password
        cause = str(exc).replace(f":{password}@", ":***@") if password else str(exc)
        return TrackingError(f"MLflow tracking store {self.shown}: {what}: {type(exc).__name__}: {cause}"[:2000])

    def connect(self) -> Tracker:
        """Import mlflow, check the store answers; TrackingError (naming the URI) if not."""
        if self.uri.startswith(("http://", "https://")):
            # Fail fast instead of mlflow's minutes of retries; a caller may set its own.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
            # A REST store prints "View run ... at: URL" to stdout as each run ends: stdout is the command's output.
            os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
            try:
                with urllib.request.urlopen(self._health_request(), timeout=10) as r:
                    if r.status != 200:
                        raise TrackingError(f"MLflow tracking server {self.shown} unhealthy: HTTP {r.status}")
            except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as exc:
                raise TrackingError(f"MLflow tracking server {self.shown} is unreachable: {exc}") from None
        elif self.is_sqlite:
            self._check_writable()
        try:
            from mlflow.tracking import MlflowClient

            with self._creation_lock():
                client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
                client.search_experiments(max_results=1)  # creates the schema of a fresh store
        except TrackingError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store failure is a tracking failure
            raise self._fail("cannot open the store", exc) from None
        self._client = client
        return self

    def _health_request(self) -> urllib.request.Request:
        """GET <uri>/health; credentials in the URI (as MLflow's requests takes them) go as basic auth, since urllib
        would read `user:pass@host` as a host name."""
        parts = urllib.parse.urlsplit(self.uri.rstrip("/") + "/health")
        if parts.username is None:
            return urllib.request.Request(parts.geturl())
        plain = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        token = base64.b64encode(urllib.parse.unquote(f"{parts.username}:{parts.password or ''}").encode()).decode()
        return urllib.request.Request(plain, headers={"Authorization": f"Basic {token}"})

    def _check_writable(self) -> None:
        """A sqlite store's folder and file must be writable: fail at once, not after mlflow's minutes of retries."""
        folder = self.sqlite_dir
        db = Path(self.uri.split(":///", 1)[1]) if ":///" in self.uri else None
        if db is not None and db.is_dir():  # sqlite cannot open it, and mlflow retries for minutes
            raise TrackingError(f"MLflow tracking store {self.shown}: {db} is a directory, not a sqlite file: name a "
                                f"file, e.g. sqlite:///{db / 'mlflow.db'}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".headroom-write-check-"):
                pass
            if db is not None and db.is_file():
                with db.open("r+b"):
                    pass
        except OSError as exc:
            raise TrackingError(f"MLflow tracking store {self.shown}: {folder} is not writable: "
                                f"{exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _creation_lock(self) -> Iterator[None]:
        """Two processes opening a fresh sqlite store at once would both create its tables ("table experiments
        already exists"): the first open of a store is serialized by an fcntl lock beside it."""
        if not self.is_sqlite:
            yield
            return
        import fcntl

        folder = self.sqlite_dir / ".headroom-locks"
        folder.mkdir(parents=True, exist_ok=True)
        # a leading dot: no series name (a letter or digit first) names this file, as <series>.lock would
        with (folder / ".store-creation.lock").open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # blocks only while another process creates the schema
            yield

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn store failures inside the block into TrackingError naming the URI."""
        try:
            yield
        except (TrackingError, TrainingLocked):
            raise
        except Exception as exc:  # noqa: BLE001
            from mlflow.exceptions import MlflowException

            if isinstance(exc, (MlflowException, OSError, ConnectionError)):
                raise self._fail(what, exc) from exc
            raise

    # -- experiments and runs ------------------------------------------------------------------
    def experiment(self, name: str) -> str:
        with self.guard(f"get or create experiment {name!r}"):
            exp = self.client.get_experiment_by_name(name)
            if exp is not None and exp.lifecycle_stage == "deleted":  # MLflow keeps a deleted one under its name
                raise TrackingError(
                    f"MLflow tracking store {self.shown}: experiment {name!r} (id {exp.experiment_id}) is deleted: "
                    f"to track this series again, with MLFLOW_TRACKING_URI={self.shown} restore it (mlflow experiments "
                    f"restore --experiment-id {exp.experiment_id}) or delete it for good (mlflow gc --experiment-ids "
                    f"{exp.experiment_id})")
            if exp is not None:
                return exp.experiment_id
            location = None
            if self.is_sqlite:  # not ./mlruns relative to whatever cwd the trainer had
                safe = name.replace("/", "_")
                location = (self.sqlite_dir / "mlartifacts" / safe).as_uri()
            try:
                return self.client.create_experiment(name, artifact_location=location)
            except Exception:  # created concurrently
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                return exp.experiment_id

    def start_run(self, experiment_id: str, run_name: str, parent: str | None = None,
                  tags: dict[str, str] | None = None) -> str:
        tags = dict(tags or {})
        if parent:
            tags["mlflow.parentRunId"] = parent
        with self.guard("create run"):
            return self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        with self.guard("log params"):
            for i in range(0, len(items), 100):
                self.client.log_batch(run_id, params=items[i:i + 100])

    def log_metrics(self, run_id: str, metrics: Sequence[tuple[str, float | None, int, int | None]]) -> None:
        """(key, value, step, timestamp_ms or None) rows; missing (None) and non-finite values are skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, float(v), ts if ts is not None else now, int(step))
                for k, v, step, ts in metrics if v is not None and v == v and abs(float(v)) != float("inf")]
        with self.guard("log metrics"):
            for i in range(0, len(rows), 500):
                self.client.log_batch(run_id, metrics=rows[i:i + 500])

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        with self.guard("set run tags"):
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        with self.guard(f"upload artifact {Path(path).name}"):
            self.client.log_artifact(run_id, str(path), artifact_path)

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        with self.guard("end run"):
            self.client.set_terminated(run_id, status)

    def delete_run(self, run_id: str) -> None:
        with self.guard("delete run"):
            self.client.delete_run(run_id)

    def find_run(self, experiment_id: str, tag: str, value: str) -> str | None:
        """The first run created with this tag (by start time, then id: every process finds the same one)."""
        with self.guard("search runs"):
            runs = self.client.search_runs([experiment_id], filter_string=f"tags.`{tag}` = '{value}'",
                                           max_results=1, order_by=["attributes.start_time ASC",
                                                                    "attributes.run_id ASC"])
        return runs[0].info.run_id if runs else None

    def last_finished(self, experiment_id: str, tag: str, value: str):
        """The newest run with this tag that ended FINISHED (an mlflow Run: its tags, params, latest metrics), or
        None."""
        with self.guard("search runs"):
            runs = self.client.search_runs([experiment_id], max_results=1,
                                           filter_string=f"tags.`{tag}` = '{value}' and attributes.status = 'FINISHED'",
                                           order_by=["attributes.start_time DESC", "attributes.run_id DESC"])
        return runs[0] if runs else None

    def running(self, experiment_id: str, kinds: Sequence[str]) -> dict[str, str]:
        """The RUNNING runs tagged `headroom.kind` in `kinds`: each id's kind."""
        with self.guard("search runs"):
            running = self.client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'",
                                              max_results=1000)
        return {r.info.run_id: r.data.tags["headroom.kind"] for r in running
                if r.data.tags.get("headroom.kind") in kinds}

    def end_runs(self, run_ids: Sequence[str], status: str, why: str) -> None:
        """End runs `run_ids` with `status`, tagged `headroom.error` `why`."""
        with self.guard("end running runs"):
            for run_id in run_ids:
                self.client.set_tag(run_id, "headroom.error", why)
                self.client.set_terminated(run_id, status)

    def run_tags(self, run_id: str) -> dict[str, str]:
        with self.guard("get run"):
            return dict(self.client.get_run(run_id).data.tags)

    # -- model artifacts ---------------------------------------------------------------------------
    def log_model(self, run_id: str, card: bytes) -> str:
        """Store a model card (JSON: a model described as data, never executable) as artifact model/card.json;
        returns the model's source URI."""
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            folder.mkdir()
            (folder / "card.json").write_bytes(card)
            with self.guard("upload model"):
                self.client.log_artifacts(run_id, str(folder), "model")
                return self.client.get_run(run_id).info.artifact_uri.rstrip("/") + "/model"

    def load_model_card(self, run_id: str, max_bytes: int = 65536) -> bytes:
        """The raw model card of a run (read as bytes, never executed); TrackingError if it cannot be read. One the
        store lists as over `max_bytes` is refused before it is downloaded (a card forged to gigabytes would fill the
        disk first); one listed with no size is checked once downloaded."""
        card = "model/card.json"

        def within_limit(size: int | None) -> None:
            if (size or 0) > max_bytes:
                raise OSError(f"model card is {size} bytes, over the {max_bytes}-byte limit")

        with tempfile.TemporaryDirectory() as tmp, self.guard(f"download the model card of run {run_id}"):
            within_limit({f.path: f.file_size for f in self.client.list_artifacts(run_id, "model")}.get(card))
            local = Path(self.client.download_artifacts(run_id, card, tmp))
            within_limit(local.stat().st_size)
            return local.read_bytes()

    # -- registry ------------------------------------------------------------------------------------
    def ensure_registered(self, name: str) -> None:
        with self.guard(f"registered model {name}"):
            try:
                self.client.get_registered_model(name)
            except Exception as exc:  # noqa: BLE001
                if not _not_found(exc):
                    raise
                try:
                    self.client.create_registered_model(name, description="headroom demand forecaster")
                except Exception:  # noqa: BLE001 - created concurrently
                    self.client.get_registered_model(name)

    def create_version(self, name: str, source: str, run_id: str, tags: dict[str, Any]) -> str:
        self.ensure_registered(name)
        with self.guard(f"create a version of {name}"):
            mv = self.client.create_model_version(name, source, run_id=run_id,
                                                  tags={k: str(v) for k, v in tags.items()})
            return str(mv.version)

    def versions_of_run(self, name: str, run_id: str) -> list:
        """The versions of registered model `name` made from run `run_id` (ModelVersions, with their tags)."""
        with self.guard(f"search the versions of {name}"):
            return list(self.client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'"))

    def set_version_tags(self, name: str, version: str, tags: dict[str, Any]) -> None:
        with self.guard(f"tag {name} v{version}"):
            for k, v in tags.items():
                self.client.set_model_version_tag(name, version, k, str(v))

    def champion(self, name: str):
        """The champion ModelVersion of registered model `name`, or None."""
        with self.guard(f"read alias {CHAMPION} of {name}"):
            try:
                return self.client.get_model_version_by_alias(name, CHAMPION)
            except Exception as exc:  # noqa: BLE001
                from mlflow.exceptions import MlflowException

                if isinstance(exc, MlflowException) and exc.error_code in ("RESOURCE_DOES_NOT_EXIST",
                                                                            "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                    return None
                raise

    def promote(self, name: str, version: str) -> None:
        with self.guard(f"set alias {CHAMPION} of {name}"):
            self.client.set_registered_model_alias(name, CHAMPION, version)

    # -- locking ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, series: str, ttl_seconds: float = 7200.0) -> Iterator[None]:
        if self.is_sqlite:
            with self._file_lock(series):
                yield
        else:
            with self._lease(series, ttl_seconds):
                yield

    @contextlib.contextmanager
    def _file_lock(self, series: str) -> Iterator[None]:
        import fcntl

        folder = self.sqlite_dir / ".headroom-locks"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{held_series_name(series)}.lock"
        handle = path.open("a+")
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                raise TrainingLocked(f"series {series!r} is being trained by another process "
                                     f"(lock {path}: {handle.read().strip() or 'held'})") from None
            handle.seek(0)
            handle.truncate()
            since = time.strftime("%FT%TZ", time.gmtime())
            handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {since}\n")
            handle.flush()
            yield
        finally:
            handle.close()  # closing releases the flock

    @contextlib.contextmanager
    def _lease(self, series: str, ttl_seconds: float) -> Iterator[None]:
        name = lease_name(series)
        owner = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
        expires = time.time() + ttl_seconds
        try:
            with self.guard(f"take lease {name}"):
                for attempt in range(2):
                    try:
                        self.client.create_registered_model(
                            name, tags={"owner": owner, "expires": f"{expires:.3f}"},
                            description="headroom training lease (delete to break)")
                        break
                    except Exception as exc:  # noqa: BLE001
                        if "ALREADY_EXISTS" not in str(getattr(exc, "error_code", "")) + str(exc) or attempt:
                            if attempt:
                                raise TrainingLocked(f"series {series!r} lease {name} was taken concurrently") from None
                            raise
                        try:
                            held = self.client.get_registered_model(name).tags
                        except Exception as read:  # noqa: BLE001
                            if not _not_found(read):
                                raise
                            continue  # its trainer let it go between the two requests: take it
                        try:
                            until = float(held.get("expires", "0"))
                        except ValueError:  # not written by a trainer (it writes a number): no lease to honour
                            until = 0.0
                        if until > time.time():
                            raise TrainingLocked(
                                f"series {series!r} is being trained by {held.get('owner')} (lease {name} until "
                                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(until))}; if that trainer is gone, "
                                f"delete the registered model {name} to break it)") from None
                        try:
                            self.client.delete_registered_model(name)  # stale: its trainer died
                        except Exception as deleted:  # noqa: BLE001
                            if not _not_found(deleted):  # else another trainer broke it first: race it to take it
                                raise
        except Exception:
            raise  # refused, or the store failed: the lease is not this trainer's
        except BaseException:  # a stop (SIGTERM) while a request was out: the store may have made the lease ours
            self._release(name, owner, series, expires)
            raise
        try:
            yield
        finally:
            self._release(name, owner, series, expires)

    def _release(self, name: str, owner: str, series: str, expires: float) -> None:
        """Delete lease `name` if `owner` holds it. A stop (SIGTERM) landing meanwhile does not leave it held: the
        release is made again, then the stop raised."""
        try:
            self._delete_lease(name, owner, series, expires)
        except BaseException:
            self._delete_lease(name, owner, series, expires)
            raise

    def _delete_lease(self, name: str, owner: str, series: str, expires: float) -> None:
        try:
            if self.client.get_registered_model(name).tags.get("owner") == owner:
                self.client.delete_registered_model(name)
        except Exception as exc:  # noqa: BLE001 - the training's own outcome is what it reports
            if _not_found(exc):  # none to release: a stop came before the store made it, or it was broken by hand
                return
            log.warning("%s: it holds off trainings of %r until %s; to train sooner, delete registered model %s",
                        self._fail(f"the training lease {name} could not be released", exc), series,
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)), name)
