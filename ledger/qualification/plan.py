"""The qualification plan: `qualification.toml` parsed into frozen models.

The plan names the claims a revision must qualify for, the check and scope of
each, what each needs (observer-off control, cleanup proof, reviews) and how
evidence carries over between revisions. The format is documented in
`docs/plan.md`. Every key is checked: a typo must fail loudly rather than
silently weaken a plan.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    PlainValidator,
    StrictBool,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from ledger.evidence.errors import InputError
from ledger.evidence.limits import check_nesting
from ledger.qualification.adapters import adapter_version

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "OBSERVER_OFF_CONTROL_CHECK",
    "PLAN_FILE",
    "CarryOver",
    "ClaimSpec",
    "PackageSpec",
    "Plan",
    "ProfileClaim",
    "ProfileSpec",
    "ReviewSpec",
    "RunnerSpec",
    "load_plan",
    "parse_plan",
]

CarryOver: TypeAlias = Literal["commit", "tree", "package"]

PLAN_FILE = "qualification.toml"
"""Where a revision's plan is committed."""

OBSERVER_OFF_CONTROL_CHECK = "observer-off-control"
"""Check name of a dedicated observer-off control; its parameter `check` names the check."""

DEFAULT_TIMEOUT_S = 1800
"""A claim's time limit when the plan states none: 30 minutes."""

_ENTRY_POINT = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*$"
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]*$")
_FACET = re.compile(r"^[a-z][a-z0-9_.-]*$")
_DURATION = re.compile(r"^([1-9][0-9]{0,8})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """``"72h"`` -> 259200: an age in seconds, days (d), hours (h), minutes (m) or
    seconds (s)."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"must be a duration such as '72h', '3d' or '90m', got {text!r}")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def _duration(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string such as '72h'")
    duration_s(value)
    return value


def _entry_point(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string 'module:attribute'")
    if not _ENTRY_POINT.match(value):
        raise ValueError(
            f"must be 'module:attribute' (e.g. 'model.workload:make_workload'), got {value!r}"
        )
    return value


def _name(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if not _NAME.match(value):
        raise ValueError(
            f"must start with a letter or digit and contain no spaces "
            f"(letters, digits, _ . : / + -), got {value!r}"
        )
    return value


def _facet_value(value: object) -> str | int:
    # bool is an int subclass; a facet of true/false would compare as 1/0.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string or an integer, got {_toml_type(value)}")
    return value


def _facets(value: object) -> dict[str, str | int]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a table of facets, got {_toml_type(value)}")
    out: dict[str, str | int] = {}
    for key, item in value.items():
        if not _FACET.match(key):
            raise ValueError(
                f"{key}: facet names are lowercase letters, digits, _ . - and start with a letter"
            )
        try:
            out[key] = _facet_value(item)
        except ValueError as e:
            raise ValueError(f"{key}: {e}") from None
    return out


def _json_table(value: object) -> dict[str, JsonValue]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a table, got {_toml_type(value)}")
    _check_json(value, "")
    return value


def _check_json(value: object, path: str) -> None:
    # TOML has dates and times; JSON (and so a receipt's check parameters) has not.
    if isinstance(value, dt.date | dt.time):
        raise ValueError(
            f"{path.lstrip('.')}: dates and times are not allowed (parameters become JSON)"
        )
    if isinstance(value, dict):
        for k, v in value.items():
            _check_json(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")


def _reviews(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {_toml_type(value)}")
    if value < 0:
        raise ValueError(f"must be 0 or more, got {value}")
    return value


def _paths(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("must be a non-empty array of glob strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"[{i}]: must be a non-empty glob string")
    return tuple(value)


def _toml_type(value: object) -> str:
    match value:
        case bool():
            return "a boolean"
        case int():
            return "an integer"
        case float():
            return "a float"
        case str():
            return "a string"
        case list():
            return "an array"
        case dict():
            return "a table"
        case dt.datetime() | dt.date() | dt.time():
            return "a date/time"
    return type(value).__name__


EntryPoint = Annotated[str, PlainValidator(_entry_point)]
Name = Annotated[str, PlainValidator(_name)]
Facets = Annotated[dict[str, str | int], PlainValidator(_facets)]
JsonTable = Annotated[dict[str, JsonValue], PlainValidator(_json_table)]
Reviews = Annotated[int, PlainValidator(_reviews)]
# Serialised as a JSON array explicitly: a plain validator leaves pydantic's
# tuple serializer warning about the value it validated.
_AS_LIST = PlainSerializer(list, return_type=list[str])
Paths = Annotated[tuple[str, ...], PlainValidator(_paths), _AS_LIST]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _names(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("must be a string or an array of strings")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"[{i}]: must be a non-empty string")
    return tuple(items)


Names = Annotated[tuple[str, ...], PlainValidator(_names), _AS_LIST]

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _modules(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("must be an array of module names")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _MODULE.match(item):
            raise ValueError(f"[{i}]: must be a module name such as 'transformers', got {item!r}")
    return tuple(value)


Modules = Annotated[tuple[str, ...], PlainValidator(_modules), _AS_LIST]


class PackageSpec(_Frozen):
    """`[package]`: what makes up the package whose digest identifies it."""

    paths: Paths
    """Globs over repository paths; the package digest covers the matching files."""
    lock: Names = ()
    """Lock or requirements files (repository paths, e.g. ``uv.lock``) the digest covers."""
    distributions: Names = ()
    """Installed distributions whose versions the digest covers (torch with its CUDA
    build), read from the environment that runs the checks or asks the question."""


class ProjectSpec(_Frozen):
    """`[project]`: what the repository is called where no remote names it."""

    repo: Annotated[str, Field(min_length=1)]
    """Repository id used when the repository has no remote (e.g. a folder copy)."""


def _env_names(value: object) -> tuple[str, ...]:
    names = _names(value)
    for i, name in enumerate(names):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"[{i}]: not a variable name: {name!r}")
        if name.startswith("LEDGER_"):
            raise ValueError(f"[{i}]: {name}: the ledger's own variables never reach the checks")
    return names


EnvNames = Annotated[tuple[str, ...], PlainValidator(_env_names), _AS_LIST]


class RunnerSpec(_Frozen):
    """`[runner]`: how the pull request's code is run (docs/security.md)."""

    sandbox: Literal["required", "optional"] = "optional"
    """required: a receipt recorded with ``sandbox=none`` never qualifies a claim."""
    env: EnvNames = ()
    """Environment variables passed into the sandbox besides the runtime's own
    (e.g. ``HF_HOME``); never ``LEDGER_*``."""


class ReviewSpec(_Frozen):
    """`[review]`: who may do what a review decides beyond a claim's `reviews`."""

    revoke_pass: Literal["operator", "reviewer"] = "operator"
    """Who may revoke a pass: the ledger's operator only (as before the setting), or a
    reviewer too, on its own dispute of the pass (`ledger revoke --server` with a
    token of the reviewer role). A counterexample's revocation always needs an
    independent reviewer's dispute, whatever this says."""


class ClaimSpec(_Frozen):
    """One `[[claims]]` entry: what is asserted, how it is checked, what it needs."""

    name: Name
    check: Name
    params: JsonTable = Field(default_factory=dict)
    """Check parameters; a pass counts only if its receipt records these values."""
    scope: Facets = Field(default_factory=dict)
    """Facets every counted receipt must match exactly (more facets are allowed)."""
    carry_over: CarryOver = "commit"
    reviews: Reviews = 0
    """Concurring reviews needed, from reviewer keys other than the receipt's signer."""
    observer_off: StrictBool = False
    """Observer-on passes count only with a passing observer-off control."""
    cleanup: StrictBool = True
    """A pass counts only with a complete cleanup proof."""
    required: StrictBool = True
    """Whether overall qualification needs this claim."""
    workload: EntryPoint | None = None
    """Entry point overriding the plan's `workload` for this claim."""
    world_size: Annotated[int, Field(strict=True, ge=1, le=64)] = 1
    """Ranks the claim's workload runs on (one process each; on CUDA one GPU each)."""
    timeout_s: Annotated[int, Field(strict=True, ge=1)] = DEFAULT_TIMEOUT_S
    """Seconds the claim may run, all ranks together, before it is killed (failed: a hang
    is the claim's own outcome)."""
    workload_params: JsonTable = Field(default_factory=dict)
    """Factory arguments for this claim: the plan's `workload_params`, updated by these."""
    network: StrictBool = False
    """Whether the claim's processes get a network (recorded as the ``network`` facet);
    without it they see only their own loopback."""


class ProfileClaim(_Frozen):
    """`[profiles.NAME.claims.CLAIM]`: what a profile changes for one claim."""

    params: JsonTable = Field(default_factory=dict)
    """Check parameters updating the claim's `params` (key by key)."""
    workload_params: JsonTable = Field(default_factory=dict)
    """Factory arguments updating the claim's (applied last)."""


class ProfileSpec(_Frozen):
    """`[profiles.NAME]`: one sizing of the plan (e.g. for CPU or for an H200)."""

    workload_params: JsonTable = Field(default_factory=dict)
    """Factory arguments updating every claim's (after the claim's own)."""
    claims: dict[Name, ProfileClaim] = Field(default_factory=dict)
    """Per-claim overrides, by claim name; every name must be a claim of the plan."""


class Plan(_Frozen):
    """A parsed `qualification.toml`."""

    workload: EntryPoint | None = None
    workload_params: JsonTable = Field(default_factory=dict)
    preload: Modules = ()
    """Modules `ledger qualify` imports once in its fork server, before any claim (the
    libraries a workload imports inside its functions: ``["transformers", "peft"]``)."""
    project: ProjectSpec | None = None
    package: PackageSpec | None = None
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
    review: ReviewSpec = Field(default_factory=ReviewSpec)
    profiles: dict[Name, ProfileSpec] = Field(default_factory=dict)
    claims: tuple[ClaimSpec, ...] = Field(min_length=1)
    evidence_max_age: Annotated[str, PlainValidator(_duration)] | None = None
    """Receipts older than this (``"72h"``) are stale; None: evidence never ages."""
    base_counterexample_heads: Annotated[int, Field(strict=True, ge=1, le=100)] = 1
    """A counterexample recorded for another pull request's or the base branch's code
    blocks a pull request only once failures of the claim stand on this many distinct
    commits."""

    quarantine_above: Annotated[float, Field(strict=True, gt=0, lt=1)] | None = None
    """Receipts from a GPU whose device-fault rate's lower bound (`ledger fleet`) exceeds
    this count only with a clean health snapshot; None: no GPU is quarantined."""

    @property
    def evidence_max_age_s(self) -> int | None:
        return None if self.evidence_max_age is None else duration_s(self.evidence_max_age)

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        seen: dict[str, int] = {}
        for i, claim in enumerate(self.claims):
            if claim.name in seen:
                raise _PlanError(
                    f"claims[{i}].name: duplicate claim {claim.name!r} "
                    f"(also claims[{seen[claim.name]}])"
                )
            seen[claim.name] = i
            if claim.carry_over == "package" and self.package is None:
                raise _PlanError(
                    f"claims[{i}].carry_over: 'package' needs [package].paths "
                    f"to define the package identity"
                )
        for pname, prof in self.profiles.items():
            for cname in prof.claims:
                if cname not in seen:
                    raise _PlanError(
                        f"profiles.{pname}.claims.{cname}: no such claim in the plan "
                        f"(claims: {', '.join(seen)})"
                    )
        for i, claim in enumerate(self.claims):
            if adapter_version(claim.workload or self.workload) is None:
                continue
            why = _adapter_params(self.workload_params_for(claim))
            for pname, prof in self.profiles.items():
                over = prof.claims.get(claim.name)
                sized = {**self.workload_params_for(claim), **prof.workload_params}
                why = why or _adapter_params(
                    {**sized, **(over.workload_params if over else {})}, f"profiles.{pname}."
                )
            if why:
                raise _PlanError(f"claims[{i}] ({claim.name}): {why}")
        return self

    def workload_params_for(self, claim: ClaimSpec) -> dict[str, JsonValue]:
        """The factory arguments of `claim`: the plan's, updated by the claim's own."""
        return {**self.workload_params, **claim.workload_params}

    def with_profile(self, name: str) -> Plan:
        """This plan with profile `name` applied: each claim's `params` and
        `workload_params` updated by the profile's (the claim entry last).
        `InputError` for a profile the plan does not define."""
        prof = self.profiles.get(name)
        if prof is None:
            known = ", ".join(self.profiles) or "none defined"
            raise InputError(f"no profile {name!r} in the plan (profiles: {known})")
        claims = []
        for c in self.claims:
            over = prof.claims.get(c.name, ProfileClaim())
            wparams = {**self.workload_params_for(c), **prof.workload_params}
            claims.append(
                c.model_copy(
                    update={
                        "params": {**c.params, **over.params},
                        "workload_params": {**wparams, **over.workload_params},
                    }
                )
            )
        return self.model_copy(update={"claims": tuple(claims)})

    def claim(self, name: str) -> ClaimSpec | None:
        """The claim named `name`, or None."""
        return next((c for c in self.claims if c.name == name), None)

    def workload_for(self, claim: ClaimSpec) -> str | None:
        """The entry point that runs `claim`: its own, else the plan's."""
        return claim.workload or self.workload


_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _adapter_params(params: Mapping[str, JsonValue], where: str = "") -> str | None:
    """Why a ready adapter's ``estimator``, ``builtin_beside`` or ``calibration`` cannot
    be used, or None: the estimator is ``"builtin"`` or ``module:function``;
    ``builtin_beside`` (the built-in prediction recorded beside a team's) is a boolean,
    true only beside a team's estimator; the calibration sizes are positive integers."""
    est = params.get("estimator")
    if est is not None and not (isinstance(est, str) and (est == "builtin" or _REF.fullmatch(est))):
        return (
            f'{where}workload_params.estimator: must be "builtin" or "module:function", got {est!r}'
        )
    beside = params.get("builtin_beside")
    if beside is not None and not isinstance(beside, bool):
        return f"{where}workload_params.builtin_beside: must be true or false, got {beside!r}"
    if beside and est in (None, "builtin"):
        return (
            f"{where}workload_params.builtin_beside: needs a team's estimator "
            '(estimator = "module:function"); the built-in one decides already'
        )
    cal = params.get("calibration")
    if cal is None:
        return None
    if not isinstance(cal, dict):
        return f"{where}workload_params.calibration: must be a table, got {_toml_type(cal)}"
    for key, value in cal.items():
        if key not in ("max_tokens", "validate_tokens"):
            return (
                f"{where}workload_params.calibration.{key}: unknown (max_tokens, validate_tokens)"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{where}workload_params.calibration.{key}: must be a positive integer"
    return None


class _PlanError(ValueError):
    """A cross-field error whose message already names its field."""


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file; `InputError` names the file and the field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: no such plan file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read: {e}") from None
    return parse_plan(text, str(p))


def parse_plan(text: str, source_name: str = PLAN_FILE) -> Plan:
    """Validate plan text; `source_name` prefixes every error message."""
    # Bounded before parsing: tomllib recurses once per nesting level.
    check_nesting(text, source_name, toml=True)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{source_name}: not valid TOML: {e}") from None
    return plan_from_mapping(data, source_name)


def plan_from_mapping(data: Mapping[str, Any], source_name: str = PLAN_FILE) -> Plan:
    """Validate an already-decoded plan document."""
    if "claims" in data and not isinstance(data["claims"], list):
        # `[claims]` (a table) instead of `[[claims]]` (an array of tables) is an easy slip.
        raise InputError(f"{source_name}: claims: must be an array of tables ([[claims]])")
    try:
        return Plan.model_validate(dict(data))
    except ValidationError as e:
        raise InputError(f"{source_name}: {_explain(e.errors()[0])}") from None


_KNOWN = {
    (): tuple(Plan.model_fields),
    ("package",): tuple(PackageSpec.model_fields),
    ("project",): tuple(ProjectSpec.model_fields),
    ("runner",): tuple(RunnerSpec.model_fields),
    ("profiles", "*"): tuple(ProfileSpec.model_fields),
    ("profiles", "*", "claims", "*"): tuple(ProfileClaim.model_fields),
    ("claims", 0): tuple(ClaimSpec.model_fields),
}


def _explain(err: ErrorDetails) -> str:
    """One line `field.path: what is wrong` for the first validation error."""
    loc = tuple(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "value_error" and isinstance(ctx.get("error"), _PlanError):
        return str(ctx["error"])
    path = _path(loc)
    if kind == "extra_forbidden":
        parent = tuple(0 if isinstance(x, int) else x for x in loc[:-1])
        # Profile and claim names are the user's: match them by position.
        if parent[:1] == ("profiles",):
            parent = tuple("*" if i in (1, 3) else x for i, x in enumerate(parent))
        known = _KNOWN.get(parent)
        hint = f" (known keys: {', '.join(known)})" if known else ""
        return f"{path}: unknown key{hint}"
    if kind == "missing":
        return f"{path}: required"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"{path}: must be one of {expected}"
    if kind == "value_error":
        message = str(ctx.get("error", err["msg"]))
        # Validators of tables report the offending key first: fold it into the path.
        head, sep, rest = message.partition(": ")
        if sep and re.fullmatch(r"[A-Za-z0-9_.\[\]-]+", head) and not head.startswith("must"):
            joiner = "" if head.startswith("[") else "."
            return f"{path}{joiner}{head}: {rest}"
        return f"{path}: {message}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{path}: must be true or false"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{path}: must be a table"
    if kind in ("tuple_type", "list_type"):
        return f"{path}: must be an array"
    if kind == "too_short":
        return f"{path}: must not be empty"
    return f"{path}: {err['msg']}"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"
