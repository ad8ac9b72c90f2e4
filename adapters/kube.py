"""Kubernetes, thinly: the only module that imports `kubernetes`.

`KubeCluster` reads and writes the few objects headroom acts through --
Kueue ClusterQueue quotas and Workloads, Deployment scale / HPA minReplicas,
ReservationPolicy status, Events -- and `LeaseElector` elects one active
controller. No planning logic lives here.

All requests go through one path (`_request`): JSON in, JSON out, over the
`kubernetes` client's configuration (kubeconfig / token / CA / TLS), with
  * a per-request timeout,
  * back-off and retry on 429, 5xx, timeouts and connection errors,
  * read-modify-write with the object's resourceVersion, re-read on 409,
  * no write when the object already has the wanted value (idempotent).
Errors surface as `ClusterError` with the HTTP status and the server's message.
"""
from __future__ import annotations

import json
import logging
import random
import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Iterable

from core.errors import ClusterError, Conflict, Invalid, NotFound
from core.objects import CONDITION_TYPES, ObjectRef, PolicyStatus, WorkloadInfo

log = logging.getLogger(__name__)

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
HEADROOM_GROUP, HEADROOM_VERSION = "headroom.dev", "v1alpha1"
GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EVICTED_BY_PLAN = "headroom.dev/evicted-by-plan"
EVICTION_REASON = "headroom.dev/eviction-reason"
# What a training job declares so headroom knows how fast it can be taken back (Workload annotations).
PREEMPTION_SECONDS = "headroom.dev/preemption-seconds"        # checkpoint + termination time
CHECKPOINT_INTERVAL = "headroom.dev/checkpoint-interval-seconds"
LAST_CHECKPOINT = "headroom.dev/last-checkpoint"              # RFC 3339
RETRYABLE_STATUS = {0, 429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _rfc3339(moment: datetime, micro: bool = False) -> str:
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _float(text: str | None) -> float | None:
    """An annotation's number; a malformed one counts as not given (the job then gets the defaults)."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _quantity(value: Any) -> Decimal:
    from kubernetes.utils import parse_quantity
    return Decimal(parse_quantity(value))


def workload_info(obj: dict, resource: str = GPU_RESOURCE) -> WorkloadInfo:
    """A Kueue Workload object as the controller sees it."""
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status", {}) or {}
    annotations = meta.get("annotations") or {}
    gpus = Decimal(0)
    for pod_set in spec.get("podSets", []) or []:
        containers = ((pod_set.get("template") or {}).get("spec") or {}).get("containers", []) or []
        per_pod = sum((_quantity(((c.get("resources") or {}).get("requests") or {}).get(resource, 0))
                       for c in containers), Decimal(0))
        gpus += per_pod * int(pod_set.get("count", 1))
    return WorkloadInfo(namespace=meta.get("namespace", ""), name=meta["name"],
                        queue_name=spec.get("queueName") or (meta.get("labels") or {}).get(QUEUE_LABEL),
                        cluster_queue=(status.get("admission") or {}).get("clusterQueue"),
                        active=spec.get("active", True) is not False, priority=int(spec.get("priority", 0) or 0),
                        creation=_parse_time(meta.get("creationTimestamp")), gpus=int(gpus),
                        evicted_by_plan=annotations.get(EVICTED_BY_PLAN),
                        preemption_seconds=_float(annotations.get(PREEMPTION_SECONDS)),
                        checkpoint_interval_seconds=_float(annotations.get(CHECKPOINT_INTERVAL)),
                        last_checkpoint=_parse_time(annotations.get(LAST_CHECKPOINT)))


@dataclass
class KubeCluster:
    """The real cluster behind the controller's cluster interface."""
    api_client: Any  # kubernetes.client.ApiClient
    field_manager: str = "headroom"
    request_timeout: float = 10.0
    retries: int = 6            # attempts after the first, on 429/5xx/timeouts/connection errors
    backoff_base: float = 0.2   # seconds; doubles per attempt, with jitter
    backoff_max: float = 5.0
    conflict_retries: int = 5
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kwargs) -> "KubeCluster":
        from kubernetes import client, config
        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            raise ClusterError(f"cannot load kubeconfig {path or '~/.kube/config'}: {exc}") from None
        return cls(cls._api_client(configuration), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs) -> "KubeCluster":
        from kubernetes import client, config
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as exc:
            raise ClusterError(f"not running in a Kubernetes pod (no service account credentials): {exc}") from None
        return cls(cls._api_client(configuration), **kwargs)

    @classmethod
    def from_token(cls, host: str, token: str, ca_file: str | None = None,
                   verify_ssl: bool = True, **kwargs) -> "KubeCluster":
        from kubernetes import client
        configuration = client.Configuration(host=host)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.verify_ssl = verify_ssl
        if ca_file:
            configuration.ssl_ca_cert = ca_file
        return cls(cls._api_client(configuration), **kwargs)

    @staticmethod
    def _api_client(configuration):
        from kubernetes import client
        configuration.retries = 0  # our back-off decides, not urllib3's silent immediate retries
        return client.ApiClient(configuration)

    def close(self) -> None:
        self.api_client.close()

    # ------------------------------------------------------------------ transport
    def _request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                 content_type: str = "application/json") -> dict:
        from kubernetes.client.exceptions import ApiException
        import urllib3

        query = dict(query or {})
        if method in ("POST", "PUT", "PATCH"):
            query.setdefault("fieldManager", self.field_manager)
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        attempt = 0
        while True:
            try:
                _, url, headers, _, _ = self.api_client.param_serialize(
                    method=method, resource_path=url_path,
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    auth_settings=["BearerToken"])
                response = self.api_client.call_api(method, url, header_params=headers, body=body,
                                                    _request_timeout=self.request_timeout)
                response.read()
                status, data = response.status, response.data
            except ApiException as exc:  # the REST layer raises these for TLS and protocol errors
                status, data = exc.status or 0, exc.body or str(exc.reason)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                status, data = 0, f"{type(exc).__name__}: {exc}".encode()
            if 200 <= status < 300:
                return json.loads(data) if data else {}
            text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
            try:
                payload = json.loads(text)
            except ValueError:
                payload = None
            message = payload.get("message", text) if isinstance(payload, dict) else text
            if status in RETRYABLE_STATUS and attempt < self.retries:
                delay = min(self.backoff_max, self.backoff_base * 2 ** attempt) * (0.5 + random.random() / 2)
                log.warning("%s %s: %s %s; retry %d/%d in %.1f s", method, path, status or "unreachable",
                            message[:200], attempt + 1, self.retries, delay)
                attempt += 1
                self.sleep(delay)
                continue
            reason = payload.get("reason", "") if isinstance(payload, dict) else ""
            error = {404: NotFound, 409: Conflict, 422: Invalid}.get(status, ClusterError)
            where = "unreachable" if status == 0 else f"HTTP {status}"
            raise error(f"{method} {path}: {where}: {message}", status=status, reason=reason, body=payload)

    def _update(self, path: str, mutate: Callable[[dict], dict | None], subresource: str = "") -> tuple[dict, bool]:
        """Read, let `mutate` return a merge patch (None = nothing to do), write with the read
        resourceVersion; on 409 re-read and try again. Returns (object, changed)."""
        for attempt in range(self.conflict_retries + 1):
            current = self._request("GET", path)
            patch = mutate(current)
            if patch is None:
                return current, False
            patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return self._request("PATCH", path + subresource, patch, content_type=MERGE_PATCH), True
            except Conflict:
                if attempt == self.conflict_retries:
                    raise
                log.info("conflict on %s (resourceVersion %s); re-reading", path,
                         current["metadata"]["resourceVersion"])
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ generic objects
    @staticmethod
    def custom_path(group: str, version: str, plural: str, name: str | None = None,
                    namespace: str | None = None) -> str:
        path = f"/apis/{group}/{version}"
        if namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{plural}"
        return path + (f"/{name}" if name else "")

    def get(self, path: str) -> dict:
        return self._request("GET", path)

    def create(self, path: str, body: dict, dry_run: bool = False) -> dict:
        return self._request("POST", path, body, query={"dryRun": "All"} if dry_run else None)

    def apply(self, path: str, body: dict, dry_run: bool = False, force: bool = True) -> dict:
        """Server-side apply (`path` names the object)."""
        query = {"force": "true" if force else "false"}
        if dry_run:
            query["dryRun"] = "All"
        return self._request("PATCH", path, body, query=query, content_type="application/apply-patch+yaml")

    def delete(self, path: str) -> None:
        try:
            self._request("DELETE", path)
        except NotFound:
            pass

    # ------------------------------------------------------------------ ClusterQueue quota
    def _cq_path(self, name: str) -> str:
        return self.custom_path(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)

    @staticmethod
    def _find_quota(cq: dict, resource: str, flavor: str | None) -> tuple[int, int, int]:
        found = []
        for g, group in enumerate(cq.get("spec", {}).get("resourceGroups", []) or []):
            for f, fl in enumerate(group.get("flavors", []) or []):
                if flavor is not None and fl.get("name") != flavor:
                    continue
                for r, res in enumerate(fl.get("resources", []) or []):
                    if res.get("name") == resource:
                        found.append((g, f, r))
        name = cq.get("metadata", {}).get("name")
        if not found:
            raise ClusterError(f"ClusterQueue {name} has no {resource} quota"
                            + (f" in flavor {flavor}" if flavor else ""))
        if len(found) > 1:
            raise ClusterError(f"ClusterQueue {name} has {resource} in {len(found)} flavors: name one (flavor=...)")
        return found[0]

    def get_cluster_queue_quota(self, name: str, resource: str = GPU_RESOURCE, flavor: str | None = None) -> int:
        cq = self._request("GET", self._cq_path(name))
        g, f, r = self._find_quota(cq, resource, flavor)
        return int(_quantity(cq["spec"]["resourceGroups"][g]["flavors"][f]["resources"][r]["nominalQuota"]))

    def set_cluster_queue_quota(self, name: str, gpus: int, resource: str = GPU_RESOURCE,
                                flavor: str | None = None) -> bool:
        """Set the nominalQuota of `resource`; True if it changed (False: already so)."""
        if gpus < 0:
            raise ValueError(f"quota must be >= 0, got {gpus}")

        def mutate(cq: dict) -> dict | None:
            g, f, r = self._find_quota(cq, resource, flavor)
            groups = cq["spec"]["resourceGroups"]
            if _quantity(groups[g]["flavors"][f]["resources"][r]["nominalQuota"]) == gpus:
                return None
            groups[g]["flavors"][f]["resources"][r]["nominalQuota"] = gpus
            return {"spec": {"resourceGroups": groups}}  # a merge patch replaces lists whole

        return self._update(self._cq_path(name), mutate)[1]

    # ------------------------------------------------------------------ inference capacity
    def get_deployment_replicas(self, namespace: str, name: str) -> int:
        scale = self._request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale")
        return int(scale.get("spec", {}).get("replicas", 0) or 0)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> bool:
        """Set spec.replicas through the scale subresource; True if it changed."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"

        def mutate(scale: dict) -> dict | None:
            return None if scale.get("spec", {}).get("replicas") == replicas else {"spec": {"replicas": replicas}}

        return self._update(path, mutate)[1]

    def set_hpa_min_replicas(self, namespace: str, name: str, min_replicas: int) -> bool:
        """Set an HPA's spec.minReplicas (autoscaling/v1); True if it changed."""
        if min_replicas < 1:
            raise ValueError(f"minReplicas must be >= 1, got {min_replicas}")
        path = f"/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers/{name}"

        def mutate(hpa: dict) -> dict | None:
            spec = hpa.get("spec", {})
            if spec.get("minReplicas") == min_replicas:
                return None
            if min_replicas > spec.get("maxReplicas", min_replicas):
                raise ClusterError(f"HPA {namespace}/{name}: minReplicas {min_replicas} > maxReplicas {spec['maxReplicas']}")
            return {"spec": {"minReplicas": min_replicas}}

        return self._update(path, mutate)[1]

    # ------------------------------------------------------------------ training workloads
    def list_workloads(self, cluster_queue: str, local_queues: Iterable[str] | None = None,
                       namespace: str | None = None) -> list[WorkloadInfo]:
        """Workloads of `cluster_queue`: admitted to it (status.admission.clusterQueue), or
        queued in one of `local_queues` (spec.queueName or the kueue.x-k8s.io/queue-name label;
        default: a LocalQueue named like the ClusterQueue). Oldest first."""
        queues = set(local_queues) if local_queues is not None else {cluster_queue}
        items = self._request("GET", self.custom_path(KUEUE_GROUP, KUEUE_VERSION, "workloads",
                                                      namespace=namespace)).get("items", [])
        found = [w for w in map(workload_info, items)
                 if w.cluster_queue == cluster_queue or (w.cluster_queue is None and w.queue_name in queues)]
        return sorted(found, key=lambda w: (w.creation or datetime.min.replace(tzinfo=timezone.utc), w.namespace, w.name))

    def evict_workload(self, namespace: str, name: str, reason: str, plan_id: str) -> bool:
        """Deactivate a Workload (spec.active=false; Kueue evicts it) and record why.

        True if this call evicted it; False if it already was inactive (by this plan or
        anyone else): a repeated eviction is a no-op and keeps the first record."""
        path = self.custom_path(KUEUE_GROUP, KUEUE_VERSION, "workloads", name, namespace)

        def mutate(wl: dict) -> dict | None:
            if wl.get("spec", {}).get("active", True) is False:
                return None
            return {"metadata": {"annotations": {EVICTED_BY_PLAN: plan_id, EVICTION_REASON: reason}},
                    "spec": {"active": False}}

        return self._update(path, mutate)[1]

    # ------------------------------------------------------------------ ReservationPolicy
    def list_reservation_policies(self, namespace: str | None = None) -> list[dict]:
        path = self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION, "reservationpolicies", namespace=namespace)
        return self._request("GET", path).get("items", [])

    def get_reservation_policy(self, namespace: str, name: str) -> dict:
        return self._request("GET", self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION,
                                                     "reservationpolicies", name, namespace))

    def patch_policy_status(self, namespace: str, name: str, status: PolicyStatus) -> dict:
        """Write the status subresource. A condition keeps its lastTransitionTime unless its
        status changes; conditions not named keep their old value."""
        path = self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION, "reservationpolicies", name, namespace)
        now = _rfc3339(_now())

        def mutate(policy: dict) -> dict:
            old = {c["type"]: c for c in (policy.get("status") or {}).get("conditions", []) or []}
            merged = dict(old)
            for cond in status.conditions:
                prev = old.get(cond.type)
                merged[cond.type] = {
                    "type": cond.type, "status": cond.status, "reason": cond.reason, "message": cond.message,
                    "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == cond.status
                    else now,
                    "observedGeneration": policy["metadata"].get("generation", 0)}
                if not cond.message:  # the 1.20 merge-patch path turns "" into null: omit it
                    del merged[cond.type]["message"]
            body: dict[str, Any] = {
                "reservedGpus": status.reserved_gpus, "slackGpus": status.slack_gpus,
                "headroomGpus": status.headroom_gpus, "lastPlanTime": now,
                "observedGeneration": status.observed_generation if status.observed_generation is not None
                else policy["metadata"].get("generation", 0),
                "conditions": [merged[t] for t in CONDITION_TYPES if t in merged]}
            if status.plan_id is not None:
                body["planId"] = status.plan_id
            if status.forecast_demand is not None:
                body["forecastDemand"] = float(status.forecast_demand)
            if status.model is not None:
                body["model"] = status.model
            body["nextHours"] = list(status.next_hours)
            if status.realized_error:
                body["realizedError"] = {k: float(v) for k, v in status.realized_error.items()}
            return {"status": body}

        return self._update(path, mutate, subresource="/status")[0]

    # ------------------------------------------------------------------ events
    def emit_event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal",
                   action: str = "Reconcile") -> dict:
        """A core/v1 Event about `about` (cluster-scoped objects get theirs in "default")."""
        if type not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, got {type!r}")
        namespace = about.namespace or "default"
        now = _now()
        involved = {"apiVersion": about.api_version, "kind": about.kind, "name": about.name}
        if about.namespace:
            involved["namespace"] = about.namespace
        if about.uid:
            involved["uid"] = about.uid
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{about.name}.{secrets.token_hex(8)}", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message[:1024], "type": type,
                "action": action, "source": {"component": self.field_manager},
                "reportingComponent": self.field_manager, "reportingInstance": self.field_manager,
                "firstTimestamp": _rfc3339(now), "lastTimestamp": _rfc3339(now), "count": 1}
        return self._request("POST", f"/api/v1/namespaces/{namespace}/events", body)

    def list_events(self, about: ObjectRef) -> list[dict]:
        namespace = about.namespace or "default"
        selector = f"involvedObject.name={about.name},involvedObject.kind={about.kind}"
        return self._request("GET", f"/api/v1/namespaces/{namespace}/events",
                             query={"fieldSelector": selector}).get("items", [])

    # ------------------------------------------------------------------ leader election
    def leader_elector(self, namespace: str, name: str, identity: str,
                       lease_seconds: int = 15) -> "LeaseElector":
        return LeaseElector(self, namespace, name, identity, lease_seconds)


