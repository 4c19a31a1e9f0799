"""What every paper's reproduction shares: the paper record, the scales, the context of a paper's sweep and
each run's config and command line. Training a run or reading it back from its run directory is in
:mod:`.rundirs`, each paper's record in its own module, the papers in :mod:`.papers`, the records of a result
in :mod:`.records`, the statistics and verdict rules in :mod:`.rules`."""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from train.app import config, data, step
from train.reproduce.records import Run

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
    encoder: str | None = None  # every run's encoder ("cnn", "mlp"; in fp32, of ``width`` and ``norm``), or
    # None: each recipe's own network (its preset's encoder; STAND_IN where the preset builds none of its
    # paper's networks) in its own precision
    width: int | None = None  # that encoder's width (None: its own, geojax.models.OWN_WIDTHS)
    norm: str | None = None  # that encoder's normalisation (None: its own)
    images: int | None = None  # at most this many training images per run (None: the recipe's epochs)
    recipe: dict[str, Any] | None = None  # the training recipe of every supervised run (labels=class), at its
    # own length (CPU_RECIPE); None: each paper's own
    shares: bool = False  # each run trains its paper's share of its recipes' epochs (Paper.fractions at
    # this scale; a paper that sets none is refused); False: all of them. The result JSON records the shares
    # themselves, per paper, as ``fractions``.
    probe_epochs: int | None = None  # linear / piecewise-linear probe epochs (None: the recipe's)
    steps_per_call: int = 1  # training steps per dispatch (an accelerator idles between short steps)
    replicas: bool = False  # train a configuration's seeds as one program (seeds=S), where only seed 0's
    # embeddings are needed; off at every scale: on a GPU several seeds in one program ran slower per seed
    # (docs/performance.md, "On a GPU"), and on two CPU cores one run keeps both busy
    seeds: int = 3  # training seeds per configuration, where a paper sets none of its own (Korman 2021's
    # MTriplet, Feeney & Hughes 2024)
    bootstrap: int = 1000  # test-set bootstrap resamples (Feeney & Hughes 2024; Hong, Meng & Yuan 2018)


SCALES: dict[str, Scale] = {
    "paper": Scale(name="paper", steps_per_call=10),
    # Each paper's share of its epochs (its module's PAPER.fractions["gpu"]) is chosen so that its whole
    # sweep (every run, three seeds, the evaluation) fits one 9-minute command on one GPU
    # (train.reproduce.plan's estimate, printed by --print, with --jobs 4 as benchmarks/gpu_sweep.sh runs it).
    "gpu": Scale(name="gpu", shares=True, steps_per_call=10),
    "cpu": Scale(
        name="cpu", encoder="cnn", norm="batch", images=CPU_IMAGES, recipe=CPU_RECIPE, probe_epochs=10
    ),
    "quick": Scale(name="quick", encoder="mlp", width=128, images=20_000, probe_epochs=10, seeds=1),
    "tiny": Scale(name="tiny", encoder="mlp", width=16, images=384, probe_epochs=1, seeds=1, bootstrap=50),
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
    recipe = scale_recipe(s, config.make(**overrides), given=overrides)
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


def scale_recipe(scale: Scale, cfg: RunConfig, given: Collection[str] = ()) -> dict[str, Any]:
    """The training keys ``scale`` gives a run of ``cfg`` (a preset plus its changes, ``given`` the keys the
    run sets itself): its recipe for a supervised run (labels=class; a batch sampler that composes batches by
    class keeps its batch size), less the keys the run's own choices do not use (the recipe's AdamW weight
    decay under a run's own SGD); none for a self-supervised run (its two views and its paper's optimiser:
    what it learns from) or at a scale without one."""
    if scale.recipe is None or cfg.labels != "class":
        return {}
    keep = {k: v for k, v in scale.recipe.items() if k != "batch_size" or cfg.sampler == "random"}
    merged = dataclasses.replace(cfg, **{k: v for k, v in keep.items() if k not in given})
    return {k: v for k, v in keep.items() if config.applies(k, merged)}


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
