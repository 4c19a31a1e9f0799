"""What every paper's reproduction shares: the paper record, the scales and the run helper (each run's
config, its training or reading back, its per-run analyses). Each paper's record is in its own module, the
papers in :mod:`.papers`, the records of a result in :mod:`.records`, the statistics and verdict rules in
:mod:`.rules`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shlex
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from train import evaluate
from train.app import cli, config, data, loop, report, step
from train.app.errors import UsageError
from train.helpers import files
from train.reproduce.records import Run, clean, version_text

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

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
    """A reproduced paper: its command-line selector, how the text cites it, the section title, whether its
    reproduction trains models (Hong, Meng & Yuan 2018's only fits codes to the pixels), and its share of
    its recipes' epochs at each scale that trains a share (:attr:`Scale.shares`: the gpu scale). Each paper's
    module holds its own (``PAPER``)."""

    key: str  # python -m train.reproduce <key>; also the reproduce_<key>.json file name
    citation: str  # author and year
    title: str
    trains: bool = True
    recipe: str = ""  # where the recipe's values come from and how it deviates, in one line (the page's
    # recipe table; the comments in train/app/presets.py give the detail)
    fractions: Mapping[str, float] = dataclasses.field(default_factory=dict)  # scale name → the share of its
    # recipes' epochs each run trains there (recipes given in epochs). Pinned: a changed share changes every
    # run's config, and the runs trained with the old one are no longer read back.


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scale:
    """Sizes of one reproduction scale: ``paper`` (the papers' encoder and length), ``cpu`` (the same recipes
    with a small encoder, at the papers' epochs or the share of them that fits this machine), ``quick`` or the
    test-only ``tiny``.

    Every run is a paper's recipe (an app preset) on the chosen data with this scale's encoder; it trains the
    recipe's epochs, or ``images`` training images (steps × batch) where those are fewer, or (the ``gpu``
    scale, ``shares``) its paper's share of the recipe's epochs (:attr:`Paper.fractions`).

    What every paper shares is here; each paper's own sizes at a scale (its seeds per arm, dimensions, fit
    iterations) are its module's ``SIZES[scale.name]``.
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
    shares: bool = False  # each run trains its paper's share of its recipes' epochs (Paper.fractions at
    # this scale; a paper that sets none is refused); False: all of them. The result JSON records the shares
    # themselves, per paper, as ``fractions``.
    probe_epochs: int | None  # linear / piecewise-linear probe epochs (None: the recipe's)
    steps_per_call: int  # training steps per dispatch (an accelerator idles between short steps)
    replicas: bool  # train a configuration's seeds as one program (seeds=S), where only seed 0's embeddings
    # are needed (Stowell 2026's sphere / torusN runs, Korman 2021's MSimCLR runs)
    seeds: int  # training seeds per configuration, where a paper sets none of its own (Korman 2021's
    # MTriplet, Feeney & Hughes 2024)
    bootstrap: int  # test-set bootstrap resamples (Feeney & Hughes 2024; Hong, Meng & Yuan 2018)


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
        bootstrap=1000,
    ),
    "gpu": Scale(
        name="gpu",
        encoder=None,
        width=None,
        norm=None,
        images=None,
        # Each paper's share of its epochs (its module's PAPER.fractions["gpu"]), chosen so that its whole
        # sweep (every run, three seeds, the evaluation) fits one 9-minute command on one H100
        # (train.reproduce.plan's estimate, printed by --print, with --jobs 4 as benchmarks/gpu_sweep.sh runs
        # it).
        shares=True,
        probe_epochs=None,
        steps_per_call=10,
        replicas=False,
        seeds=3,
        bootstrap=1000,
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
        bootstrap=1000,
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
        bootstrap=1000,
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
        bootstrap=50,
    ),
}


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
    paper: Paper | None = None  # the reproduced paper (its share of epochs where the scale trains shares)
    test_fraction: float = 0.25  # held-out fraction of digits / npz data (train.app.data's seeded split)
    tag: str = ""  # output file-name suffix of this data set ("" for digits, see data_tag)
    runs: list[Run] = dataclasses.field(default_factory=list)
    listing: list[str] | None = None  # listing mode: each run's ``python -m train`` line, nothing trained

    @property
    def fraction(self) -> float | None:
        """The share of its recipes' epochs each run of this paper trains at this scale (None: all)."""
        if not self.scale.shares:
            return None
        if self.paper is None or self.scale.name not in self.paper.fractions:
            key = None if self.paper is None else self.paper.key
            raise ValueError(
                f"scale {self.scale.name!r} trains each paper's share of its epochs, and paper {key!r} sets "
                "none there (its PAPER's fractions)"
            )
        return self.paper.fractions[self.scale.name]

    def file(self, stem: str, ext: str) -> str:
        """An output file name of this data set: ``<stem>.<ext>`` for digits, ``<stem>_<tag>.<ext>`` else."""
        return f"{stem}_{self.tag}.{ext}" if self.tag else f"{stem}.{ext}"


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