@dataclass
class LeaseElector:
    """Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

    Every write carries the resourceVersion it read, so of two electors racing
    for the same Lease only one write succeeds. A holder's lease is taken over
    only after this elector has watched it go unrenewed for a full
    `lease_seconds` by its own monotonic clock (immune to clock skew).
    """
    cluster: KubeCluster
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)
    _observed: tuple | None = field(default=None, init=False, repr=False)
    _observed_at: float = field(default=0.0, init=False, repr=False)
    _leader: bool = field(default=False, init=False, repr=False)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def is_leader(self) -> bool:
        """Leader as of the last successful acquire/renew, and not yet expired locally."""
        return self._leader and self.monotonic() - self._observed_at < self.lease_seconds

    def _spec(self, transitions: int, acquire_time: str) -> dict:
        now = _rfc3339(_now(), micro=True)
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": acquire_time or now, "renewTime": now, "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """One round: returns True if this elector holds the lease afterwards."""
        try:
            lease = self.cluster.get(self.path)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(0, "")}
            try:
                self.cluster._request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body)
            except Conflict:  # someone else created it first
                return self._lost()
            return self._won(body["spec"])
        spec = lease.get("spec", {}) or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds") or self.lease_seconds
            if self.monotonic() - self._observed_at < duration:
                return self._lost()
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
            acquire = ""
        else:
            acquire = spec.get("acquireTime") or ""
        lease["spec"] = self._spec(transitions, acquire)
        try:
            self.cluster._request("PUT", self.path, lease)  # carries the read resourceVersion
        except Conflict:
            return self._lost()
        return self._won(lease["spec"])

    def _won(self, spec: dict) -> bool:
        self._observed = (spec["holderIdentity"], spec["renewTime"], spec["leaseTransitions"])
        self._observed_at = self.monotonic()
        self._leader = True
        return True

    def _lost(self) -> bool:
        self._leader = False
        return False

    def holder(self) -> str | None:
        try:
            return (self.cluster.get(self.path).get("spec", {}) or {}).get("holderIdentity") or None
        except NotFound:
            return None

    def release(self) -> bool:
        """Give the lease up (others may take it at once); True if this elector held it."""
        self._leader = False
        try:
            lease = self.cluster.get(self.path)
        except NotFound:
            return False
        spec = lease.get("spec", {}) or {}
        if spec.get("holderIdentity") != self.identity:
            return False
        lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1,
                         "renewTime": _rfc3339(_now(), micro=True)}
        try:
            self.cluster._request("PUT", self.path, lease)
        except Conflict:
            return False
        return True
