"""What every paper's reproduction shares: the papers, the scales, the run helper, claim and result records,
and the statistics (mean ± sd, paired bootstrap, per-query nearest neighbours)."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from geojax import metrics
from train import evaluate
from train.app import cli, config, data, loop, report, step
from train.app.errors import UsageError
from train.helpers import files

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold at this scale", "inconclusive"
NOT_TESTABLE = "not testable at this scale"  # the runs a claim rests on are not worth having (Arms)
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE)
LEARNED = 2.0  # a run learned when its P@1 reaches LEARNED × chance (1 / classes); below: "failed to learn"
EQUIVALENT = 0.02  # the margin of every "≈" claim: a difference within ±2 points of P@1 / accuracy
ABOVE_BASELINE = 0.03  # a learned embedding worth having: P@1 at least 3 points above the raw pixels
LEVEL = 0.95  # the confidence level of every interval a verdict is judged on
# The cpu scale's share of the papers' epochs: 180,000 training images per run (3 epochs of Fashion-MNIST's
# 60,000, each image in the recipe's views) on the small CNN with batch norm, each seed its own program (three
# CNN replicas in one program gave 2.4 replica-steps/s, one alone 5.4 steps/s, though the first shared the
# cores with another run for most of its time): the five papers' 61 Fashion-MNIST runs take about 3.5 hours
# on two CPU cores.
CPU_IMAGES = 180_000
# The cpu scale's training recipe for every supervised run: geojax's recipe for 28×28 images on a CPU
# (train.app.presets.CPU_SMALL_IMAGES: the small CNN with batch norm, one view per image, ±2 px crops with
# flips, 12 epochs) with the app's optimiser (AdamW 1e-3, weight decay 1e-4, cosine to 0 after 100 warm-up
# steps), batches of 256 where they are drawn at random, fp32, no EMA, no early stopping. On two CPU cores it
# takes Stowell 2026's objective on the sphere to P@1 0.90 on Fashion-MNIST in under 10 minutes
# (benchmarks/results/cpu_recipe.json), where the papers' own optimisers and lengths, cut to this machine's
# share, do not learn. A run keeps what its claim compares and its paper's objective (geometry, loss,
# temperatures, regularisers, similarity, clipping, batch sampler and, for a sampler that composes batches by
# class, their size); the paper's own recipe is what the paper scale runs.
CPU_RECIPE: dict[str, Any] = {
    **config.CPU_SMALL_IMAGES,
    "width": None,
    "precision": "fp32",
    "batch_size": 256,
    "optimizer": "adamw",
    "lr": 1e-3,
    "weight_decay": 1e-4,
    "schedule": "cosine",
    "lr_min": 0.0,
    "warmup": 100,
    "ema": None,
    "select_best": False,
}
CHECKPOINT_EVERY = 2000  # steps between a run's checkpoints (an interrupted run loses at most these)
# The paper scale's network for a recipe whose preset builds none of its paper's networks: Korman 2021's
# MTriplet fine-tunes an ImageNet-pretrained GoogLeNet on 227 × 227 crops (§3.2.1), which geojax does not
# build; its preset's encoder is the app's MLP. The stand-in is the ResNet-18 of the paper's MSimCLR runs on
# MNIST and Fashion-MNIST (appendix A.1), trained from scratch.
STAND_IN = "resnet18"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Paper:
    """A reproduced paper: its command-line selector, how the text cites it, the section title, and whether
    its reproduction trains models (Hong, Meng & Yuan 2018's only fits codes to the pixels)."""

    key: str  # python -m train.reproduce <key>; also the reproduce_<key>.json file name
    citation: str  # author and year
    title: str
    trains: bool = True
    recipe: str = ""  # where the recipe's values come from and how it deviates, in one line (the page's
    # recipe table; the comments in train/app/presets.py give the detail)


PAPERS: dict[str, Paper] = {
    p.key: p
    for p in (
        Paper(
            key="000",
            citation="Stowell 2026",
            title="Torus embeddings (Stowell 2026, arXiv 2603.03135)",
            recipe="best epoch on 10 % held out of training (the public code selects on the test set); PQ on "
            "the 8-bit values; CIFAR-stem ResNet-18 from scratch (the code: ImageNet ResNet-18, pretrained, "
            "224 px)",
        ),
        Paper(
            key="001",
            citation="Korman 2021",
            title="Atlas / manifold target spaces: MSimCLR and MTriplet (Korman 2021, arXiv 2106.07062)",
            recipe="no clipping; A.1's crop, jitter, grayscale without a flip (crop area 0.08–1, SimCLR's); "
            "the heads of the public code; probe 20 epochs (geojax's; the paper gives none, its public code: "
            "100); MTriplet from scratch on a ResNet-18 (the paper: ImageNet-pretrained GoogLeNet, 227 px)",
        ),
        Paper(
            key="002",
            citation="Hong, Meng & Yuan 2018",
            title="Tensorized Projection vs ITQ binary embedding (Hong, Meng & Yuan, AAAI 2018)",
            trains=False,
        ),
        Paper(
            key="003",
            citation="Feeney & Hughes 2024",
            title="SupCon vs SINCERE, cosine vs negative arc length (Feeney & Hughes 2024, blog)",
            recipe="the authors' fork: ResNet-50, SGD 0.9 with weight decay 1e-4, lr 0.65 / 0.35, τ 0.1 / "
            "0.05, batch 512, 800 epochs",
        ),
        Paper(
            key="004",
            citation="Bouhsine et al. 2024",
            title="SimO loss and its orthogonality ablation (Bouhsine et al. 2024)",
            recipe="D = 16, batch 128, AdamW: geojax's choices",
        ),
    )
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scale:
    """Sizes of one reproduction scale: ``paper`` (the papers' encoder and length), ``cpu`` (the same recipes
    with a small encoder, at the papers' epochs or the share of them that fits this machine), ``quick`` or the
    test-only ``tiny``.

    Every run is a paper's recipe (an app preset) on the chosen data with this scale's encoder; it trains the
    recipe's epochs, or ``images`` training images (steps × batch) where those are fewer, or (the ``gpu``
    scale) its paper's share ``fractions[paper]`` of the recipe's epochs.
    """

    name: str
    encoder: str | None  # every run's encoder ("cnn", "mlp"; in fp32, of ``width`` and ``norm``), or None:
    # each recipe's own network (its preset's encoder; STAND_IN where the preset builds none of its paper's
    # networks) in its own precision
    width: int | None  # that encoder's width (None: its own, geojax.models.OWN_WIDTHS)
    norm: str | None  # that encoder's normalisation (None: its own)
    images: int | None  # at most this many training images per run (None: the recipe's epochs)
    recipe: dict[str, Any] | None = None  # the training recipe of every supervised run (labels=class), at its
    # own length (CPU_RECIPE); None: each paper's own
    fractions: dict[str, float] | None = None  # per paper, the share of its recipes' epochs each run trains
    # (recipes given in epochs; None: all of them). Pinned: a changed share changes every run's config, and
    # the runs trained with the old one are no longer read back.
    probe_epochs: int | None  # linear / piecewise-linear probe epochs (None: the recipe's)
    steps_per_call: int  # training steps per dispatch (an accelerator idles between short steps)
    replicas: bool  # train a configuration's seeds as one program (seeds=S), where only seed 0's embeddings
    # are needed (Stowell 2026's sphere / torusN runs, Korman 2021's MSimCLR runs)
    seeds: int  # training seeds per configuration (MTriplet, Feeney & Hughes 2024)
    charts: tuple[int, ...]  # Korman 2021's MSimCLR chart counts at d = 2 (the claim compares the first two)
    atlas_seeds: int  # … and its training seeds per chart count (the paper: three)
    torus_seeds: int  # Stowell 2026: training seeds per geometry in the sphere vs torusN comparison
    unstable_dims: tuple[int, ...]  # Stowell 2026's torusC stability test: the low dimensions D
    unstable_steps: int  # … steps per run (the instabilities arise early in training, Stowell 2026 §3.1)
    unstable_seeds: int  # … seeds per dimension and clipping setting
    simo_dims: tuple[int, ...]  # Bouhsine et al. 2024: embedding dimensions of the SimO ablation …
    simo_seeds: int  # … and its training seeds per dimension and variant
    binary_factors: tuple[float, ...]  # Hong, Meng & Yuan 2018: code bits b / input width d
    binary_rows: int  # Hong, Meng & Yuan 2018: at most this many feature rows
    binary_max_bits: int  # … and codes of at most this many bits (ITQ's b × b rotation grows as b³)
    itq_iters: int
    tp_iters: int
    bootstrap: int  # Feeney & Hughes 2024: test-set bootstrap resamples
    pq_iters: int


SCALES: dict[str, Scale] = {
    "paper": Scale(
        name="paper",
        encoder=None,
        width=None,
        norm=None,
        images=None,
        probe_epochs=None,
        steps_per_call=10,
        # Each seed its own program: on an H100 MSimCLR's step (ResNet-18, batch 128, 28×28×1) ran 137
        # steps/s alone and 82 / 88 replica-steps/s as 3 / 8 seeds in one program (0.60× / 0.64× one seed at
        # a time; benchmarks/results/train_step_gpu.json).
        replicas=False,
        seeds=3,
        charts=(1, 16, 4, 32),
        atlas_seeds=3,
        torus_seeds=3,
        unstable_dims=(2, 4, 8),
        unstable_steps=1000,
        unstable_seeds=3,
        simo_dims=(16, 4),
        simo_seeds=3,
        binary_factors=(0.25, 0.5, 1.0, 2.0, 4.0),
        binary_rows=70000,
        binary_max_bits=4096,
        itq_iters=50,
        tp_iters=5,
        bootstrap=1000,
        pq_iters=25,
    ),
    "gpu": Scale(
        name="gpu",
        encoder=None,
        width=None,
        norm=None,
        images=None,
        # Each paper's share of its epochs, chosen so that its whole sweep (every run, three seeds, the
        # evaluation) fits one 9-minute command on one H100 (train.reproduce.plan's estimate, printed by
        # --print, with --jobs 4 as benchmarks/gpu_sweep.sh runs it): Korman 2021 1/75 (MSimCLR 100 → 1.33
        # epochs, MTriplet 300 → 4; 441 s expected, 474 s measured on an H200); Stowell 2026 1/25 (100 → 4
        # epochs; its torusC runs are fixed at unstable_steps: 471 s); Feeney & Hughes 2024 1/100 (394 s);
        # Bouhsine et al. 2024 1/10 (363 s).
        fractions={"001": 1 / 75, "000": 1 / 25, "003": 1 / 100, "004": 1 / 10},
        probe_epochs=None,
        steps_per_call=10,
        replicas=False,
        seeds=3,
        charts=(1, 16, 4, 32),
        atlas_seeds=3,
        torus_seeds=3,
        unstable_dims=(2, 4, 8),
        unstable_steps=1000,
        unstable_seeds=3,
        simo_dims=(16, 4),
        simo_seeds=3,
        binary_factors=(0.25, 0.5, 1.0, 2.0, 4.0),
        binary_rows=70000,
        binary_max_bits=4096,
        itq_iters=50,
        tp_iters=5,
        bootstrap=1000,
        pq_iters=25,
    ),
    "cpu": Scale(
        name="cpu",
        encoder="cnn",
        width=None,
        norm="batch",
        images=CPU_IMAGES,
        recipe=CPU_RECIPE,
        probe_epochs=10,
        steps_per_call=1,
        replicas=False,
        seeds=3,
        charts=(1, 16, 4, 32),
        atlas_seeds=3,
        torus_seeds=3,
        unstable_dims=(2, 4, 8),
        unstable_steps=300,
        unstable_seeds=2,
        simo_dims=(16,),  # D = 4 too would take the sweep past 6 hours on two cores
        simo_seeds=3,
        binary_factors=(0.25, 0.5, 1.0, 2.0, 4.0),
        binary_rows=4000,
        binary_max_bits=4096,  # b = 2d and 4d of 784-pixel images: the long codes
        itq_iters=20,
        tp_iters=5,
        bootstrap=1000,
        pq_iters=25,
    ),
    "quick": Scale(
        name="quick",
        encoder="mlp",
        width=128,
        norm=None,
        images=20_000,
        probe_epochs=10,
        steps_per_call=1,
        replicas=False,
        seeds=1,
        charts=(1, 16),
        atlas_seeds=1,
        torus_seeds=2,
        unstable_dims=(2,),
        unstable_steps=150,
        unstable_seeds=2,
        simo_dims=(16,),
        simo_seeds=1,
        binary_factors=(0.5, 1.0, 2.0),
        binary_rows=5000,
        binary_max_bits=1024,
        itq_iters=10,
        tp_iters=3,
        bootstrap=1000,
        pq_iters=10,
    ),
    "tiny": Scale(
        name="tiny",
        encoder="mlp",
        width=16,
        norm=None,
        images=384,
        probe_epochs=1,
        steps_per_call=1,
        replicas=False,
        seeds=1,
        charts=(1, 16),
        atlas_seeds=1,
        torus_seeds=1,
        unstable_dims=(2,),
        unstable_steps=3,
        unstable_seeds=1,
        simo_dims=(8,),
        simo_seeds=1,
        binary_factors=(1.0,),
        binary_rows=600,
        binary_max_bits=1024,
        itq_iters=2,
        tp_iters=1,
        bootstrap=50,
        pq_iters=2,
    ),
}


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
    report: dict[str, Any] | None = None  # the app's report without workdir / device; None when diverged
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
        """Whether the run predates the ``current`` code (train.app.report.code_version): its code hash
        differs, or it recorded none."""
        return self.code_version is None or self.code_version.get("code_hash") != current["code_hash"]


@dataclasses.dataclass(frozen=True)
class Arms:
    """The runs a claim rests on and the bar each must clear for the claim to be testable at a scale: the
    raw pixels' 1-NN under the run's own protocol (its report's ``baseline_raw_1nn``) plus ABOVE_BASELINE, or
    (``bar="learned"``) LEARNED × chance. A claim whose runs do not all clear it is not a result about the
    paper: :func:`gate` makes it NOT_TESTABLE."""

    patterns: tuple[str, ...]  # run names (fnmatch patterns)
    metric: str = "precision_at_1"  # the metric the bar applies to (Run.metric)
    bar: str = "raw"  # "raw" or "learned"
    every: bool = True  # every run must clear the bar (False: at least one)


# The recipes the cpu scale's supervised runs were trained with, for the page of a claim that is not testable.
RECIPES_TRIED = (
    "Recipes tried at the cpu scale for the supervised runs: each paper's own optimiser, views and schedule "
    "cut to 180,000 training images on the small CNN (the page before this one: on Fashion-MNIST no Stowell "
    "2026 run reached raw-pixel 1-NN + 3 points, Feeney & Hughes 2024's SupCon sat at the raw pixels and "
    "SINCERE below them, SimO at 73.8 % P@1), then geojax's CPU recipe of this page."
)


def gate(claims: Sequence[Claim], arms: dict[str, Arms], runs: Sequence[Run], classes: int) -> list[Claim]:
    """``claims`` with those whose runs (``arms``: claim text prefix → Arms) are not all worth having made
    NOT_TESTABLE, naming the runs short of the bar; a claim without arms, or whose runs all clear it, as it
    was."""
    out = []
    for c in claims:
        spec = next((a for prefix, a in arms.items() if c.claim.startswith(prefix)), None)
        if spec is None:
            out.append(c)
            continue
        chosen = [r for r in runs if any(fnmatch.fnmatch(r.name, p) for p in spec.patterns)]
        short = {r.name: r.metric(spec.metric) for r in chosen if not _clears(r, spec, classes)}
        if chosen and (not short if spec.every else len(short) < len(chosen)):
            out.append(c)
            continue
        bar = "raw-pixel 1-NN + 3 pts" if spec.bar == "raw" else f"{LEARNED:g}× chance"
        named = ", ".join(f"{name} {100 * v:.1f}" for name, v in short.items()) or "none trained"
        out.append(
            dataclasses.replace(c, ours=f"{c.ours}; runs short of {bar}: {named}", verdict=NOT_TESTABLE)
        )
    return out


def _clears(run: Run, spec: Arms, classes: int) -> bool:
    """Whether ``run`` clears ``spec``'s bar (a diverged run does not)."""
    value = run.metric(spec.metric)
    if not math.isfinite(value):
        return False
    if spec.bar == "learned":
        return value >= LEARNED / classes
    assert run.report is not None  # a finite metric comes from a report
    return value >= run.report["baseline_raw_1nn"]["precision_at_1"] + ABOVE_BASELINE


@dataclasses.dataclass
class Findings:
    """What a paper's reproduction found: claims with verdicts, Markdown tables, raw details, plots, notes."""

    claims: list[Claim]
    tables: list[tuple[str, str]]  # (title, Markdown table)
    details: dict[str, Any]  # the numbers behind the claims (JSON-able after ``clean``)
    plots: list[str] = dataclasses.field(default_factory=list)  # PNG file names in the output folder
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Context:
    """What every paper's reproduction needs: scale, data spec and its train/test split, the sweep folder that
    holds one run directory per run, the output folder, the data set's file-name tag, and the runs made so
    far."""

    scale: Scale
    data: str
    dataset: data.Dataset
    runs_dir: str
    out: str
    paper: str = ""  # the reproduced paper's key (PAPERS), which picks its share of epochs (Scale.fractions)
    test_fraction: float = 0.25  # held-out fraction of digits / npz data (train.app.data's seeded split)
    tag: str = ""  # output file-name suffix of this data set ("" for digits, see data_tag)
    runs: list[Run] = dataclasses.field(default_factory=list)
    listing: list[str] | None = None  # listing mode: each run's ``python -m train`` line, nothing trained

    @property
    def fraction(self) -> float | None:
        """The share of its recipes' epochs each run of this paper trains at this scale (None: all)."""
        if self.scale.fractions is None:
            return None
        if self.paper not in self.scale.fractions:
            raise ValueError(
                f"scale {self.scale.name!r} sets no share of epochs for paper {self.paper!r} "
                f"(it has {sorted(self.scale.fractions)})"
            )
        return self.scale.fractions[self.paper]

    def file(self, stem: str, ext: str) -> str:
        """An output file name of this data set: ``<stem>.<ext>`` for digits, ``<stem>_<tag>.<ext>`` else."""
        return f"{stem}_{self.tag}.{ext}" if self.tag else f"{stem}.{ext}"


def version_text(version: dict[str, Any] | None) -> str:
    """A run's code version in a few words: 'commit 1a2b3c4 (code a1b2c3d4e5f6)', or 'unknown' for a run that
    recorded none."""
    if version is None:
        return "unknown"
    commit = version.get("commit")
    code = f"code {version['code_hash'][:12]}"
    return f"commit {commit[:7]}{'+changes' if version.get('dirty') else ''} ({code})" if commit else code


def data_tag(spec: str) -> str:
    """The file-name tag of a data spec: '' for digits, the npz file's stem, the IDX folder's name, or the
    tfds name.

    >>> data_tag("digits"), data_tag("npz:../data/mnist_t10k.npz"), data_tag("tfds:fashion_mnist")
    ('', 'mnist_t10k', 'fashion_mnist')
    >>> data_tag("idx:/usr/share/datasets/fashion-mnist/")
    'fashion_mnist'
    """
    if spec == "digits":
        return ""
    if spec.startswith("idx:"):
        name = os.path.basename(os.path.normpath(spec[4:]))
    else:
        name = os.path.splitext(os.path.basename(spec[4:]))[0] if spec.startswith("npz:") else spec
    return "".join(c if c.isalnum() else "_" for c in name.removeprefix("tfds:"))


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


# --------------------------------------------------------------------------------------------------------
# Training runs.
# --------------------------------------------------------------------------------------------------------


def run_keys(ctx: Context, overrides: dict[str, Any]) -> dict[str, Any]:
    """The keys every run of ``ctx`` gets beside its ``overrides`` (a preset plus changes): the data set, the
    encoder (the scale's, of its width and normalisation, in fp32; or the recipe's own network in its own
    precision: :func:`recipe_encoder`), its length (the recipe's epochs over the images it trains on, or the
    scale's share of them), quiet logging; the held-out fraction and the probe's epochs only when the run
    uses them (the config refuses keys a run does not use)."""
    s = ctx.scale
    recipe = scale_recipe(s, config.make(**overrides))
    if any(k in overrides for k in config.LENGTH_KEYS):  # a run of its own length (torusC's stability test)
        recipe.pop("epochs", None)
    keys: dict[str, Any] = {
        "dataset": ctx.data,
        "encoder": s.encoder or recipe_encoder(config.make(**overrides)),
        "steps_per_call": s.steps_per_call,
        "progress": False,
    }
    if s.encoder is not None:
        keys |= {"width": s.width, "precision": "fp32"} | ({"norm": s.norm} if s.norm else {})
    keys |= recipe
    cfg = config.make(**{**keys, **overrides})
    images = None if recipe else s.images  # the scale's recipe trains its own length
    steps = run_steps(cfg, training_images(cfg, ctx.dataset), images, ctx.fraction)
    keys.pop("epochs", None)  # the length is given as steps
    keys |= {"steps": steps, "log_every": min(25, steps), "checkpoint_every": min(steps, CHECKPOINT_EVERY)}
    optional = {"test_fraction": ctx.test_fraction, "probe_epochs": s.probe_epochs}
    return keys | {k: v for k, v in optional.items() if v is not None and config.applies(k, cfg)}


def scale_recipe(scale: Scale, cfg: config.Config) -> dict[str, Any]:
    """The training keys ``scale`` gives a run of ``cfg`` (a preset plus its changes): its recipe for a
    supervised run (labels=class; a batch sampler that composes batches by class keeps its batch size), none
    for a self-supervised one (its two views and its paper's optimiser: what it learns from) or at a scale
    without one."""
    if scale.recipe is None or cfg.labels != "class":
        return {}
    return {k: v for k, v in scale.recipe.items() if k != "batch_size" or cfg.sampler == "random"}


def recipe_encoder(cfg: config.Config) -> str:
    """The network a recipe's paper trains: its preset's encoder, or STAND_IN where the preset's is the app's
    MLP (a recipe whose paper network geojax does not build: Korman 2021's MTriplet)."""
    return STAND_IN if cfg.encoder == "mlp" else cfg.encoder


def training_images(cfg: config.Config, dataset: data.Dataset) -> int:
    """Images a run of ``cfg`` trains on: ``dataset``'s training split (its first half of the classes with
    ``classes=disjoint``), less the validation split that ``select_best`` holds out of it
    (train.app.data.disjoint_classes and hold_out, as the training loop carves them)."""
    n = len(dataset.train_y)
    labels_only = dataclasses.replace(dataset, train_x=np.arange(n)[:, None])  # the splits read the labels
    if cfg.classes == "disjoint":
        labels_only = data.disjoint_classes(labels_only)
    if not cfg.select_best:
        return len(labels_only.train_y)
    return len(data.hold_out(labels_only, cfg.val_fraction)[0].train_y)


def run_steps(cfg: config.Config, n_train: int, images: int | None, fraction: float | None = None) -> int:
    """Steps of a run: the recipe's (its epochs over ``n_train`` images, or its steps), at most ``images``
    training images (steps × batch, at least one step) when given; with a ``fraction``, that share of a
    recipe given in epochs (rounded, at least one step; a recipe given in steps keeps them)."""
    steps = step.resolve(cfg, n_train).steps
    if fraction is not None and cfg.epochs is not None:
        steps = max(1, round(steps * fraction))
    return steps if images is None else max(1, min(steps, images // cfg.batch_size))


def scale_note(ctx: Context) -> str:
    """What the scale does to every recipe, in one sentence for a paper's notes."""
    s = ctx.scale
    if s.encoder == "mlp":
        what = f"the recipes with an MLP encoder (width {s.width}, fp32) in place of the papers' ResNet-18"
    elif s.encoder is None:
        what = (
            "the recipes with each one's own network (its preset's encoder; where geojax builds none of its "
            f"paper's networks, {STAND_IN} from scratch)"
        )
    else:
        shape = "its own width" if s.width is None else f"width {s.width}"
        what = f"the recipes with geojax's {s.encoder} encoder ({shape}, {s.norm or 'its own'} norm, fp32)"
    probe = "" if s.probe_epochs is None else f"; probes trained for {s.probe_epochs} epochs"
    if ctx.fraction is not None:
        return (
            f"Scale {s.name}: {what}, each for {fraction_text(ctx.fraction)} of its recipe's epochs (a "
            f"recipe given in steps keeps them){probe}."
        )
    if s.images is None:
        return f"Scale {s.name}: {what}, each for its recipe's epochs{probe}."
    share = s.images / len(ctx.dataset.train_y)
    length = (
        f"its recipe's epochs or {s.images:,} training images (steps × batch; {share:.3g} epochs of this "
        "training split), whichever is less"
    )
    if s.recipe is None:
        return f"Scale {s.name}: {what}, each for {length}; a schedule (cosine) spans the steps run{probe}."
    r = s.recipe
    encoder = what.removeprefix("the recipes with ")
    return (
        f"Scale {s.name}: every supervised run trains with one recipe that learns on this machine, its "
        f"paper's objective kept (geometry, loss, temperatures, regularisers, similarity, clipping, batch "
        f"sampler): geojax's {r['encoder']} encoder with {r['norm']} norm in {r['precision']}, "
        f"{r['views']} view per image ({r['augment']}), {r['optimizer']} at {r['lr']:g} (weight decay "
        f"{r['weight_decay']:g}, {r['schedule']} after {r['warmup']} warm-up steps), batches of "
        f"{r['batch_size']} where drawn at random, {r['epochs']:g} epochs; the paper's own optimiser, views "
        f"and length are what the paper scale runs. Self-supervised runs keep their paper's recipe (two "
        f"views, its optimiser) with {encoder}, each for {length}{probe}."
    )


def fraction_text(fraction: float) -> str:
    """A share of epochs as the page states it: '1/60' for the reciprocal of a whole number, else '0.25'.

    >>> fraction_text(1 / 60), fraction_text(0.25), fraction_text(0.3)
    ('1/60', '1/4', '0.3')
    """
    whole = round(1 / fraction)
    return f"1/{whole}" if math.isclose(1 / fraction, whole, rel_tol=1e-9) else f"{fraction:.3g}"


def arg_text(value: Any) -> str:
    """A config value as ``train.app.config.from_args`` reads it back exactly: None → ``none``, booleans →
    ``true`` / ``false``, floats by ``repr`` (the shortest text that parses to the same float), the rest by
    ``str``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def run_args(ctx: Context, name: str, overrides: dict[str, Any]) -> list[str]:
    """The ``key=value`` arguments of run ``name`` (a preset plus ``overrides``): the preset, the run's own
    changes, the scale's keys (:func:`run_keys`) and its run directory ``ctx.runs_dir/name``. The sweep trains
    ``train.app.config.from_args`` of exactly these, and ``--print`` shows them as ``python -m train`` lines,
    so a run started by hand with that line is the sweep's run (and lands where the sweep reads it back)."""
    values = {**run_keys(ctx, overrides), **overrides, "workdir": os.path.join(ctx.runs_dir, name)}
    order = ["preset", *overrides, *values]
    return [f"{k}={arg_text(values[k])}" for k in dict.fromkeys(order) if k in values]


def command_line(args: Sequence[str]) -> str:
    """``python -m train ARGS``, each argument quoted for a POSIX shell where it needs it."""
    return " ".join(["python -m train", *(shlex.quote(a) for a in args)])


def train_recipe(
    ctx: Context, name: str, *, need_embeddings: bool = True, **overrides: Any
) -> tuple[Run, dict[str, Any] | None]:
    """Train one configuration (a preset by name plus ``overrides``) with the app's own ``train.app.cli.run``
    in its run directory ``ctx.runs_dir/name``, on the config that :func:`run_args` gives as command-line
    arguments; returns (run, embeddings). A run that an earlier invocation finished (its report.json is there,
    for the same config: trained by this sweep, or by hand with its ``python -m train`` line) is read back,
    not trained again; one that was interrupted resumes from its newest checkpoint.

    The embeddings are ``train.evaluate.load_run``'s dict of the run's embeddings.npz (with the trained
    ``similarity``). A finished run read back without them (its report.json and config.json alone, as
    committed under ``docs/runs/``) returns None in their place where the caller does not
    ``need_embeddings``, and is refused with one line where it does. A run whose training metrics become
    non-finite (``FloatingPointError`` from the loop) is
    recorded as diverged and returns no embeddings. In listing mode (``ctx.listing``) the run's command line
    is appended there and the run returned untrained (no report, no embeddings).
    """
    if any(r.name == name for r in ctx.runs):
        raise ValueError(f"run name {name!r} is used twice in one reproduction")
    args = run_args(ctx, name, overrides)
    cfg = config.from_args(args)
    epochs = round(cfg.steps * cfg.batch_size / training_images(cfg, ctx.dataset), 3)
    run = Run(
        name=name,
        overrides=dict(overrides),
        seed=cfg.seed,
        steps=cfg.steps,
        epochs=epochs,
        workdir=cfg.workdir,
    )
    if ctx.listing is not None:
        ctx.listing.append(command_line(args))
        ctx.runs.append(run)
        return run, None
    t0 = time.time()
    current = report.code_version()
    emb: dict[str, Any] | None
    finished = os.path.join(cfg.workdir, "report.json")
    try:
        if is_finished(cfg):  # by an earlier invocation, by hand, or committed
            with open(finished) as f:
                rep = json.load(f)
            run.extra["reused"] = True
        else:  # new, or interrupted: train.app.cli.run resumes from the run directory's newest checkpoint
            rep = {**cli.run(cfg), "code_version": current}
        emb = _embeddings(cfg.workdir, need=need_embeddings)
        run.code_version = rep.get("code_version")
        run.report = {k: v for k, v in rep.items() if k not in ("workdir", "device", "code_version")}
    except FloatingPointError as err:
        emb = None
        run.diverged, run.error, run.code_version = True, str(err)[:300], current
    # A run read back keeps the wall time it took when it was trained (training and evaluation).
    reused = run.report is not None and run.extra.get("reused")
    run.wall_s = run.report["timing"]["total_s"] if reused else round(time.time() - t0, 2)
    _read_training_log(run, os.path.join(cfg.workdir, "metrics.jsonl"))
    ctx.runs.append(run)
    state = "DIVERGED" if run.diverged else "finished earlier" if run.extra.get("reused") else "done"
    if run.stale(current):
        state += f" (STALE: trained by {version_text(run.code_version)}, not the current code)"
    print(f"  run {name}: {state} in {run.wall_s} s", flush=True)
    return run, emb


ANALYSIS_FILE = "analysis.json"  # a run's per-run analyses, kept (and committed) beside its report


def run_analysis(
    run: Run, emb: dict[str, Any] | None, key: str, compute: Callable[[dict[str, Any]], Any]
) -> Any:
    """A per-run analysis that needs the run's embeddings (e.g. its quantised report, per-query outcomes),
    kept under ``key`` in its run directory's ``analysis.json`` so that a run read back without its
    embeddings (committed under ``docs/runs/``) still has it. Computed from ``emb`` with ``compute`` where
    it is not stored for this very report (the file records report.json's SHA-256: a run trained again has
    its analyses computed again) and written atomically; None for a run that diverged. A run with neither
    the analysis nor its embeddings is refused with one line naming what is missing."""
    if run.diverged or run.report is None:
        return None
    path = os.path.join(run.workdir, ANALYSIS_FILE)
    digest = _sha256(os.path.join(run.workdir, "report.json"))
    stored: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("report_sha256") != digest:
            stored = {}  # the analyses of an earlier training of this run directory
    if key in stored.get("analyses", {}):
        return stored["analyses"][key]
    if emb is None:
        raise ValueError(
            f"run {run.name!r}: analysis {key!r} is not stored in {path} and the run's embeddings.npz is not "
            "there to compute it: train the run again (remove its report.json) or put its embeddings.npz back"
        )
    value = clean(compute(emb))
    stored = {"report_sha256": digest, "analyses": {**stored.get("analyses", {}), key: value}}
    files.write_json(path, stored)
    return value


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


REPORT_KEYS = ("precision_at_1", "timing")  # what every finished run's report.json holds


def is_finished(cfg: config.Config) -> bool:
    """Whether ``cfg.workdir`` holds this run finished: its report.json beside the config.json of this
    config (``train.app.loop.check_workdir``) at its steps.

    A report that cannot be read back as this run's is refused in one line and its run directory set aside
    (renamed ``<run>.refused``, replacing an earlier one), so that the run trains again: a damaged report
    (not JSON, or without what every report holds) or a foreign one (beside another run's config.json, an
    unreadable one, or none)."""
    path = os.path.join(cfg.workdir, "report.json")
    if not os.path.exists(path):
        return False
    saved, problem = None, None
    try:
        saved = loop.check_workdir(cfg)
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
    except UsageError as err:
        problem = str(err).removeprefix(f"workdir {cfg.workdir!r} ")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = f"its report.json cannot be read ({err})"
    else:
        if saved is None:
            problem = "its report.json has no config.json beside it"
        elif not isinstance(rep, dict) or any(k not in rep for k in REPORT_KEYS):
            problem = f"its report.json lacks what every report holds ({', '.join(REPORT_KEYS)})"
    if problem is None:
        return saved is not None and saved.get("steps") == cfg.steps
    aside = os.path.normpath(cfg.workdir) + ".refused"
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(cfg.workdir, aside)
    print(
        f"  run {os.path.basename(os.path.normpath(cfg.workdir))}: refused: {problem}; set aside as {aside}, "
        "trained again",
        flush=True,
    )
    return False


def _embeddings(workdir: str, *, need: bool) -> dict[str, Any] | None:
    """The run's embeddings (``train.evaluate.load_run``); None for a run that has its report alone, or a
    ValueError naming the run where they are needed."""
    if os.path.exists(os.path.join(workdir, "embeddings.npz")):
        return evaluate.load_run(workdir)
    if need:
        raise ValueError(
            f"run {workdir!r} has a report but no embeddings.npz, which this paper's analysis needs: train "
            "it again (remove its report.json) or put its embeddings.npz back"
        )
    return None


def train_seeds(
    ctx: Context, name: str, seeds: int, *, need_embeddings: bool = True, **overrides: Any
) -> list[tuple[Run, dict[str, Any] | None]]:
    """Train seeds 0 … seeds − 1 of one configuration; returns (run ``<name>-seed<s>``, embeddings) per seed.

    Each seed has its own run directory (:func:`train_recipe`), or, where the scale trains replicas, the seeds
    are one program of ``seeds=S`` replicas in ``<name>-seeds<S>`` (train.app.cli's several-seeds run, each
    replica exactly its single-seed run), split into one record per seed that holds the program's training log
    and an equal share of its wall time (so that sums over records count the program once); only seed 0 has
    embeddings then (the app writes the first replica's).
    """
    if not ctx.scale.replicas or seeds == 1:
        return [
            train_recipe(ctx, f"{name}-seed{s}", need_embeddings=need_embeddings, **overrides, seed=s)
            for s in range(seeds)
        ]
    program, emb = train_recipe(
        ctx, f"{name}-seeds{seeds}", need_embeddings=need_embeddings, **overrides, seeds=seeds
    )
    ctx.runs.remove(program)
    per_seed = [None] * seeds if program.report is None else program.report["per_seed"]
    out = []
    for s, seed_report in enumerate(per_seed):
        run = dataclasses.replace(
            program,
            name=f"{name}-seed{s}",
            seed=s,
            report=seed_report,
            wall_s=round(program.wall_s / seeds, 2),
            extra={**program.extra, "program": program.name},
        )
        out.append((run, emb if s == 0 else None))
    ctx.runs.extend(run for run, _ in out)
    return out


def _read_training_log(run: Run, path: str) -> None:
    """From the run's metrics.jsonl: largest logged gradient norm, logged steps with a norm over 100, and
    the logged loss values."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    finite = [g for g in (r.get("grad_norm", math.nan) for r in rows) if math.isfinite(g)]
    run.max_grad_norm = max(finite) if finite else None
    run.steps_over_100 = int(sum(g > 100.0 for g in finite))
    run.logged_steps = len(rows)
    run.loss_trace = [r["loss"] for r in rows]


# --------------------------------------------------------------------------------------------------------
# Statistics.
# --------------------------------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    """Mean of the finite values (NaN when there are none, e.g. every run diverged)."""
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def mean_sd(values: Sequence[float]) -> str:
    """Fractions as percent: 'mean ± sd' over the finite values, sd the sample standard deviation (ddof = 1);
    'x' for one value, '–' for none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "–"
    if len(finite) == 1:
        return f"{100 * finite[0]:.1f}"
    return f"{100 * np.mean(finite):.1f} ± {100 * np.std(finite, ddof=1):.1f}"


Interval = tuple[float, float, float]  # (estimate, lower bound, upper bound)


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """(mean, lo, hi): the Student-t confidence interval of the mean of the finite values (e.g. per-seed
    paired differences); lo and hi are NaN for fewer than two values (one seed shows no spread), all NaN for
    none."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if len(finite) == 0:
        return math.nan, math.nan, math.nan
    m = float(finite.mean())
    if len(finite) == 1:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(finite) - 1) * finite.std(ddof=1) / math.sqrt(len(finite)))
    return m, m - half, m + half


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """(mean(a) − mean(b), lo, hi): Welch's confidence interval of the difference of two independent means
    (the finite values of each; e.g. seeds of two configurations); NaN bounds when either has fewer than two.

    Welch 1947: se² = s_a²/n_a + s_b²/n_b, Welch–Satterthwaite degrees of freedom se⁴ / Σ (s²/n)² / (n − 1).
    """
    x, y = (np.asarray([v for v in vs if math.isfinite(v)], dtype=np.float64) for vs in (a, b))
    if len(x) == 0 or len(y) == 0:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - y.mean())
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan, math.nan
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df) * se)
    return diff, diff - half, diff + half


def point(value: float) -> Interval:
    """A value computed once, with no spread to estimate (a deterministic count, one fit) as an interval."""
    return value, value, value


# --------------------------------------------------------------------------------------------------------
# Verdict rules: every claim's verdict comes from one of these, on an interval over seeds (or test queries)
# or on counts of runs; each can come out "holds", "does not hold at this scale" or "inconclusive".
# --------------------------------------------------------------------------------------------------------


def learned(p_at_1: float, chance: float) -> bool:
    """A run learned when its P@1 is finite and at least LEARNED × ``chance``; a run below that "failed to
    learn" (one that diverged has no P@1 and did not learn either)."""
    return math.isfinite(p_at_1) and p_at_1 >= LEARNED * chance


def above(ci: Interval, threshold: float) -> str:
    """A claim "the quantity exceeds ``threshold``" on its interval (estimate, lo, hi): HOLDS when the whole
    interval lies above it, FAILS when the whole interval lies below it, INCONCLUSIVE otherwise (the interval
    straddles it, or is undefined: NaN)."""
    _, lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if lo > threshold:
        return HOLDS
    return FAILS if hi < threshold else INCONCLUSIVE


def within(ci: Interval, margin: float = EQUIVALENT) -> str:
    """A claim "the difference is negligible" (equivalence within ±``margin``) on its interval: HOLDS when the
    whole interval lies inside ±margin, FAILS when it lies wholly outside (above +margin or below −margin),
    INCONCLUSIVE otherwise (or when undefined: NaN). Unlike "the interval contains 0", a noisy estimate
    cannot pass: its wide interval leaves the margin."""
    _, lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if -margin <= lo and hi <= margin:
        return HOLDS
    return FAILS if lo > margin or hi < -margin else INCONCLUSIVE


def fewer(events_a: int, runs_a: int, events_b: int, runs_b: int, alpha: float = 1 - LEVEL) -> str:
    """A claim "events (divergence, failure) are rarer in group a than in group b" on counts of runs: HOLDS
    when Fisher's exact test (one-sided) gives p < ``alpha``, FAILS when a has at least b's rate, INCONCLUSIVE
    otherwise (fewer, but too few runs to tell). Counts must satisfy 0 ≤ events ≤ runs."""
    for name, k, n in (("a", events_a, runs_a), ("b", events_b, runs_b)):
        if not 0 <= k <= n:
            raise ValueError(f"events_{name} must lie in [0, runs_{name}], got {k} of {n}")
    if runs_a == 0 or runs_b == 0:
        return INCONCLUSIVE
    if events_a * runs_b >= events_b * runs_a:
        return FAILS
    table = [[events_a, runs_a - events_a], [events_b, runs_b - events_b]]
    p = float(stats.fisher_exact(table, alternative="less").pvalue)
    return HOLDS if p < alpha else INCONCLUSIVE


def every(verdicts: Sequence[str]) -> str:
    """A claim made of several parts (e.g. one per geometry): FAILS when any part fails, INCONCLUSIVE when
    none fails but one is inconclusive (or there are no parts), HOLDS when every part holds."""
    if FAILS in verdicts:
        return FAILS
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def provided(verdict: str, condition: bool) -> str:
    """``verdict``, or INCONCLUSIVE when the runs it rests on do not meet ``condition`` (e.g. they did not
    learn: a rule must not hold, nor fail, on runs that learned nothing)."""
    return verdict if condition else INCONCLUSIVE


def bootstrap_diff(a: np.ndarray, b: np.ndarray, *, n: int, seed: int = 0) -> tuple[float, float, float]:
    """Paired test-set bootstrap of mean(a) − mean(b) for per-query outcomes: (diff, lo95, hi95).

    a, b: [Nq] outcomes of the same queries; n resamples of the queries with replacement.
    """
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    diffs = a[idx].mean(1) - b[idx].mean(1)
    return float(a.mean() - b.mean()), float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def nearest_labels(
    query: np.ndarray, reference: np.ndarray, reference_labels: np.ndarray, similarity: str
) -> np.ndarray:
    """Label [Nq] of each query's most similar reference row (ties to the lower index, as geojax.metrics).

    Used where a per-query outcome is needed (bootstrap, per-class recall); each caller checks its mean
    against geojax.metrics' 1-NN figure of the same run.
    """
    nn = metrics.nearest_neighbors(query, reference, k=1, similarity=similarity)
    return np.asarray(reference_labels)[np.asarray(nn)[:, 0]]


def count_interval(counts: Sequence[float], level: float = LEVEL) -> Interval:
    """:func:`t_interval` of per-seed counts (e.g. classes lost, paired by seed), with undefined (NaN) bounds
    where the finite counts are all the same: the t interval of identical counts has zero width, which says
    the seeds agree, not that their mean is known (any rule on it is inconclusive)."""
    finite = [v for v in counts if math.isfinite(v)]
    m, lo, hi = t_interval(finite, level)
    if len(set(finite)) <= 1:
        return m, math.nan, math.nan
    return m, lo, hi


def interval_text(ci: Interval, seeds: int, *, unit: str = "pts", over: str = "paired seeds") -> str:
    """An interval of a difference of fractions as the page states it: 'Δ +1.2 pts, 95% CI [+0.4, +2.0] over
    3 paired seeds'; 'Δ +1.2 pts (1 paired seed: no interval)' where its bounds are undefined, '–' for no
    estimate."""
    m, lo, hi = ci
    if math.isnan(m):
        return "–"
    head = f"Δ {100 * m:+.1f} {unit}"
    if math.isnan(lo) or math.isnan(hi):
        return f"{head} ({seeds} {over.removesuffix('s') if seeds == 1 else over}: no interval)"
    return f"{head}, 95% CI [{100 * lo:+.1f}, {100 * hi:+.1f}] over {seeds} {over}"
