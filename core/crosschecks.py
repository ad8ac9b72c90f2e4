"""Checks comparing a model's fields that run even when another of its fields failed, so every error is listed at once.

pydantic runs a model's own validators only once each field has validated: a spec with a bad timezone and maxGpus
below minGpus said only the timezone, and the maxGpus error appeared once that was fixed. Both core.policy (a
ReservationPolicy's spec) and core.settings (the configuration file) use this.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import BaseModel, TypeAdapter, ValidationError, model_validator


class FieldErrors(ValueError):
    """Errors of checks comparing fields: each with the field to correct (its path in the model, in the names the file
    uses), or "" for the model as a whole."""

    def __init__(self, errors: list[tuple[str, str]]):
        super().__init__("; ".join(f"{field}: {message}" if field else message for field, message in errors))
        self.errors = errors


class CrossCheck(NamedTuple):
    reads: tuple[str, ...]  # the fields (their Python names) whose values `check` is given, in order
    check: Callable[..., str | None]  # an error message, or None
    at: str = ""  # the field the message asks to correct ("" the model as a whole)


class CrossChecked(BaseModel):
    """A model whose `cross_checks` run even when another of its fields failed: each is skipped only when a field it
    reads failed (then that field's own error is listed)."""

    @classmethod
    def cross_checks(cls) -> list[CrossCheck]:
        return []

    @classmethod
    def as_read(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The input as the model's own "before" validators leave it (they run inside this check's wrap)."""
        return data

    @classmethod
    def _cross_errors(cls, values: dict[str, Any], failed: set[str]) -> list[tuple[str, str]]:
        errors = []
        for reads, check, at in cls.cross_checks():
            if failed & set(reads):
                continue
            try:
                message = check(*(values[n] for n in reads))
            except (TypeError, ValueError, KeyError, AttributeError):  # a raw value of the wrong type: its own error
                continue
            if message:
                errors.append((at, message))
        return errors

    @classmethod
    def _fields_that_passed(cls, data: dict[str, Any], failed: set[str]) -> dict[str, Any]:
        """Each field that validated, its value as the model would hold it (a nested model as that model)."""
        values = {}
        for name, field in cls.model_fields.items():
            if failed & {name, field.alias}:
                continue
            key = field.alias if field.alias in data else name
            if key not in data:
                values[name] = field.get_default(call_default_factory=True)
                continue
            try:
                values[name] = TypeAdapter(field.rebuild_annotation()).validate_python(data[key])
            except ValidationError:  # a value only the field's own validators take in: the check gets it as given
                values[name] = data[key]
        return values

    @model_validator(mode="wrap")
    @classmethod
    def _every_error(cls, data: Any, handler: Any) -> Any:
        try:
            model = handler(data)
        except ValidationError as exc:
            if not isinstance(data, dict):
                raise
            failed = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            extra = cls._cross_errors(cls._fields_that_passed(cls.as_read(data), failed), failed)
            if not extra:
                raise
            details: list[Any] = [{"type": e["type"], "loc": e["loc"], "input": e["input"],
                                   **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in exc.errors()]
            details.append({"type": "value_error", "loc": (), "input": data, "ctx": {"error": FieldErrors(extra)}})
            raise ValidationError.from_exception_data(exc.title, details) from None
        if errors := cls._cross_errors(dict(model.__dict__), set()):
            raise FieldErrors(errors)
        return model
