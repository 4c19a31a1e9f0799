"""The records of a paper's reproduction: a claim with its verdict, a training run (what was asked, its
report, its training log), what the paper's reproduction found and the sizes of its scale, as the result JSON
stores them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from train.reproduce.same_code import same_results
from train.reproduce.verdicts import HOLDS, VERDICTS, learned


@dataclasses.dataclass(frozen=True, kw_only=True)
class Claim:
    """One row of a paper's claim table; ``verdict`` (one of VERDICTS) is computed by the rule helpers below
    from our numbers."""

    claim: str  # what the paper claims, in a few words
    ours: str  # our numbers
    paper: str  # the paper's numbers (or "no number: …")
    source: str  # where in the paper
    rule: str  # the rule that decides the verdict from our numbers
    verdict: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS

    def to_json(self) -> dict[str, str]:
        """The JSON row: claim, ours, paper, source, rule, verdict."""
        return dataclasses.asdict(self)


_UNRECORDED = (
    "extra",
    "workdir",
)  # Run fields left out of its JSON record (extra's entries go in at the top)


@dataclasses.dataclass
class Run:
    """One training run: what was asked, whether it diverged, ``train.app.cli.run``'s report and the log."""

    name: str
    overrides: dict[str, Any]  # config keys given on top of the scale's defaults
    seed: int
    steps: int
    epochs: float  # passes over the images it trains on (steps × batch / training_images)
    diverged: bool = False
    report: dict[str, Any] | None = None  # the app's report without workdir, device, code; None: diverged
    error: str | None = None  # the divergence message
    wall_s: float = 0.0
    max_grad_norm: float | None = None  # largest logged gradient norm
    steps_over_100: int | None = None  # logged steps with a gradient norm over 100 (Stowell 2026's clip)
    logged_steps: int = 0
    loss_trace: list[float] = dataclasses.field(default_factory=list)
    code_version: dict[str, Any] | None = (
        None  # train.app.report.code_version of the code it was trained with
    )
    # (None: a run trained before runs recorded it)
    device: str | None = None  # the device kind it was trained on (its report's; None: diverged)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # a paper's per-run results
    workdir: str = ""  # its run directory (not recorded: a folder of the machine that ran the sweep)

    def metric(self, key: str) -> float:
        """A report metric of the run (``recall_at_1`` / ``compressed_recall_at_1``: R@1 of the report's
        recall_at_k / compressed_recall_at_k, NaN where it has none); NaN if diverged."""
        if self.report is None:
            return math.nan
        if key in ("recall_at_1", "compressed_recall_at_1"):  # R@1 of its recall_at_k (d_M, compressed code)
            table = self.report.get(key.replace("_at_1", "_at_k"))
            return math.nan if table is None else float(table["1"])
        return float(self.report[key])

    def to_json(self) -> dict[str, Any]:
        """The JSON record: the fields (``report`` only when trained, ``error`` only when diverged) and
        ``extra``'s entries at the top level."""
        fields = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _UNRECORDED
        }
        if self.report is None:
            del fields["report"]
        if self.error is None:
            del fields["error"]
        return {**fields, **self.extra}

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Run:
        """The run of a :meth:`to_json` record (its unknown keys back in ``extra``; a record made before runs
        recorded their epochs has NaN epochs)."""
        row = {"epochs": math.nan, **row}
        names = {f.name for f in dataclasses.fields(cls)} - set(_UNRECORDED)
        return cls(
            **{k: v for k, v in row.items() if k in names},
            extra={k: v for k, v in row.items() if k not in names},
        )

    def learned(self, chance: float) -> bool:
        """Whether the run trained to a P@1 of at least LEARNED × ``chance`` (False when it diverged)."""
        return learned(self.metric("precision_at_1"), chance)

    def stale(self, current: dict[str, Any]) -> bool:
        """Whether the run predates the ``current`` code (:func:`stale`)."""
        return stale(self.code_version, current)


@dataclasses.dataclass
class Findings:
    """What a paper's reproduction found: claims with verdicts, Markdown tables, raw details, plots, notes."""

    claims: list[Claim]
    tables: list[tuple[str, str]]  # (title, Markdown table)
    details: dict[str, Any]  # the numbers behind the claims (JSON-able after ``clean``)
    plots: list[str] = dataclasses.field(default_factory=list)  # PNG file names in the output folder
    notes: list[str] = dataclasses.field(default_factory=list)


def stale(code_version: Mapping[str, Any] | None, current: Mapping[str, Any]) -> bool:
    """Whether a run trained by ``code_version`` (as its report records it) predates the ``current`` code
    (train.app.report.code_version): it recorded none, or a code hash that neither equals the current one nor
    is checked to give the same results (:func:`train.reproduce.same_code.same_results`)."""
    return code_version is None or not same_results(code_version["code_hash"], current["code_hash"])


def version_text(version: dict[str, Any] | None) -> str:
    """A run's code version in a few words: 'commit 1a2b3c4 (code a1b2c3d4e5f6)', or 'unknown' for a run that
    recorded none."""
    if version is None:
        return "unknown"
    commit = version.get("commit")
    code = f"code {version['code_hash'][:12]}"
    return f"commit {commit[:7]}{'+changes' if version.get('dirty') else ''} ({code})" if commit else code


def trained_on(runs: Sequence[Run], here: str) -> str:
    """The device kinds ``runs`` were trained on, in the order they first appear, joined by " and ": the
    machine a page's training time was spent on, whichever machine judges it; ``here`` (the judging
    machine's) where no run recorded one."""
    kinds = list(dict.fromkeys(r.device for r in runs if r.device))
    return " and ".join(kinds) or here


def clean(v: Any) -> Any:
    """JSON-able copy: NaN/inf → None, numpy scalars → Python, tuples → lists, keys → str."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# The order in which a result JSON records its scale's sizes (the results written so far all have it): the
# shared ones (common.Scale, with the papers' shares of epochs as ``fractions``) and each paper's own (its
# module's SIZES); a size not named here follows them.
SIZE_ORDER = (
    *("name", "encoder", "width", "norm", "images", "recipe", "fractions", "probe_epochs", "steps_per_call"),
    *("replicas", "seeds", "charts", "atlas_seeds", "torus_seeds", "unstable_dims", "unstable_steps"),
    *("unstable_seeds", "simo_dims", "simo_seeds", "binary_factors", "binary_rows", "binary_max_bits"),
    *("itq_iters", "tp_iters", "encode_repeats", "bootstrap", "pq_iters"),
)


def scale_record(shared: Any, own: Sequence[Any], fractions: Mapping[str, float] | None) -> dict[str, Any]:
    """The result JSON's ``scale``: the fields of ``shared`` (a common.Scale), its ``shares`` recorded as
    ``fractions`` (per paper, the share of its recipes' epochs each run trains at that scale; None: all of
    them), and the fields of each paper's own sizes at that scale (``own``: dataclasses, e.g. each module's
    ``SIZES[scale.name]``), in SIZE_ORDER. A size two of them name is refused."""
    record = dataclasses.asdict(shared)
    del record["shares"]
    record["fractions"] = None if fractions is None else dict(fractions)
    for sizes in own:
        fields = dataclasses.asdict(sizes)
        if clash := sorted(record.keys() & fields.keys()):
            raise ValueError(f"sizes {clash} are named twice in scale {record['name']!r}")
        record |= fields
    rank = {k: i for i, k in enumerate(SIZE_ORDER)}
    return dict(sorted(record.items(), key=lambda kv: rank.get(kv[0], len(rank))))
