"""The reservation policy: the spec of a ReservationPolicy object, with the one definition of each default.

The same typed policy drives every decision the planner makes, whether the cluster is real
(`headroom run` on Kubernetes), embedded (`headroom run` on the embedded cluster) or a what-if
(`simulate`, `tune`, `report`, `demo`); deploy/crds/headroom.dev_reservationpolicies.yaml carries the
same fields and defaults.

Field names are the CRD's (camelCase in YAML and in the object, snake_case here).
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pandas.errors import OutOfBoundsTimedelta
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from core.crosschecks import CrossCheck, CrossChecked, FieldErrors
from core.errors import ConfigError, field_path
from core.objects import TargetRef
from core.textfile import TooLong, read_text
from core.units import UTC, check_statistic, check_timezone, duration, seconds, whole_replicas
from core.yamlfile import KubectlLoader, RepeatedKeys, csv_read_as_yaml
from core.yamlfile import documents as yaml_documents

API_VERSION, KIND = "headroom.dev/v1alpha1", "ReservationPolicy"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a policy's name and namespace, as Kubernetes takes them (DNS label)
# the name of a Deployment, an HPA or a ClusterQueue, as the API server takes it: a DNS-1123 subdomain of at most
# OBJECT_NAME_LENGTH characters (the CRD's pattern and maxLength; a name it could not hold would be QueueMissing or
# TargetMissing on a cluster, while the what-if ran it)
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
OBJECT_NAME_LENGTH = 253
NAMESPACE_LENGTH = 63
# what the CRD's schema takes (deploy/crds, tests/test_sameness_real.py holds the two alike): a spec headroom runs is
# one `kubectl apply` takes: Go durations (no d or w, which a configuration's Prometheus durations take); the
# statistics' pattern is core.units'.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
Forecaster = Literal["auto", "seasonal-naive", "reactive", "static"]


def _whole(value: Any) -> Any:
    """A whole float as the integer it is: the API server takes 1.0 for an integer field, and stores 1 (a float from
    2**53 on it refuses: not every integer there is a float)."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def _unit_given(value: Any) -> Any:
    """A duration written as a bare number (`leadTime: 15`) has no unit to read it in: said so, where the type check
    said only "Input should be a valid string"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value!r} has no unit: write a duration with one, e.g. 90s, 15m or 1h30m")
    return value


def object_name(value: str, kind: str) -> str:
    """`value` if it is a name the API server takes for a `kind` object, else a ValueError saying what one is."""
    if len(value) > OBJECT_NAME_LENGTH or not re.fullmatch(OBJECT_NAME_PATTERN, value):
        raise ValueError(f"{value!r} is not a {kind} name (a DNS-1123 subdomain: at most {OBJECT_NAME_LENGTH} "
                         "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)")
    return value


ClusterQueueName = Annotated[str, AfterValidator(lambda value: object_name(value, "ClusterQueue"))]


# a duration as the CRD and Prometheus write it, text with its unit (checked by the field's own validator)
DurationText = Annotated[str, BeforeValidator(_unit_given)]
INT64_MAX = 2**63 - 1  # an integer field's largest value in a Kubernetes object
# an integer field: as the API server takes it, a whole number up to int64's largest
Count = Annotated[int, BeforeValidator(_whole), Field(le=INT64_MAX)]


def without_nulls(data: dict[str, Any]) -> dict[str, Any]:
    """The API server prunes a null field before it fills in defaults (`kubectl apply` stores `statistic:` as max,
    `maxGpus: null` as unset): a file reads so too."""
    return {k: v for k, v in data.items() if v is not None}


class Camel(BaseModel):
    """A Kubernetes-style spec: camelCase keys, the same in a CRD object and in a file; unknown keys are errors."""
    # NaN and infinity are refused in every number: an object's field never means "unknown" or "unbounded"
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
                              allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        return without_nulls(data) if isinstance(data, dict) else data


class CapacitySpec(Camel):
    demand_per_gpu: float = Field(gt=0, description="Demand one GPU serves (in the query's unit).")
    gpus_per_replica: Count = Field(1, ge=1, le=1024, description="GPUs each inference replica holds.")


class TargetSpec(Camel):
    kind: Literal["Deployment", "HorizontalPodAutoscaler", "ClusterQueue"]
    name: str = Field(min_length=1, max_length=OBJECT_NAME_LENGTH)
    namespace: str | None = Field(None, min_length=1, max_length=NAMESPACE_LENGTH,
                                  description="Namespace of a Deployment/HPA target (default the policy's).")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        return object_name(value, info.data.get("kind", "Kubernetes object"))  # no kind: its own error is said

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"{value!r} is not a namespace (a DNS-1123 label: lowercase letters, digits and '-', "
                             "starting and ending with a letter or digit)")
        return value

    def ref(self, policy_namespace: str) -> TargetRef:
        """The object acted on: a ClusterQueue has no namespace; a Deployment or HPA defaults to the policy's."""
        if self.kind == "ClusterQueue":
            return TargetRef(self.kind, self.name, None)
        return TargetRef(self.kind, self.name, self.namespace or policy_namespace)