def scale_recipe(scale: Scale, cfg: RunConfig) -> dict[str, Any]:
    """The training keys ``scale`` gives a run of ``cfg`` (a preset plus its changes): its recipe for a
    supervised run (labels=class; a batch sampler that composes batches by class keeps its batch size), none
    for a self-supervised one (its two views and its paper's optimiser: what it learns from) or at a scale
    without one."""
    if scale.recipe is None or cfg.labels != "class":
        return {}
    return {k: v for k, v in scale.recipe.items() if k != "batch_size" or cfg.sampler == "random"}


def recipe_encoder(cfg: RunConfig) -> str:
    """The network a recipe's paper trains: its preset's encoder, or STAND_IN where the preset's is the app's
    MLP (a recipe whose paper network geojax does not build: Korman 2021's MTriplet)."""
    return STAND_IN if cfg.encoder == "mlp" else cfg.encoder


def training_images(cfg: RunConfig, dataset: data.Dataset) -> int:
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


def run_steps(cfg: RunConfig, n_train: int, images: int | None, fraction: float | None = None) -> int:
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


TRIALS = "recipe-trials"  # a sub-folder of a paper's runs: the recipes tried before the sweep's, one run each


def recipe_trials(runs_dir: str) -> list[dict[str, Any]]:
    """The recipes tried for a paper's runs before its sweep's own, committed as run directories (each its
    config.json and report.json, trained by hand with the sweep's ``python -m train`` line and one change)
    under ``runs_dir/recipe-trials``: the one named ``base`` (the sweep's recipe at the trials' length) first,
    then the others by name, each with its name, the keys it changes from ``base``, its steps, P@1 and the raw
    pixels' 1-NN under the same protocol. [] where none were committed."""
    folder = os.path.join(runs_dir, TRIALS)
    if not os.path.isdir(folder):
        return []
    found = {}
    for name in sorted(os.listdir(folder), key=lambda n: (n != "base", n)):
        paths = [os.path.join(folder, name, f) for f in ("config.json", "report.json")]
        if all(os.path.isfile(p) for p in paths):
            with open(paths[0], encoding="utf-8") as f, open(paths[1], encoding="utf-8") as g:
                found[name] = (json.load(f), json.load(g))
    if "base" not in found:
        raise ValueError(f"{folder} holds no 'base' run (the sweep's recipe) to compare the others with")
    base = found["base"][0]
    return [
        {
            "name": name,
            "changes": {k: v for k, v in cfg.items() if k != "workdir" and base.get(k) != v},
            "steps": cfg["steps"],
            "p_at_1": rep["precision_at_1"],
            "raw": rep["baseline_raw_1nn"]["precision_at_1"],
        }
        for name, (cfg, rep) in found.items()
    ]


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


def is_finished(cfg: RunConfig) -> bool:
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
