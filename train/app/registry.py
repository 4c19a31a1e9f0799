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
from typing import TYPE_CHECKING, Any

from train.app.errors import UsageError

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


@dataclass(frozen=True)
class Range:
    """The values a number key may take: above ``low`` (at or above when ``closed``), below ``high``.

    ``None`` passes (the key's "default" marker). ``integer`` only changes how the range reads in messages
    (the key's type makes it a whole number).

    Attributes:
        low: the lower bound.
        closed: whether ``low`` itself is allowed.
        high: the upper bound, excluded (None: none).
        integer: the key is a whole number (messages read "a positive integer").
    """

    low: float = 0.0
    closed: bool = False
    high: float | None = None
    integer: bool = False

    def ok(self, value: Any) -> bool:
        """Whether ``value`` lies in the range.

        Args:
            value: a number, or None (the default marker, always accepted).

        Returns:
            True when ``value`` is None or lies above ``low`` (or at it, when ``closed``) and below ``high``.
        """
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
    """The choice a key belongs to: the key is used only when ``choice`` (another key) takes a listed value.

    Attributes:
        choice: the name of the choice key (``loss``, ``geometry``, ...).
        values: the choice's values that use the key.
        kind: maps the choice's value to what ``values`` lists (``dataset`` → its source); None: the value
            itself.
        label: how the values read in messages (None: ``a|b|c``).
    """

    choice: str
    values: tuple[Any, ...]
    kind: Callable[[Any], Any] | None = None
    label: str | None = None

    def holds(self, cfg: RunConfig) -> bool:
        """Whether the run ``cfg`` makes the choice: its value of ``choice`` (through ``kind``) is listed.

        Args:
            cfg: a run's configuration.

        Returns:
            True when ``cfg``'s value of ``choice``, mapped by ``kind``, is one of ``values``.
        """
        value = getattr(cfg, self.choice)
        return (value if self.kind is None else self.kind(value)) in self.values

    def __str__(self) -> str:
        return f"{self.choice}={self.label or '|'.join(map(str, self.values))}"


@dataclass(frozen=True)
class Key:
    """One ``key=value`` of a run: a field of ``Config``, a line of ``--help``.

    Attributes:
        name: the key's name.
        default: its default value (None: the "use the default" marker, written ``none``).
        help: one line of help.
        type: its annotation (a ``Literal`` lists its values).
        group: its ``--help`` group (``data``, ``model``, ``objective``, ...).
        range: the numbers it may take (None: any of its type).
        when: the choice it belongs to, for a key no registration owns (``clip_mode`` belongs to a set
            ``clip``); a registration's keys get theirs from it.
        arg: the keyword the selected code receives it as (None: not passed).
        options: marks a choice key whose values are the registered ones.
        kind: maps a choice key's value to the registered value (a dataset name to its source; the options'
            ``label`` info then says how such values read).
    """

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
    """One registered value of a choice: the keys it uses and what it calls.

    Attributes:
        choice: the choice (``loss``, ``optimizer``, ...).
        value: the registered value (``triplet``).
        keys: the keys it uses.
        calls: what it calls, receiving its keys' ``arg`` keywords (None where the library's own table
            selects the code by the value, as :func:`geojax.models.encoder`).
        info: facts its caller reads (a loss's ``input="embeddings"``, a data source's ``label``).
    """

    choice: str
    value: Any
    keys: tuple[Key, ...]
    calls: Callable[..., Any] | None
    info: dict[str, Any]


@dataclass(frozen=True)
class Regularizer:
    """A weighted term of the objective: on when its ``weight`` key is > 0 and ``when`` holds.

    Attributes:
        name: the term's name (``koleo``, ``mmd``, ``membership``).
        weight: its weight key (default 0: off).
        keys: its other keys.
        calls: the term, called with the model's outputs, a context (key, axis name, views, chart dim) and
            its keys' ``arg`` keywords.
        when: the choice the term belongs to (None: every run).
    """

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
    """Declare keys that every run has (or that belong to a ``when`` of their own).

    Args:
        *keys: the keys, in ``--help`` order.

    Raises:
        ValueError: a key of the same name was declared before, differently.
    """
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
    """Add ``value`` to ``choice`` (e.g. ``loss``): the keys it uses, what it calls, facts its caller reads.

    ``Config`` is rebuilt, so the value's keys become keys of the command line.

    Args:
        choice: the choice (``loss``, ``optimizer``, ``schedule``, ``sampler``, ``dataset``, ``encoder``,
            ``geometry``, ``projection``).
        value: the new value, e.g. ``"triplet"``.
        keys: the keys it uses; a key of the same name registered before must be the same key.
        calls: what it calls, receiving its keys' ``arg`` keywords (None: the library selects the code).
        **info: facts its caller reads, e.g. a loss's ``input="embeddings"``, a data source's ``label``.

    Raises:
        ValueError: ``value`` is registered already, or a key of the same name was declared differently.
    """
    if value in OPTIONS.get(choice, {}):
        raise ValueError(f"{choice}={value!r} is registered already")
    _claim(keys)
    OPTIONS.setdefault(choice, {})[value] = Option(choice, value, tuple(keys), calls, dict(info))
    _changed()


