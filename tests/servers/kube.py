"""A real etcd + kube-apiserver 1.20 (RBAC on, static admin token) on 127.0.0.1."""
from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import CACHE, ServerError, ServerProcess, find_binary, free_port, wait_until

APISERVER_VERSION = "1.20.2"
APISERVER_CACHE = CACHE / f"kube-apiserver-{APISERVER_VERSION}"


def binaries() -> dict[str, str | None]:
    return {"etcd": find_binary("etcd", "HEADROOM_ETCD"),
            "kube-apiserver": find_binary("kube-apiserver", "HEADROOM_KUBE_APISERVER", APISERVER_CACHE)}


@dataclass
class Etcd:
    workdir: Path
    port: int = 0
    peer_port: int = 0
    process: ServerProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Etcd:
        binary = binaries()["etcd"]
        if not binary:
            raise ServerError("etcd not found: run scripts/install-servers.sh")
        self.port = self.port or free_port()
        self.peer_port = self.peer_port or free_port()
        self.process = ServerProcess(
            [binary, "--data-dir", str(self.workdir / "etcd"), "--name", "headroom-test",
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"headroom-test=http://127.0.0.1:{self.peer_port}",
             "--log-level", "warn"],
            self.workdir / "etcd.log")
        wait_until(self._ready, timeout, f"etcd on :{self.port}", self.process)
        return self

    def _ready(self) -> bool:
        import requests
        return requests.get(f"{self.url}/health", timeout=1).json().get("health") in ("true", True)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class KubeApiserver:
    """kube-apiserver backed by `etcd`; `token` is a system:masters bearer token. `etcd_prefix`: where in etcd it
    keeps its objects (the server's default "/registry" unless given): a second server on the same etcd with a
    prefix of its own is a separate, empty cluster that starts in seconds."""
    workdir: Path
    etcd: Etcd
    port: int = 0
    etcd_prefix: str | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    viewer_token: str = field(default_factory=lambda: secrets.token_hex(16))
    process: ServerProcess | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def cert_dir(self) -> Path:
        return self.workdir / "certs"

    @property
    def ca_file(self) -> Path:
        """The self-signed serving certificate (trust it as the CA)."""
        return self.cert_dir / "apiserver.crt"

    def _prepare(self) -> None:
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
                           check=True, capture_output=True)
        # token,user,uid,"group1,group2": an admin and an unprivileged user for RBAC tests.
        (self.workdir / "tokens.csv").write_text(
            f'{self.token},headroom-admin,uid-admin,"system:masters"\n'
            f'{self.viewer_token},headroom-viewer,uid-viewer\n')

    def start(self, timeout: float = 90.0) -> KubeApiserver:
        binary = binaries()["kube-apiserver"]
        if not binary:
            raise ServerError(f"kube-apiserver not found (expected {APISERVER_CACHE}): run scripts/install-servers.sh")
        self._prepare()
        self.port = self.port or free_port()
        self.process = ServerProcess(
            [binary, f"--etcd-servers={self.etcd.url}", "--bind-address=127.0.0.1",
             f"--secure-port={self.port}", "--insecure-port=0", f"--cert-dir={self.cert_dir}",
             f"--token-auth-file={self.workdir / 'tokens.csv'}", "--authorization-mode=RBAC",
             "--service-account-issuer=https://kubernetes.default.svc",
             f"--service-account-key-file={self.workdir / 'sa.pub'}",
             f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
             "--service-cluster-ip-range=10.96.0.0/24",
             "--disable-admission-plugins=ServiceAccount", "--enable-priority-and-fairness=false",
             "--v=0", *([f"--etcd-prefix={self.etcd_prefix}"] if self.etcd_prefix else [])],
            self.workdir / "kube-apiserver.log")
        wait_until(self.ready, timeout, f"kube-apiserver on :{self.port}", self.process, interval=0.25)
        return self

    def ready(self) -> bool:
        import requests
        resp = requests.get(f"{self.host}/readyz", headers={"Authorization": f"Bearer {self.token}"},
                            verify=False, timeout=2)
        return resp.status_code == 200

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop, stay down `down_seconds`, start again on the same port with the same tokens."""
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def kubeconfig(self, path: Path | None = None, token: str | None = None) -> Path:
        path = path or self.workdir / "kubeconfig"
        path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: headroom-test
  cluster:
    server: {self.host}
    certificate-authority: {self.ca_file}
users:
- name: admin
  user:
    token: {token or self.token}
contexts:
- name: headroom-test
  context: {{cluster: headroom-test, user: admin}}
current-context: headroom-test
""")
        return path