class ObjectiveSpec(Camel):
    """The service objective an SRE holds: how much demand and how many steps may go unserved."""
    max_shortage: float = Field(0.001, ge=0, le=1, description="Unmet inference demand within the cluster, as a "
                                                                "share of demand GPU-time.")
    max_short_steps: float = Field(0.01, ge=0, le=1, description="Share of steps with any unmet demand.")


class PolicySpec(Camel, CrossChecked):
    """One inference workload's reservation policy."""
    query: str = Field(min_length=1, description="PromQL expression for demand (one series; aggregate with sum(...)).")
    statistic: str = Field("max", description="How samples are aggregated to the hourly forecast step "
                                              "(mean, max, sum or pNN); the reservation needs each hour's peak.")
    capacity: CapacitySpec
    forecaster: Forecaster = Field(
        "auto", description="auto: the MLflow champion, else automatic selection; seasonal-naive: the same hour "
                            "last week; reactive: the last complete hour's peak; static: the lookback's peak.")
    timezone: str = Field(UTC, description="IANA time zone (e.g. Europe/Berlin) whose wall-clock hours the "
                                             "forecast's daily and weekly seasons follow: a business-hours peak stays "
                                             "at its local hours across daylight saving changes. UTC: UTC hours.")
    target_quantile: float = Field(0.9, gt=0, lt=1, description="Forecast quantile of each hour's demand reserved "
                                                                "ahead of it.")
    headroom_quantile: float = Field(0.99, gt=0, lt=1, description="Forecast quantile up to which lent GPUs must come "
                                                                   "back within reclaimDeadline.")
    lead_time: DurationText = Field("15m", description="How long new capacity takes to serve (Go duration): the "
                                                       "reservation of an hour is in place this long before it starts.")
    warm_buffer: float = Field(1.0, ge=0, le=100, description="Warm GPUs kept above the recent observed peak P, as "
                                                              "warmBuffer x sqrt(P) (request noise grows with the "
                                                              "square root of the level).")
    warm_buffer_quantile: float | None = Field(
        None, ge=0, lt=1, description="The warm buffer's factor is at least this quantile, over the last week, of how "
                                      "far demand rose within leadTime above the peak of the scaleInDelay before it, "
                                      "per sqrt of that peak: the buffer follows the bursts the demand shows. Unset: "
                                      "1 - objective.maxShortSteps (the rises the objective lets go short); 0: "
                                      "warmBuffer alone.")
    scale_in_delay: DurationText = Field("10m", description="Observed demand keeps its GPUs this long (Go duration).")
    min_gpus: Count = Field(0, ge=0)
    max_gpus: Count | None = Field(None, ge=1)
    margin_gpus: Count = Field(0, ge=0, description="GPUs added to the forecast's reservation.")
    headroom_floor_gpus: Count = Field(0, ge=0, description="Preemption headroom kept at least this large (up to "
                                                             "maxGpus: inference never takes more).")
    reclaim_deadline: DurationText = Field("5m", description="How fast lent GPUs must come back from training (Go "
                                                             "duration).")
    target: TargetSpec
    inference_cluster_queue: ClusterQueueName | None = Field(
        None, min_length=1, max_length=OBJECT_NAME_LENGTH,
        description="Kueue ClusterQueue of the inference pods, whose GPU quota follows the reservation.")
    training_cluster_queues: list[ClusterQueueName] = Field(
        default_factory=list, max_length=64, description="Kueue ClusterQueues whose GPU nominalQuota headroom sets to "
                                                         "their share of the slack; their Workloads are evicted to "
                                                         "take it back.")
    mode: Literal["forecast-only", "active"] = "forecast-only"
    objective: ObjectiveSpec = ObjectiveSpec()

    @field_validator("statistic")
    @classmethod
    def _statistic(cls, value: str) -> str:
        return check_statistic(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("lead_time", "scale_in_delay", "reclaim_deadline")
    @classmethod
    def _duration(cls, value: str) -> str:
        return policy_duration(value)

    @field_validator("training_cluster_queues")
    @classmethod
    def _queue_names(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each training ClusterQueue once")
        return value

    @property
    def least_gpus(self) -> int:
        """minGpus in whole replicas: what the policy holds at least."""
        return whole_replicas(self.min_gpus, self.capacity.gpus_per_replica)

    def least_gpus_said(self) -> str:
        """'minGpus 6', or 'minGpus 6 (8 GPUs: whole replicas of 4)' when whole replicas hold more."""
        said = f"minGpus {self.min_gpus}"
        if self.least_gpus != self.min_gpus:
            said += f" ({self.least_gpus} GPUs: whole replicas of {self.capacity.gpus_per_replica})"
        return said

    @property
    def inference_queues(self) -> set[str]:
        """The ClusterQueues the policy holds inference in: its inferenceClusterQueue and its ClusterQueue target."""
        queue_target = self.target.name if self.target.kind == "ClusterQueue" else None
        return {q for q in (self.inference_cluster_queue, queue_target) if q}

    def too_big_for(self, gpus: int) -> str | None:
        """What keeps this policy out of `gpus` GPUs ('minGpus 500', 'capacity.gpusPerReplica 16'), or None: its
        minimum (in whole replicas), or a single replica, larger than them."""
        if self.least_gpus > gpus:
            return self.least_gpus_said()
        if self.capacity.gpus_per_replica > gpus:
            return f"capacity.gpusPerReplica {self.capacity.gpus_per_replica}"
        return None

    @classmethod
    def as_read(cls, data: dict[str, Any]) -> dict[str, Any]:
        return without_nulls(data)  # the cross-checks' wrap sees the input before Camel's validator drops the nulls

    @classmethod
    def cross_checks(cls) -> list[CrossCheck]:
        def headroom_quantile(head: float, target: float) -> str | None:
            return f"headroomQuantile must be at least targetQuantile ({target:g}), got {head:g}" if head < target \
                else None

        def max_gpus(most: int | None, least: int) -> str | None:
            return f"maxGpus must be at least minGpus ({least}), got {most}" if most is not None and most < least \
                else None

        def one_replica(most: int | None, capacity: CapacitySpec) -> str | None:  # else a replica would pass it
            if most is not None and most < capacity.gpus_per_replica:
                return f"maxGpus must be at least one replica (capacity.gpusPerReplica {capacity.gpus_per_replica})"
            return None

        def inference_queue(inference: str | None, training: list[str]) -> str | None:
            return "inferenceClusterQueue cannot also be a training ClusterQueue" if inference in training else None

        def queue_target(target: TargetSpec, training: list[str]) -> str | None:
            if target.kind == "ClusterQueue" and target.name in training:
                return "the target ClusterQueue cannot also be a training ClusterQueue"
            return None

        return [  # each said at the field to correct, as a field's own check is
            CrossCheck(("headroom_quantile", "target_quantile"), headroom_quantile, "headroomQuantile"),
            CrossCheck(("max_gpus", "min_gpus"), max_gpus, "maxGpus"),
            CrossCheck(("max_gpus", "capacity"), one_replica, "maxGpus"),
            CrossCheck(("inference_cluster_queue", "training_cluster_queues"), inference_queue,
                       "inferenceClusterQueue"),
            CrossCheck(("target", "training_cluster_queues"), queue_target, "target.name"),
        ]

    # the planner's units
    @property
    def lead_time_seconds(self) -> float:
        return seconds(self.lead_time)

    @property
    def scale_in_delay_seconds(self) -> float:
        return seconds(self.scale_in_delay)

    @property
    def rise_quantile(self) -> float | None:
        """The quantile of observed rises the warm buffer covers (warmBufferQuantile resolved); None: off."""
        q = 1 - self.objective.max_short_steps if self.warm_buffer_quantile is None else self.warm_buffer_quantile
        return q if q > 0 else None

    @property
    def reclaim_deadline_seconds(self) -> float:
        return seconds(self.reclaim_deadline)


def policy_duration(value: str) -> str:
    """A policy's duration: a Go duration the CRD takes (90s, 10m, 1h30m; not 1d), at most a day."""
    if not (isinstance(value, str) and re.fullmatch(DURATION_PATTERN, value)):
        raise ValueError(f"{value!r} is not a Go duration like 90s, 10m or 1h30m (units ms, s, m, h, as the CRD takes "
                         "them: a day is 24h)")
    try:
        too_long = duration(value) > duration("24h")
    except OutOfBoundsTimedelta:  # longer than pandas holds (about 292 years)
        too_long = True
    if too_long:
        raise ValueError(f"{value} is longer than a day")
    return value


def field_errors(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[str]:
    """'field.path: message' per error of validating `model`, paths starting at `prefix`, in the names the file uses.
    A key the model does not have (most often a misspelt one) is named with the field it is closest to, or with the
    fields there are: pydantic's own words, 'Extra inputs are not permitted', say neither."""
    out = []
    for e in exc.errors():
        at = [*(prefix.split(".") if prefix else []), *e["loc"]]
        path = field_path(at)
        if isinstance(checked := (e.get("ctx") or {}).get("error"), FieldErrors):  # each at its field's path
            out += [f"{field_path([*at, *([field] if field else [])])}: {message}" for field, message in checked.errors]
        elif e["type"] == "extra_forbidden":
            out.append(f"{path}: {_not_a_field(str(e['loc'][-1]), _model_at(model, e['loc'][:-1]))}")
        else:
            out.append(f"{path}: {e['msg'].removeprefix('Value error, ')}")
    return out


def _model_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose fields a value at `loc` (an error's path from `model`) holds; None past a model's fields."""
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):  # an item of a list: the model the list holds, as the field's type says
            continue
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        model = _model_in(field.annotation) if field is not None else None
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field's type holds: itself, or inside `X | None`, `list[X]`, `Annotated[X, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


def _not_a_field(key: str, model: type[BaseModel] | None) -> str:
    """Why `key` is refused where `model` is read: with the field it likely misspells, else the fields there are."""
    if model is None:
        return "not a field"
    names = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f"not a field: did you mean {close[0]}?" if close else f"not a field (the fields: {', '.join(names)})"


def parse_policy_spec(spec: Any, source: str) -> PolicySpec:
    """A ReservationPolicy object's spec, validated as the CRD promises (errors name spec.* paths)."""
    try:
        return PolicySpec.model_validate(spec)
    except ValidationError as exc:
        raise ConfigError(source, field_errors(exc, PolicySpec, "spec")) from None


# the fields of a spec that say what its policy holds on a cluster: its target, its ClusterQueues and whether it acts
HOLDING_FIELDS = ("target", "inferenceClusterQueue", "trainingClusterQueues", "mode")
_HOLDING_NAMES = {name for name, field in PolicySpec.model_fields.items() if field.alias in HOLDING_FIELDS}


def holding_spec(spec: Any) -> PolicySpec | None:
    """What a spec that does not parse still says its policy holds: its target (and capacity.gpusPerReplica), its
    ClusterQueues and mode, each read as a valid spec reads it, in a spec whose other fields are placeholders (the
    query and demandPerGpu: read by nothing that a refused policy takes part in); None where those do not read so."""
    if not isinstance(spec, dict):
        return None
    capacity = spec.get("capacity")
    replica = {"gpusPerReplica": capacity["gpusPerReplica"]} \
        if isinstance(capacity, dict) and "gpusPerReplica" in capacity else {}
    said = {k: spec[k] for k in HOLDING_FIELDS if k in spec}
    try:
        return PolicySpec.model_validate({"query": "-", "capacity": {"demandPerGpu": 1.0, **replica}, **said})
    except ValidationError as exc:
        # a ClusterQueue named as no cluster can name one (an object stored before the CRD checked names) is no queue:
        # the rest still says what the policy holds, its target first (counting less would lend GPUs its pods hold)
        kept = _without_queues_named(said, [error["loc"] for error in exc.errors()])
    if kept is None:
        return None
    try:
        return PolicySpec.model_validate({"query": "-", "capacity": {"demandPerGpu": 1.0, **replica}, **kept})
    except ValidationError:
        return None


def _without_queues_named(said: dict[str, Any], bad: list[tuple[int | str, ...]]) -> dict[str, Any] | None:
    """`said` (a spec's holding fields) without the ClusterQueues at the error locations `bad`; None where another
    field is in error too, or no queue is."""
    training = {loc[1] for loc in bad if loc[:1] == ("trainingClusterQueues",) and len(loc) == 2}
    inference = ("inferenceClusterQueue",) in bad
    if not (training or inference) or len(training) + inference != len(bad):
        return None
    kept = {k: v for k, v in said.items() if not (inference and k == "inferenceClusterQueue")}
    if training:
        kept["trainingClusterQueues"] = [q for k, q in enumerate(said["trainingClusterQueues"]) if k not in training]
    return kept


def holding_said(spec: PolicySpec) -> dict[str, Any]:
    """What `spec` says its policy holds, as a spec says it (HOLDING_FIELDS and capacity.gpusPerReplica): the policy's
    status carries it (`status.holding`), so a controller that read no spec of the policy saying so (restarted, or a
    new leader) reads it back by holding_spec: an edit deletes no workload."""
    said = spec.model_dump(by_alias=True, exclude_none=True, include=_HOLDING_NAMES)
    return {"capacity": {"gpusPerReplica": spec.capacity.gpus_per_replica}, **said}


def held_demand_per_gpu(spec: Any) -> float | None:
    """capacity.demandPerGpu of a spec that does not parse, read as a valid spec reads it (holding_spec leaves it a
    placeholder): what the embedded cluster serves the refused policy's target's demand by; None where it does not
    read so."""
    capacity = spec.get("capacity") if isinstance(spec, dict) else None
    if not isinstance(capacity, dict) or "demandPerGpu" not in capacity:
        return None
    try:
        return CapacitySpec.model_validate({"demandPerGpu": capacity["demandPerGpu"]}).demand_per_gpu
    except ValidationError:
        return None


def created(obj: dict[str, Any]) -> str:
    """When a ReservationPolicy object was created, as its creationTimestamp sorts (none: first, in list order)."""
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


class Claims:
    """What the policies accepted so far hold, taken oldest first (sorted by `created`): each target, the policy that
    scales it, and each ClusterQueue its role, with the policy that named it so. The controller accepts a policy by it
    (controller.reconcile.parse_policies), and the embedded cluster builds its world by it (what a cluster the accepted
    policies describe holds)."""

    def __init__(self) -> None:
        self.owner: dict[TargetRef, str] = {}
        # ClusterQueue -> ("inference" | "target" | "training", the policy that named it so)
        self.role: dict[str, tuple[str, str]] = {}

    def take(self, key: str, target: TargetRef, spec: PolicySpec) -> str | None:
        """Why the policy `key` is refused beside those accepted so far; None: it is accepted, and what it names is
        its. A target an older policy scales is refused (the two would undo each other's decisions), and so is a
        ClusterQueue one policy holds inference in (its inferenceClusterQueue or ClusterQueue target) and another
        lends training slack into: the one that named it first keeps it."""
        if target in self.owner:
            return (f"spec.target: {target.kind} {target.name} is already the target of ReservationPolicy "
                    f"{self.owner[target]}; two policies on one target would undo each other's decisions")
        # a ClusterQueue holds inference (its quota the reservation) or training (its quota lent slack, its Workloads
        # preemptible), never both: lending into an inference queue overwrites its quota and evicts inference as
        # training. A ClusterQueue target's quota is its own policy's reservation alone: no other policy runs
        # inference in it.
        claims = [("spec.inferenceClusterQueue", q, "inference") for q in (spec.inference_cluster_queue,) if q]
        if target.kind == "ClusterQueue":
            claims.append(("spec.target", target.name, "target"))
        claims += [("spec.trainingClusterQueues", q, "training") for q in spec.training_cluster_queues]
        role = self.role
        clashes = [(f"{field}: ClusterQueue {q} is the {role[q][0]} queue of ReservationPolicy {role[q][1]}",
                    "one queue cannot hold both inference and training" if "training" in (kind, role[q][0]) else
                    "a ClusterQueue target's quota is its own policy's reservation alone")
                   for field, q, kind in claims
                   if q in role and role[q][0] != kind and role[q][1] != key]
        if clashes:
            # how many and the fix first, each clash after: an Event keeps 1 kB of it, the Ready condition all
            one = len(clashes) == 1
            return (f"{len(clashes)} ClusterQueue{'' if one else 's'} this policy names {'is' if one else 'are'} held "
                    f"otherwise by an older ReservationPolicy: name {'another queue' if one else 'other queues'} in "
                    f"this policy ({'; '.join(dict.fromkeys(why for _, why in clashes))}): "
                    + "; ".join(clash for clash, _ in clashes))
        self.owner[target] = key
        for _, q, kind in claims:
            self.name(key, q, kind)
        return None

    def name(self, key: str, queue: str, kind: str) -> None:
        """The policy `key` holds `queue` as `kind`: the first policy to name a queue says its role; a queue that is a
        policy's target is "target", even when that policy named it its inference queue too."""
        if queue not in self.role or (kind == "target" and self.role[queue][0] != "target"):
            self.role[queue] = (kind, key)


def refused_holders(kept: Iterable[tuple[TargetRef, PolicySpec]], refused: Iterable[tuple[TargetRef, PolicySpec]],
                    lent: Collection[str] = ()) -> list[bool]:
    """Which of `refused` hold their target beside the policies `kept`, each GPU counted once: the refused policies
    (each its target and spec, oldest first), then the targets edits left behind (each with the spec it was held by,
    oldest first: a left target is held as a refused policy's is, by no claim). A kept policy acts on what it names, so
    none of `refused` holds a target a kept one names (its target, or a ClusterQueue it names: the second policy on a
    target holds nothing of it), nor one held by one before it. A ClusterQueue target holds its quota whole, whether
    refused or left and whatever its age: Kueue admits the pods of the others that name it as their
    inferenceClusterQueue within it (counted as its holding: controller.reconcile._held_by), so their pods hold no
    GPUs of their own there; nor in a ClusterQueue target a kept policy holds, or a training queue a kept policy, or a
    refused one (`lent`: core.policy.refused_lends), lends into (within that quota)."""
    refused = list(refused)
    held = {target for target, _ in kept}
    lent_into = {q for _, spec in kept for q in spec.training_cluster_queues} | set(lent)
    queues = {q for _, spec in kept for q in spec.inference_queues} | lent_into
    whole = {target.name for target in held if target.kind == "ClusterQueue"} | lent_into
    holds = [False] * len(refused)
    # the ClusterQueue targets first: a queue's quota is held whole whatever the age of the pods running in it
    for k, (target, _) in enumerate(refused):
        if target.kind == "ClusterQueue" and target not in held and target.name not in queues:
            holds[k] = True
            held.add(target)
            whole.add(target.name)
    for k, (target, spec) in enumerate(refused):
        if target.kind != "ClusterQueue" and target not in held and spec.inference_cluster_queue not in whole:
            holds[k] = True
            held.add(target)
    return holds


def pods_queues(kept: Iterable[tuple[TargetRef, PolicySpec]], refused: Iterable[tuple[TargetRef, PolicySpec]],
                holds: Iterable[bool]) -> list[str | None]:
    """The ClusterQueue the pods of each of `refused` (as refused_holders takes them, oldest first, with its verdict
    `holds`) run in, holding no target of their own; None where another holds its target (a policy `kept`, one of
    `refused` that holds it, or one before it naming it: the oldest says where a target's pods run), it holds it, or
    it is a ClusterQueue (no pods). Such pods run in its inferenceClusterQueue, which refused_holders left it without
    a target for: a ClusterQueue target held whole, their GPUs within that quota (controller.reconcile._held_by), or
    a training queue lent into, where Kueue admits them as Workloads of that queue (the embedded cluster runs them
    there: `pods_in_training`, `left_pods`; the controller counts them as inference there: training_view, and beyond
    its quota as held: serving_gpus)."""
    refused, holds = list(refused), list(holds)
    taken = {target for target, _ in kept} | {target for (target, _), own in zip(refused, holds) if own}
    queues: list[str | None] = []
    for target, spec in refused:
        runs = target.kind != "ClusterQueue" and target not in taken
        queues.append(spec.inference_cluster_queue if runs else None)
        taken.add(target)
    return queues


def refused_lends(spec: PolicySpec, inference: Collection[str]) -> list[str]:
    """The training queues a refused policy is still lent into: its own but those any policy holds inference in
    (`inference`: every policy's inference queues; the clash it may be refused for)."""
    return [q for q in spec.training_cluster_queues if q not in inference]


def spec_dict(spec: PolicySpec) -> dict[str, Any]:
    """The spec as it stands in an object or a file: camelCase, every field written (defaults filled in)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def manifest(name: str, namespace: str, spec: PolicySpec) -> dict[str, Any]:
    """A ReservationPolicy object `kubectl apply` and `headroom run --policy-file` take."""
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": namespace},
            "spec": spec_dict(spec)}


OBJECT_FIELDS = {"apiVersion", "kind", "metadata", "spec", "status"}
# a label's or an annotation's key, a finalizer: an optional DNS subdomain and '/', then a name of 1-63 characters
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
QualifiedName = Annotated[str, Field(pattern=QUALIFIED_NAME)]
AnnotationKey = Annotated[str, Field(pattern="(?i)" + QUALIFIED_NAME)]  # checked lower-cased by the API server
# a null label or annotation value is the empty string to the API server (Go's map of strings)
MetaText = Annotated[str, BeforeValidator(lambda value: "" if value is None else value)]
LabelValue = Annotated[MetaText, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
Rfc3339 = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
                                       r"(Z|[+-][0-9]{2}:[0-9]{2})$")]
NonEmpty = Annotated[str, Field(min_length=1)]


class OwnerReference(Camel):
    api_version: NonEmpty
    kind: NonEmpty
    name: NonEmpty
    uid: NonEmpty
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Camel):
    """Kubernetes' ObjectMeta as the API server decodes and checks it: a file `kubectl apply` refuses for its metadata
    (a label value with a space, a number where a string goes) simulate refuses too. name and namespace are checked
    apart (load_manifests), as DNS labels: here, their lengths."""
    name: str = Field(max_length=253)
    namespace: str | None = Field(None, max_length=63)
    labels: dict[QualifiedName, LabelValue] | None = None
    annotations: dict[AnnotationKey, MetaText] | None = None
    finalizers: list[QualifiedName] | None = None
    generate_name: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    self_link: str | None = None
    generation: Count | None = None
    creation_timestamp: Rfc3339 | None = None
    deletion_timestamp: Rfc3339 | None = None
    deletion_grace_period_seconds: Count | None = None
    owner_references: list[OwnerReference] | None = None
    managed_fields: list[dict[str, Any]] | None = None


METADATA_FIELDS = {f.alias for f in ObjectMeta.model_fields.values()}
LIST_KINDS = {("List", "v1"), (f"{KIND}List", API_VERSION)}


def _list_items(documents: list[Any], errors: list[str]) -> list[tuple[str, Any]]:
    """Each document, where it is in the file, with a List's items in its place (`kubectl get -o yaml` writes a
    List; kubectl apply reads its items as documents); a List's bad `items` go to `errors`."""
    several = len(documents) > 1
    found: list[tuple[str, Any]] = []
    for i, doc in enumerate(documents):
        where = f"document {i + 1}" if several else ""
        is_list = isinstance(doc, dict) and (doc.get("kind"), doc.get("apiVersion")) in LIST_KINDS
        if not is_list:
            found.append((where, doc))
            continue
        items = doc.get("items")
        within = f"{where}: " if where else ""
        if not isinstance(items, list):
            errors.append(f"{within}items: a {doc['kind']} must have a list of items")
            continue
        found += [(f"{within}items[{j}]", item) for j, item in enumerate(items)]
    if not found and not errors:
        errors.append("(top level): no ReservationPolicy in the file")
    return found


def load_manifests(path: str | Path) -> list[dict[str, Any]]:
    """Every ReservationPolicy in a YAML file (one or several documents), each spec validated; errors name the
    file, the document and the field path."""
    source = str(path)
    try:
        text = read_text(Path(path))
        documents = [d for d in yaml_documents(text, KubectlLoader, source) if d is not None]
    except TooLong as exc:
        raise ConfigError(source, [f"{exc}: not a YAML file of ReservationPolicies"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot read file: {exc.strerror or exc}"]) from None
    except RepeatedKeys as exc:
        raise ConfigError(source, exc.errors) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    errors: list[str] = []
    objects = []
    for where, doc in _list_items(documents, errors):
        prefix = f"{where}: " if where else ""
        if not isinstance(doc, dict):
            csv = (" (a CSV, a history? --policy-file takes a ReservationPolicy manifest, e.g. the one tune "
                   "--write-policy writes; the demand is DEMAND, or --history)") if csv_read_as_yaml(doc) else ""
            errors.append(f"{prefix}(top level): must be a ReservationPolicy object{csv}")
            continue
        if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
            errors.append(f"{prefix}kind/apiVersion: must be {KIND} {API_VERSION}, got "
                          f"{doc.get('kind')!r} {doc.get('apiVersion')!r}")
            continue
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            errors.append(f"{prefix}metadata.name: required")
            continue
        unknown = [f"{prefix}{k}: not a field of a {KIND}" for k in doc if k not in OBJECT_FIELDS] + \
            [f"{prefix}metadata.{k}: not a field of an object's metadata" for k in meta if k not in METADATA_FIELDS]
        if unknown:  # a misspelt key would be dropped silently (kubectl apply refuses it)
            errors += unknown
            continue
        bad = [f"{prefix}metadata.{k}: {meta[k]!r} is not a lowercase DNS label (a-z, 0-9, '-')"
               for k in ("name", "namespace")  # a null namespace is the default one, as kubectl takes it
               if meta.get(k) is not None and not (isinstance(meta[k], str) and re.fullmatch(NAME_PATTERN, meta[k]))]
        if bad:
            errors += bad
            continue
        invalid = []
        for model, value, field in ((ObjectMeta, meta, "metadata"), (PolicySpec, doc.get("spec"), "spec")):
            try:
                model.model_validate(value)
            except ValidationError as exc:
                invalid += [prefix + e for e in field_errors(exc, model, field)]
        if invalid:
            errors += invalid
            continue
        objects.append({**doc, "metadata": {**meta, "namespace": meta.get("namespace") or "default"}})
    keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]
    if len(set(keys)) != len(keys):
        errors.append("metadata: two policies with the same namespace/name")
    if errors:
        raise ConfigError(source, errors)
    return objects