def register_regularizer(
    name: str, *, weight: Key, keys: tuple[Key, ...] = (), calls: Callable[..., Any], when: When | None = None
) -> None:
    """Add a weighted term of the objective (its ``weight`` key, default 0: off).

    Args:
        name: the term's name, as the run's metrics name it.
        weight: its weight key, ≥ 0.
        keys: its other keys.
        calls: the term: (model outputs, context, **its keys' ``arg`` keywords) → a scalar.
        when: the choice the term belongs to (None: every run).

    Raises:
        ValueError: ``name`` is registered already, or a key of the same name was declared differently.
    """
    if name in REGULARIZERS:
        raise ValueError(f"regularizer {name!r} is registered already")
    _claim((weight, *keys))
    REGULARIZERS[name] = Regularizer(name, weight, tuple(keys), calls, when)
    _changed()


def unregister(choice: str, value: Any) -> None:
    """Remove a registered value (a test's own loss, after the test); keys no one else uses go with it.

    Args:
        choice: the choice.
        value: its registered value to remove.

    Raises:
        KeyError: ``value`` is not registered for ``choice``.
    """
    removed = OPTIONS[choice].pop(value)
    still = {k.name for opts in OPTIONS.values() for opt in opts.values() for k in opt.keys}
    still |= set(CORE) | {k.name for reg in REGULARIZERS.values() for k in (reg.weight, *reg.keys)}
    for k in removed.keys:
        if k.name not in still:
            del _DECLARED[k.name]
    _changed()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` now and after every registration (:mod:`train.app.config` rebuilds its tables).

    Args:
        listener: a function of no arguments.
    """
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
    """The registration of ``choice=value``.

    Args:
        choice: the choice (``loss``, ``optimizer``, ...).
        value: its value.

    Returns:
        The :class:`Option` registered for it.

    Raises:
        UsageError: ``value`` is not registered for ``choice`` (the message lists those that are).
    """
    try:
        return OPTIONS[choice][value]
    except KeyError:
        raise UsageError(f"{choice} must be one of {list(OPTIONS.get(choice, {}))}, got {value!r}") from None


def keys() -> dict[str, Key]:
    """Every declared key by name: the core keys (their order), then each registration's keys, each once.

    Returns:
        Name → :class:`Key`; a registration's key carries the ``when`` its registrations give it (the values
        of its choice that list it), a regulariser's that of the regulariser.
    """
    out = dict(CORE)
    for choice, options in OPTIONS.items():
        for opt in options.values():
            for k in opt.keys:
                if k.name not in out:
                    out[k.name] = dataclasses.replace(k, when=_owners(choice, k.name))
    for reg in REGULARIZERS.values():
        for k in (reg.weight, *reg.keys):
            out.setdefault(k.name, dataclasses.replace(k, when=_listed(reg.when)))
    return out


def _listed(when: When | None) -> When | None:
    """``when`` with a ``kind`` over a choice of registered values (a geometry's output kind) as the values
    registered now that it holds for, so that help and messages list them (``geometry=atlas``)."""
    if when is None or when.kind is None or when.choice not in OPTIONS:
        return when
    return When(when.choice, tuple(v for v in OPTIONS[when.choice] if when.kind(v) in when.values))


def _owners(choice: str, name: str) -> When:
    """The :class:`When` of a key listed by some values of ``choice``."""
    owners = [opt for opt in OPTIONS[choice].values() if any(k.name == name for k in opt.keys)]
    kind = CORE[choice].kind if choice in CORE else None
    label = "|".join(str(opt.info.get("label", opt.value)) for opt in owners) if kind is not None else None
    return When(choice, tuple(opt.value for opt in owners), kind, label)


def kwargs(cfg: RunConfig, keys_: tuple[Key, ...]) -> dict[str, Any]:
    """``{arg: value}`` of ``keys_`` in ``cfg``, the keys without an ``arg`` and the None values left out.

    A None value is left out so that the callee uses its own default.

    Args:
        cfg: a run's configuration.
        keys_: the keys to pass.

    Returns:
        The keyword arguments, each key's ``arg`` with its value in ``cfg``.
    """
    return {k.arg: getattr(cfg, k.name) for k in keys_ if k.arg and getattr(cfg, k.name) is not None}


def option_kwargs(cfg: RunConfig, choice: str) -> dict[str, Any]:
    """The keyword arguments of what ``cfg``'s value of ``choice`` calls.

    Args:
        cfg: a run's configuration.
        choice: the choice (``loss``, ``optimizer``, ``schedule``, ...).

    Returns:
        ``{arg: value}`` of the keys its registration uses (:func:`kwargs`).

    Raises:
        UsageError: ``cfg``'s value of ``choice`` is not registered.
    """
    value = getattr(cfg, choice)
    owner = CORE.get(choice)
    return kwargs(
        cfg, option(choice, value if owner is None or owner.kind is None else owner.kind(value)).keys
    )