@dataclass
class KubeServers:
    etcd: Etcd
    apiserver: KubeApiserver
    workdir: Path

    def stop(self, remove: bool = True) -> None:
        self.apiserver.stop()
        self.etcd.stop()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_kube(workdir: Path | None = None) -> KubeServers:
    workdir = Path(workdir or tempfile.mkdtemp(prefix="headroom-kube-"))
    etcd = Etcd(workdir).start()
    try:
        apiserver = KubeApiserver(workdir, etcd).start()
    except BaseException:
        etcd.stop()
        raise
    return KubeServers(etcd=etcd, apiserver=apiserver, workdir=workdir)


# ---------------------------------------------------------------------------- Kueue's genuine CRDs
KUEUE_VERSION = "v0.19.2"
KUEUE_CRDS = Path(__file__).resolve().parents[3] / "shared" / "kueue" / "crds"


def _empty_string_defaults(schema, path: str = "") -> list[str]:
    """Remove every `default: ""` from an OpenAPI schema and the schemas nested in it (not a property that
    happens to be named "default"); returns where they were."""
    if not isinstance(schema, dict):
        return []
    removed = []
    if schema.get("default") == "":
        del schema["default"]
        removed.append(path)
    for key in ("items", "additionalProperties", "not"):
        removed += _empty_string_defaults(schema.get(key), f"{path}.{key}")
    for key in ("properties", "patternProperties"):
        for name, sub in (schema.get(key) or {}).items():
            removed += _empty_string_defaults(sub, f"{path}.{name}")
    for key in ("anyOf", "allOf", "oneOf"):
        for i, sub in enumerate(schema.get(key) or []):
            removed += _empty_string_defaults(sub, f"{path}.{key}[{i}]")
    return removed


def for_apiserver_1_20(crd: dict) -> dict:
    """Kueue's CRD as this 1.20 API server accepts it; every other CRD unchanged.

    kube-apiserver 1.20 refuses a string schema's `default: ""` ("Invalid value: null: must be of type
    string"). The Workload CRD has them in two places, transformed thus (nothing else changes):
      * `spec.podSets[].template`, the embedded core/v1 PodTemplateSpec (e.g. `volumes[].cephfs.secretRef.name`,
        `imagePullSecrets[].name`, a list-map key that must keep a default): the template's schema is replaced by
        `type: object` + `x-kubernetes-preserve-unknown-fields: true` (the template is stored as sent, not
        validated; dropping only its defaults is refused for those list-map keys);
      * `spec.priorityClassSource` of the deprecated v1beta1 (headroom reads and writes v1beta2 only): its
        `default: ""` is dropped.
    What 1.20 does not know (`x-kubernetes-validations`, i.e. CEL; `selectableFields`) it ignores by itself."""
    if crd["metadata"]["name"] != "workloads.kueue.x-k8s.io":
        return crd
    removed = []
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        item = spec["properties"]["podSets"]["items"]
        item["properties"]["template"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                          "description": item["properties"]["template"].get("description", "")}
        removed += [f"{version['name']}{p}" for p in _empty_string_defaults(version["schema"]["openAPIV3Schema"])]
    assert removed == ["v1beta1.spec.priorityClassSource"], f"unexpected defaults dropped: {removed}"
    return crd


def kueue_crd_documents() -> list[dict]:
    """Kueue v0.19.2's CRDs (../shared/kueue/crds), transformed for 1.20 (for_apiserver_1_20)."""
    import yaml

    docs = []
    for path in sorted(KUEUE_CRDS.glob("kueue.x-k8s.io_*.yaml")):
        docs += [for_apiserver_1_20(d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs
