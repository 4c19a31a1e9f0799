"""Registrations: each choice of a run (a loss, a regulariser, a geometry, an encoder, an optimiser, a
schedule, a sampler, a data source) declares, beside the code it selects, the keys it uses and what it calls.

A :class:`Key` is one ``key=value`` of the command line: its name, default, type, one line of help, its
``--help`` group, its range (:class:`Range`) and, for a key the selected code receives, the keyword it is
passed as (``arg``). :func:`register` adds one value of a choice (``register("loss", "triplet", keys=(MARGIN,
MINING), calls=losses.triplet)``); a key listed by several values of one choice (``temperature`` by supcon,
sincere and info_nce) is used exactly when the choice takes one of them. :func:`register_regularizer` adds a
weighted term of the objective, its weight a key of its own.

:mod:`train.app.config` builds its ``Config`` from these tables (rebuilt on every registration, so a loss
registered by a user's own module is a key of the command line like the shipped ones); the refusal of unused
keys, the dropping of a preset's unused keys, ``--help``'s groups and the keyword arguments of what a choice
calls all follow from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from train.app.errors import UsageError


@dataclass(frozen=True)
class Range:
    """The values a number key may take: above ``low`` (at or above when ``closed``), below ``high``, and a
    whole number when ``integer``; ``None`` passes (the key's "default" marker)."""

    low: float = 0.0
    closed: bool = False
    high: float | None = None
    integer: bool = False

    def ok(self, value: Any) -> bool:
        if value is None:
            return True
        above = value >= self.low if self.closed else value > self.low
        return above and (self.high is None or value < self.high)

    def __str__(self) -> str:
        if self.integer:
            if (self.low, self.closed) in ((0, False), (1, True)):
                return "a positive integer"
            return "a non-negative integer" if (self.low, self.closed) == (0, True) else f">= {self.low}"
        if self.high is not None:
            return f"in {'[' if self.closed else '('}{self.low:g}, {self.high:g})"
        if self.low == 0:
            return "non-negative" if self.closed else "positive"
        return f"{'>=' if self.closed else '>'} {self.low:g}"


POSITIVE = Range()
NON_NEGATIVE = Range(closed=True)
POSITIVE_INT = Range(integer=True)
NON_NEGATIVE_INT = Range(closed=True, integer=True)
UNIT_INTERVAL = Range(high=1.0)  # the open interval (0, 1)


@dataclass(frozen=True)
class When:
    """The choice a key belongs to: the key is used only when ``choice`` (another key) takes one of
    ``values``. ``kind`` maps the choice's value to what ``values`` lists (``dataset`` → its source);
    ``label`` is how the values read in messages (default: ``a|b|c``)."""

    choice: str
    values: tuple[Any, ...]
    kind: Callable[[Any], Any] | None = None
    label: str | None = None

    def holds(self, cfg: Any) -> bool:
        value = getattr(cfg, self.choice)
        return (value if self.kind is None else self.kind(value)) in self.values

    def __str__(self) -> str:
        return f"{self.choice}={self.label or '|'.join(map(str, self.values))}"


@dataclass(frozen=True)
class Key:
    """One ``key=value`` of a run. ``type`` is its annotation (a ``Literal`` lists its values); ``when`` the
    choice it belongs to, for a key no registration owns (``clip_mode`` belongs to a set ``clip``); ``arg``
    the keyword the selected code receives it as (None: not passed); ``options`` marks a choice key whose
    values are the registered ones; ``kind`` maps a choice key's value to the registered value (a dataset
    name to its source; the options' ``label`` info then says how such values read)."""

    name: str
    default: Any
    help: str
    type: Any
    group: str
    range: Range | None = None
    when: When | None = None
    arg: str | None = None
    options: bool = False
    kind: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Option:
    """One registered value of a choice: the keys it uses and what it calls (None where the library's own
    table selects the code by the value, as :func:`geojax.models.encoder`)."""

    choice: str
    value: Any
    keys: tuple[Key, ...]
    calls: Callable[..., Any] | None
    info: dict[str, Any]


@dataclass(frozen=True)
class Regularizer:
    """A weighted term of the objective: on when its ``weight`` key is > 0 and ``when`` holds; ``calls`` gets
    the model's outputs, a context (key, axis name, views, chart dim) and its keys' ``arg`` keywords."""

    name: str
    weight: Key
    keys: tuple[Key, ...]
    calls: Callable[..., Any]
    when: When | None


CORE: dict[str, Key] = {}  # keys no registration owns, in --help order
OPTIONS: dict[str, dict[Any, Option]] = {}  # choice -> value -> option
REGULARIZERS: dict[str, Regularizer] = {}
_DECLARED: dict[str, Key] = {}  # every key as declared (before a registration's ``when`` is derived)
_LISTENERS: list[Callable[[], None]] = []


def core(*keys: Key) -> None:
    """Declare keys that every run has (or that belong to a ``when`` of their own)."""
    _claim(keys)
    CORE.update((k.name, k) for k in keys)
    _changed()


def register(
    choice: str,
    value: Any,
    *,
    keys: tuple[Key, ...] = (),
    calls: Callable[..., Any] | None = None,
    **info: Any,
) -> None:
    """Add ``value`` to ``choice`` (e.g. ``loss``): the keys it uses, what it calls, and any facts its caller
    reads (``info``, e.g. a loss's ``input="embeddings"``). A key of the same name registered before must be
    the same key."""
    if value in OPTIONS.get(choice, {}):
        raise ValueError(f"{choice}={value!r} is registered already")
    _claim(keys)
    OPTIONS.setdefault(choice, {})[value] = Option(choice, value, tuple(keys), calls, dict(info))
    _changed()


def register_regularizer(
    name: str, *, weight: Key, keys: tuple[Key, ...] = (), calls: Callable[..., Any], when: When | None = None
) -> None:
    """Add a weighted term of the objective (its ``weight`` key, default 0: off)."""
    if name in REGULARIZERS:
        raise ValueError(f"regularizer {name!r} is registered already")
    _claim((weight, *keys))
    REGULARIZERS[name] = Regularizer(name, weight, tuple(keys), calls, when)
    _changed()


def unregister(choice: str, value: Any) -> None:
    """Remove a registered value (a test's own loss, after the test)."""
    removed = OPTIONS[choice].pop(value)
    still = {k.name for opts in OPTIONS.values() for opt in opts.values() for k in opt.keys}
    still |= set(CORE) | {k.name for reg in REGULARIZERS.values() for k in (reg.weight, *reg.keys)}
    for k in removed.keys:
        if k.name not in still:
            del _DECLARED[k.name]
    _changed()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` now and after every registration (:mod:`train.app.config` rebuilds its tables)."""
    _LISTENERS.append(listener)
    listener()


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


def _claim(keys: tuple[Key, ...]) -> None:
    """Declare ``keys``: each name once; a second declaration must be the same key (a shared key:
    ``temperature``). All are checked before any is recorded, so a refused registration changes nothing."""
    for k in keys:
        known = _DECLARED.get(k.name, k)
        if known != k:
            raise ValueError(f"key {k.name!r} is declared twice, differently: {known} and {k}")
    _DECLARED.update((k.name, k) for k in keys)


def option(choice: str, value: Any) -> Option:
    """The registration of ``choice=value``."""
    try:
        return OPTIONS[choice][value]
    except KeyError:
        raise UsageError(f"{choice} must be one of {list(OPTIONS.get(choice, {}))}, got {value!r}") from None


def keys() -> dict[str, Key]:
    """Every declared key by name: the core keys (their order), then each registration's keys, each once,
    with the ``when`` its registrations give it."""
    out = dict(CORE)
    for choice, options in OPTIONS.items():
        for opt in options.values():
            for k in opt.keys:
                if k.name not in out:
                    out[k.name] = dataclasses.replace(k, when=_owners(choice, k.name))
    for reg in REGULARIZERS.values():
        for k in (reg.weight, *reg.keys):
            out.setdefault(k.name, dataclasses.replace(k, when=reg.when))
    return out


def _owners(choice: str, name: str) -> When:
    """The :class:`When` of a key listed by some values of ``choice``."""
    owners = [opt for opt in OPTIONS[choice].values() if any(k.name == name for k in opt.keys)]
    kind = CORE[choice].kind if choice in CORE else None
    label = "|".join(str(opt.info.get("label", opt.value)) for opt in owners) if kind is not None else None
    return When(choice, tuple(opt.value for opt in owners), kind, label)


def kwargs(cfg: Any, keys_: tuple[Key, ...]) -> dict[str, Any]:
    """``{arg: value}`` of ``keys_`` in ``cfg``, the keys without an ``arg`` and the None values left out (the
    callee's own default)."""
    return {k.arg: getattr(cfg, k.name) for k in keys_ if k.arg and getattr(cfg, k.name) is not None}


def option_kwargs(cfg: Any, choice: str) -> dict[str, Any]:
    """The keyword arguments of what ``cfg``'s value of ``choice`` calls."""
    value = getattr(cfg, choice)
    owner = CORE.get(choice)
    return kwargs(
        cfg, option(choice, value if owner is None or owner.kind is None else owner.kind(value)).keys
    )
