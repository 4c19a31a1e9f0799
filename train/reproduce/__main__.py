"""Reproduction tables for five papers at reduced scale, the papers' numbers beside ours.

    python -m train.reproduce <000|001|002|003|004|all> [--scale cpu|paper|quick]
        [--data digits|npz:PATH|idx:DIR|NAME] [--test-fraction F] [--out DIR] [--jobs J]
        [--retrain-stale] [--runs PATTERN] [--print]
    python -m train.reproduce render [--data SPEC] [--out DIR]

Each paper's claims are tested with the library and the training app as they are (``train.app.cli.run``,
``train.evaluate.quantised_report``, ``train.binary_eval.itq_vs_tp``, ``geojax``); nothing is re-implemented.
Every verdict ("holds" / "does not hold at this scale") is computed from the numbers by the rule printed
beside it. Outputs in ``--out`` (default ``reproduction/``): ``reproduce_<selector>.json`` per paper
(``reproduce_<selector>_<data>_<scale>.json`` for data other than digits and scales other than cpu, e.g.
``reproduce_001_fashion_mnist.json``, ``reproduce_001_fashion_mnist_paper.json``),
``reproduction.md`` (rendered from every such JSON present, one part per data set, so papers and data sets
can be run one at a time into the same folder) and plots; all written atomically. Every training run has
its own run directory, ``--out/runs/<data>/<scale>/<paper>/<run>/``: running the same command again reads back
the runs that finished and resumes the ones that were interrupted, so a sweep can be spread over several
invocations (and machines sharing the folder).

Every run is the paper's recipe (an app preset) on the chosen data. ``--scale paper`` runs it as the paper
does (the recipe's own network, ResNet-18 or ResNet-50, and its epochs; a GPU's work; Korman 2021's MTriplet
on a ResNet-18 from scratch, not the paper's ImageNet-pretrained GoogLeNet); ``cpu`` (the default) with
geojax's small CNN (batch norm, fp32), for the recipe's epochs or 180,000 training images per run, whichever
is less (3 epochs of Fashion-MNIST); ``quick`` smaller still (an MLP, minutes per paper).

Data: ``digits`` (scikit-learn's bundled 8×8 digits, offline; the default), ``npz:PATH`` (``images`` and
``labels``, as ``train.app.data``; ``python -m train.app.data IMAGES_IDX LABELS_IDX OUT.npz`` makes one from
the official MNIST IDX files), ``idx:DIR`` (a folder of the four MNIST-layout IDX files, with their official
split: MNIST, Fashion-MNIST, KMNIST) or a tfds name (mnist, fashion_mnist, cifar10, cifar100; prepared
offline). Digits and npz data are split by ``train.app.data``'s seeded, stratified split with
``--test-fraction`` held out (default 0.25; 0.2 turns the 10,000 MNIST test images into 8,000 train / 2,000
test).

``--print`` trains nothing: it lists every training run of the selected papers (at that scale, data
and ``--out``) as the ``python -m train key=value …`` line it is: the recipe's preset, the run's changes,
the scale's encoder and length, the seed (or ``seeds=S`` for a several-seeds program) and the run directory
the sweep reads it back from. The sweep trains exactly the config that line parses to
(``train.app.config.from_args``), so a row can be rerun by hand: a run started with its line lands in the
sweep's folder, and the next sweep reads its report back instead of training it again. The output is a
shell script (each paper's header a ``#`` comment), e.g. ``python -m train.reproduce all --scale cpu --data
idx:DIR --print > runs.sh``.

``render`` trains nothing: it re-judges every stored JSON result in ``--out`` with the current rules from
its runs and details (claims and tables rewritten, the judging code's version recorded beside the runs' own)
and renders ``reproduction.md``. Every run records the code version it was trained with
(``train.app.report.code_version``); a run read back that was trained by other code, or that recorded none, is
flagged as stale in the output and on the page, unless ``python -m train.reproduce.same_code`` has checked
that the two versions give the same outputs bit for bit (:mod:`train.reproduce.same_code`).

As ``python -m train`` does, the command first sets glibc's malloc up for training (huge pages, or the freed
memory kept: :func:`train.helpers.allocator.start`; ``MALLOC_PERTURB_=0`` in the environment opts out), since
with ``--jobs 1`` the runs train in this process.

Every run of one command shares a JAX compilation cache in a temporary folder, so that repeated
configurations (other seeds, the other clipping setting) reuse what is already compiled.

A finished run that other code trained is read back and marked stale; ``--retrain-stale`` sets its run
directory aside (``<run>.stale``) and trains it again. ``--runs PATTERN`` trains only the runs whose name
matches the shell pattern and judges nothing, so that a sweep too long for one command on a borrowed machine
goes as two: the same command without ``--runs`` reads them back and judges the paper. ``--print`` and the
expected time before a sweep count only the runs it will train.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fnmatch
import glob
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.experimental.compilation_cache import compilation_cache

from train.app import config, data, report
from train.helpers import allocator, files
from train.reproduce import atlas, papers, plan, records, render
from train.reproduce.common import (
    SCALES,
    Context,
    Scale,
    data_tag,
    fraction_text,
)
from train.reproduce.papers import MODULES, PAPERS
from train.reproduce.records import Claim, Findings, Run, clean, trained_on
from train.reproduce.rules import NOT_TESTABLE, RECIPES_TRIED, TRIALS_NOTE, gate, trials_note
from train.reproduce.rundirs import is_finished, read_back, recipe_trials, retrain_if_stale

RUNNERS: dict[str, Callable[[Context], Findings]] = {key: m.findings for key, m in MODULES.items()}


def scale_record(scale: Scale) -> dict[str, Any]:
    """The result JSON's record of ``scale``: its shared sizes, every paper's share of epochs at it and every
    paper's own sizes (the SIZES of each paper module that has some), :func:`records.scale_record`."""
    own = [m.SIZES[scale.name] for m in MODULES.values() if hasattr(m, "SIZES")]
    return records.scale_record(scale, own, papers.fractions(scale))


def context(
    key: str,
    *,
    scale: Scale,
    data_spec: str,
    out: str,
    test_fraction: float = 0.25,
    listing: list[str] | None = None,
) -> Context:
    """The context of paper ``key``'s runs: the data loaded and split, its run directories under
    ``out/runs/<data>/<scale>/<key>/``, its output files' tag; with a ``listing`` list, runs are listed there
    (their command lines), not trained."""
    ds = data.load(data_spec, test_fraction=test_fraction)
    tag = data_tag(data_spec)
    return Context(
        scale=scale,
        data=data_spec,
        dataset=ds,
        runs_dir=os.path.join(out, "runs", tag or "digits", scale.name, key),
        out=out,
        paper=PAPERS[key],
        test_fraction=test_fraction,
        tag="_".join(t for t in (tag, "" if scale.name == "cpu" else scale.name) if t),
        listing=listing,
    )


def list_runs(key: str, *, scale: Scale, data_spec: str, out: str, test_fraction: float = 0.25) -> list[str]:
    """The ``python -m train …`` line of every training run of paper ``key``, in the sweep's order, from the
    paper's own run code in listing mode (nothing trained; [] for a paper that trains nothing)."""
    if key not in RUNNERS:
        raise ValueError(f"paper must be one of {list(PAPERS)}, got {key!r}")
    if not PAPERS[key].trains:
        return []
    lines: list[str] = []
    ctx = context(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction, listing=lines)
    level = config.log.level  # the config's notes (a preset's key the run replaces) are for the run itself
    config.log.setLevel(logging.ERROR)
    try:
        MODULES[key].run(ctx)
    finally:
        config.log.setLevel(level)
    return lines


def run_paper(
    key: str, *, scale: Scale, data_spec: str, out: str, command: str, test_fraction: float = 0.25
) -> dict[str, Any]:
    """Reproduce one paper (``key`` in PAPERS), write ``out/reproduce_<key>[_<data tag>].json`` and return
    its content.

    The JSON holds claims (claim, ours, paper, source, rule, verdict), tables ([title, Markdown]), details,
    plots, notes, the selector (``seed``), title, command, scale, data, runs, training seeds, the devices the
    runs were trained on (:func:`trained_on`), wall time and the finishing time.
    """
    if key not in RUNNERS:
        raise ValueError(f"paper must be one of {list(PAPERS)} or 'all', got {key!r}")
    paper = PAPERS[key]
    print(f"{key}: {paper.title} [{scale.name}, data {data_spec}]", flush=True)
    t0 = time.time()
    ctx = context(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction)
    ds = ctx.dataset
    found = RUNNERS[key](ctx)
    trials = recipe_trials(ctx.runs_dir)
    found.details |= {"recipe_trials": trials} if trials else {}
    found.claims = gated(key, found.claims, ctx.runs, ds.num_classes, found.notes, found.details)
    result = {
        "claims": [c.to_json() for c in found.claims],
        "tables": [list(t) for t in found.tables],
        "details": found.details,
        "plots": found.plots,
        "notes": found.notes,
        "seed": key,
        "title": paper.title,
        "command": command,
        "scale": scale_record(scale),
        "data": {
            "spec": data_spec,
            "tag": ctx.tag,
            "name": ds.name,
            "test_fraction": test_fraction,
            "train": len(ds.train_y),
            "test": len(ds.test_y),
            "image_shape": list(ds.image_shape),
            "classes": ds.num_classes,
        },
        "runs": [r.to_json() for r in ctx.runs],
        "training_seeds": sorted({r.seed for r in ctx.runs}),
        "device": trained_on(ctx.runs, str(jax.devices()[0].device_kind)),
        "wall_s": round(time.time() - t0, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    result["judged"] = {"code_version": report.code_version(), "date": result["finished"]}
    result = clean(result)
    files.write_json(os.path.join(out, ctx.file(f"reproduce_{key}", "json")), result)
    return result


def gated(
    key: str, claims: list[Claim], runs: list[Run], classes: int, notes: list[str], details: dict[str, Any]
) -> list[Claim]:
    """Paper ``key``'s claims through :func:`rules.gate` (its module's ARMS); where one is not testable, the
    recipes tried end ``notes`` (once; taken out where none is): the scale's, then the paper's own recipe
    trials (``details['recipe_trials']``, :func:`rundirs.recipe_trials`) where it has some."""
    out = gate(claims, MODULES[key].ARMS, runs, classes, details.get("bars"))
    trials = details.get("recipe_trials") or []
    notes[:] = [n for n in notes if n != RECIPES_TRIED and not n.startswith(TRIALS_NOTE)]
    if any(c.verdict == NOT_TESTABLE for c in out):
        notes.append(RECIPES_TRIED)  # last, whatever the paper's own notes' order
        notes.extend([trials_note(trials)] if trials else [])
    return out


def judge_stored(out: str, *, data_spec: str | None = None) -> list[dict[str, Any]]:
    """Re-judge every stored ``out/reproduce_<key>[_<tag>].json`` with the current rules and tables (no
    training: from its runs and details alone), rewrite it with the judging code's version and date, and
    render ``out/reproduction.md``; returns the rewritten results.

    With ``data_spec``, the results of that data set also get what needs only the data, where missing:
    Korman 2021's 2-d PCA probe and its PCA bars (:func:`atlas_needs`). The data must be the stored split
    (sizes checked).
    """
    loaded: data.Dataset | None = None
    results = []
    for path in sorted(glob.glob(os.path.join(out, "reproduce_[0-9][0-9][0-9]*.json"))):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        if result["seed"] == "001" and data_spec is not None and atlas_needs(result):
            if data_tag(result["data"]["spec"]) == data_tag(data_spec):
                loaded = loaded or _stored_split(data_spec, result, path)
                add_atlas_baselines(result, loaded)
        if result["seed"] == "001":  # analyse's numbers alone: copies of Table 2 older versions stored go
            result["details"] = atlas.numbers(result)
        runs = [Run.from_json(r) for r in result["runs"]]
        claims, tables = MODULES[result["seed"]].judge(result, runs)
        # The recipe trials are those before the current recipe: a result stored before the scale recorded
        # its recipe was trained on an earlier one, which they were not tried against.
        tag, scale = data_tag(result["data"]["spec"]) or "digits", result["scale"]
        trials = recipe_trials(os.path.join(out, "runs", tag, scale["name"], result["seed"]))
        result["details"].pop("recipe_trials", None)
        result["details"] |= {"recipe_trials": trials} if trials and "recipe" in scale else {}
        classes = result["data"]["classes"]
        claims = gated(result["seed"], claims, runs, classes, result["notes"], result["details"])
        result |= {
            "claims": [c.to_json() for c in claims],
            "tables": [list(t) for t in tables],
            "judged": {
                "code_version": report.code_version(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            },
        }
        result = clean(result)
        files.write_json(path, result)
        results.append(result)
    render.render(out)
    return results


def atlas_needs(result: dict[str, Any]) -> list[str]:
    """What a stored Korman 2021 result lacks that needs only its data: the 2-d PCA probe, and under the
    disjoint-class protocol 1-NN on the pixels' PCA at each code width a claim's bar needs."""
    d = result["details"]
    needs = [] if "pca_probe" in d else ["pca_probe"]
    widths = {str(w) for w in atlas.PCA_WIDTHS} - set(d.get("pca_recall", {}))
    return needs + (["pca_recall"] if d.get("mtriplet_protocol") == atlas.DISJOINT and widths else [])


def add_atlas_baselines(result: dict[str, Any], ds: data.Dataset) -> None:
    """Put into a stored Korman 2021 result what :func:`atlas_needs` finds missing, computed from ``ds``."""
    d, needs = result["details"], atlas_needs(result)
    if "pca_probe" in needs:
        epochs = result["scale"].get("probe_epochs") or config.make(preset="msimclr_mnist").probe_epochs
        d["pca_probe"] = atlas.pca_probe(
            ds, dim=atlas.ATLAS_DIM, epochs=epochs, seeds=result["scale"]["atlas_seeds"]
        )
    if "pca_recall" in needs:
        d["pca_recall"] = {str(w): atlas.pca_recall(ds, dim=w) for w in atlas.PCA_WIDTHS}


def _stored_split(data_spec: str, result: dict[str, Any], path: str) -> data.Dataset:
    """``data_spec`` loaded with the stored result's test fraction, refused unless its split has the stored
    sizes."""
    stored = result["data"]
    loaded = data.load(data_spec, test_fraction=stored["test_fraction"])
    if (len(loaded.train_y), len(loaded.test_y)) != (stored["train"], stored["test"]):
        raise ValueError(
            f"--data {data_spec} has {len(loaded.train_y)} train / {len(loaded.test_y)} test images, {path} "
            f"was made on {stored['train']} / {stored['test']}"
        )
    return loaded


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The command line; returns each reproduced paper's JSON content (with ``--print``: each paper's
    ``seed`` and ``commands``, its runs' command lines)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m train.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "paper",
        help="".join(f"{key} ({p.citation}) | " for key, p in PAPERS.items())
        + "all | render (no training: re-judge the JSON results in --out with the current rules and render "
        "reproduction.md; --data adds what needs only that data set, e.g. Korman 2021's 2-d PCA probe)",
    )
    ap.add_argument(
        "--scale",
        default="cpu",
        choices=list(SCALES),
        help="paper (each recipe's network, the papers' epochs: for a GPU) | cpu (the small CNN with batch "
        "norm, the papers' epochs or 180,000 images per run; default) | quick (minutes per paper) | tiny "
        "(tests)",
    )
    ap.add_argument(
        "--data",
        help="digits (default) | npz:PATH | idx:DIR | mnist | fashion_mnist | cifar10 | cifar100",
    )
    ap.add_argument(
        "--test-fraction",
        type=float,
        help="held-out fraction of digits / npz data (default 0.25; 0.2 for MNIST's 8,000 / 2,000); data "
        "with a test split of its own (idx:DIR, tfds) uses that",
    )
    ap.add_argument("--out", default="reproduction", help="output folder (default reproduction/)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="train up to this many runs at once, each a `python -m train` process of its --print line "
        "(on a GPU with room to spare: the processes' host work, compilation included, overlaps), before the "
        "sweep reads them back; default 1 (every run in this process)",
    )
    ap.add_argument(
        "--compilation-cache",
        metavar="DIR",
        help="JAX's persistent compilation cache for every run of the command (kept, so a later command "
        "reuses it; default: a temporary folder)",
    )
    ap.add_argument(
        "--runs",
        metavar="PATTERN",
        help="train only the runs whose name (their run directory's) matches this shell pattern, e.g. "
        "'*-sgd-seed*', as `python -m train` processes (--jobs at a time), and judge nothing: the paper's "
        "command without --runs reads them back and judges (a sweep split over two commands)",
    )
    ap.add_argument(
        "--retrain-stale",
        action="store_true",
        help="train again the finished runs that code other than the current one trained (their run "
        "directories set aside as <run>.stale), rather than read them back marked stale",
    )
    ap.add_argument(
        "--print",
        action="store_true",
        help="train nothing: print every training run of the papers (at this --scale, --data and --out) as "
        "the `python -m train key=value ...` line the sweep trains it with (seeds and run directory "
        "included), one a line, each paper's header a # comment",
    )
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be ≥ 1, got {args.jobs}")
    if args.paper == "render" and args.print:
        ap.error("--print lists the training runs of a paper or all, not of render")
    if args.paper == "render":
        if not os.path.isdir(args.out):
            ap.error(f"--out must be a folder of reproduce_*.json results, got {args.out!r}")
        if args.data is not None:
            try:
                config.make(dataset=args.data)
            except ValueError as err:
                ap.error(str(err))
        results = judge_stored(args.out, data_spec=args.data)
        print(f"re-judged {len(results)} results; wrote {os.path.join(args.out, 'reproduction.md')}")
        return results
    args.data = args.data or "digits"
    keys = tuple(PAPERS) if args.paper == "all" else (args.paper,)
    if any(k not in PAPERS for k in keys):
        ap.error(f"paper must be one of {', '.join(PAPERS)} or all, got {args.paper!r}")
    scale = SCALES[args.scale]
    given = {} if args.test_fraction is None else {"test_fraction": args.test_fraction}
    try:  # validate before any work
        config.make(dataset=args.data, **given)
    except ValueError as err:
        ap.error(str(err))
    test_fraction = config.DEFAULTS["test_fraction"] if args.test_fraction is None else args.test_fraction
    for key in keys if args.runs else ():
        lines = list_runs(key, scale=scale, data_spec=args.data, out=args.out, test_fraction=test_fraction)
        if not _selected(lines, args.runs):
            names = ", ".join(_name(line) for line in lines)
            ap.error(f"--runs {args.runs!r} matches none of paper {key}'s runs: {names}")
    if args.print:
        return [
            _print_runs(
                key,
                scale,
                args.data,
                args.out,
                test_fraction,
                args.jobs,
                retrain_stale=args.retrain_stale,
                runs=args.runs,
            )
            for key in keys
        ]
    command = "python -m train.reproduce " + " ".join(shlex.quote(a) for a in _without_cache(argv))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    results = []
    with contextlib.ExitStack() as stack:
        cache = args.compilation_cache or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="reproduce-jax-cache-")
        )
        for key in keys:
            if args.retrain_stale:
                where = dict(scale=scale, data_spec=args.data, out=args.out, test_fraction=test_fraction)
                set_aside_stale(key, **where, runs=args.runs)
            _announce(key, scale, args.data, args.out, test_fraction, args.jobs, runs=args.runs)
        for key in keys:
            if args.jobs > 1 or args.runs:
                train_apart(
                    key,
                    scale=scale,
                    data_spec=args.data,
                    out=args.out,
                    test_fraction=test_fraction,
                    jobs=args.jobs,
                    cache=cache,
                    runs=args.runs,
                )
        if args.runs:
            print(f"trained the runs matching {args.runs!r}; the command without --runs judges them")
            return []
        stack.enter_context(_compilation_cache(cache))
        for key in keys:
            results.append(
                run_paper(
                    key,
                    scale=scale,
                    data_spec=args.data,
                    out=args.out,
                    command=command,
                    test_fraction=test_fraction,
                )
            )
            render.render(args.out)
            print(f"{key}: " + "; ".join(f"{c['claim']}: {c['verdict']}" for c in results[-1]["claims"]))
    print(f"wrote {os.path.join(args.out, 'reproduction.md')} ({time.time() - t0:.0f} s)")
    return results


def _without_cache(argv: Sequence[str]) -> list[str]:
    """The command line less ``--compilation-cache DIR``: where compiled programs were kept changes no result,
    and the folder is often one of a machine that is gone.

    >>> _without_cache(["001", "--compilation-cache", "jax-cache", "--jobs", "4", "--compilation-cache=x"])
    ['001', '--jobs', '4']
    """
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--compilation-cache":
            skip = True
        elif not a.startswith("--compilation-cache="):
            out.append(a)
    return out


def train_apart(
    key: str,
    *,
    scale: Scale,
    data_spec: str,
    out: str,
    test_fraction: float,
    jobs: int,
    cache: str,
    runs: str | None = None,
) -> None:
    """Train paper ``key``'s unfinished runs (those whose name matches the shell pattern ``runs``, where
    given) as ``python -m train`` processes of their ``--print`` lines, ``jobs`` at a time in the sweep's
    order, sharing the compilation cache ``cache``; each one's output goes to ``train.log`` in its run
    directory. A run that fails is left to the sweep, which trains it again in its own process (and so
    reports why)."""
    lines = _selected(
        list_runs(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction), runs
    )
    todo = [shlex.split(line)[3:] for line in lines]
    todo = [args for args in todo if not is_finished(config.from_args(args))]
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": cache,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / jobs:.2f}")  # the GPU's memory shared out
    print(f"{key}: {len(todo)} of {len(lines)} runs to train, {jobs} at a time", flush=True)

    def train_one(args: list[str]) -> tuple[str, int, float]:
        workdir = config.from_args(args).workdir
        os.makedirs(workdir, exist_ok=True)
        t0 = time.time()
        with open(os.path.join(workdir, "train.log"), "w", encoding="utf-8") as log:
            command = [sys.executable, "-m", "train", *args]
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
        return os.path.basename(workdir), done.returncode, time.time() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, status, seconds in pool.map(train_one, todo):
            state = "done" if status == 0 else f"exit status {status} (the sweep trains it again)"
            print(f"  run {name}: {state} in {seconds:.1f} s", flush=True)


def _print_runs(
    key: str,
    scale: Scale,
    data_spec: str,
    out: str,
    test_fraction: float,
    jobs: int = 1,
    *,
    retrain_stale: bool = False,
    runs: str | None = None,
) -> dict[str, Any]:
    """Print paper ``key``'s header (a ``#`` comment) and its runs' command lines (those whose name matches
    the shell pattern ``runs``, where given), at a scale sized for a measured machine
    (:data:`train.reproduce.plan.MACHINES`: gpu and paper on an H100-class GPU, cpu on two cores) each after a
    comment with its expected time (or that it is finished in ``out`` and is read back), then the total of the
    runs to train (and of judging them, without ``runs``); return them."""
    lines = _selected(
        list_runs(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction), runs
    )
    what = (
        f"{len(lines)} training runs" if PAPERS[key].trains else "no training runs (codes fitted to pixels)"
    )
    print(f"# {key}: {PAPERS[key].title} [scale {scale.name}, data {data_spec}]: {what}")
    machine = plan.MACHINES.get(scale.name)
    if machine is None or not lines:  # a scale sized for no measured machine: the lines alone
        for line in lines:
            print(line, flush=True)
        return {"seed": key, "commands": lines}
    todo = _to_train(lines, retrain_stale=retrain_stale)
    image_shape = data.load(data_spec, test_fraction=test_fraction).image_shape
    judge = runs is None
    runs_plan = plan.plan_runs([line for line, t in zip(lines, todo, strict=True) if t], image_shape, machine)
    planned = iter(runs_plan)
    for line, train in zip(lines, todo, strict=True):
        if train:
            r = next(planned)
            compiles = "compiles" if r.compiles else "programs from the cache"
            print(
                f"# expected {r.alone_s:.0f} s alone: {r.steps:,} steps × {r.step_ms:.1f} ms + "
                f"{r.fixed_s:.0f} s ({compiles})",
                flush=True,
            )
        else:
            print("# finished: read back, not trained (not counted)", flush=True)
        print(line, flush=True)
    total = expected_time(
        key, runs_plan, scale=scale, data_spec=data_spec, out=out, jobs=jobs, machine=machine, judge=judge
    )
    return {"seed": key, "commands": lines, "expected_s": total}


def _to_train(lines: Sequence[str], *, retrain_stale: bool) -> list[bool]:
    """Whether the sweep trains each run line: it is not finished in its run directory
    (:func:`train.reproduce.rundirs.read_back`), or, with ``retrain_stale``, was finished by other code."""
    current = report.code_version()
    todo = []
    for cfg in plan.configs(lines):
        rep, _ = read_back(cfg)
        todo.append(rep is None or (retrain_stale and records.stale(rep.get("code_version"), current)))
    return todo


def set_aside_stale(
    key: str, *, scale: Scale, data_spec: str, out: str, test_fraction: float, runs: str | None
) -> int:
    """Set aside each run of paper ``key`` (those whose name matches the shell pattern ``runs``, where given)
    finished by code other than the current (:func:`train.reproduce.rundirs.retrain_if_stale`), so that the
    sweep trains it again; how many."""
    lines = _selected(
        list_runs(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction), runs
    )
    current = report.code_version()
    return sum(retrain_if_stale(cfg, current) for cfg in plan.configs(lines))


def _announce(
    key: str, scale: Scale, data_spec: str, out: str, test_fraction: float, jobs: int, *, runs: str | None
) -> None:
    """Before a sweep trains: paper ``key``'s expected time on the machine its scale is sized for, where it
    has one and runs (the ``--print`` total of the runs it trains, those matching ``runs`` where given, one
    line)."""
    machine = plan.MACHINES.get(scale.name)
    if machine is None or not PAPERS[key].trains:
        return
    lines = _selected(
        list_runs(key, scale=scale, data_spec=data_spec, out=out, test_fraction=test_fraction), runs
    )
    lines = [line for line, t in zip(lines, _to_train(lines, retrain_stale=False), strict=True) if t]
    image_shape = data.load(data_spec, test_fraction=test_fraction).image_shape
    planned = plan.plan_runs(lines, image_shape, machine)
    kw = dict(scale=scale, data_spec=data_spec, out=out, jobs=jobs, machine=machine, judge=runs is None)
    expected_time(key, planned, **kw)


def _name(line: str) -> str:
    """A run's name: its run directory's, from its ``python -m train`` line's ``workdir=``."""
    workdir = next(a for a in shlex.split(line) if a.startswith("workdir="))
    return os.path.basename(os.path.normpath(workdir.removeprefix("workdir=")))


def _selected(lines: list[str], runs: str | None) -> list[str]:
    """The run lines whose name matches the shell pattern ``runs`` (all of them where None)."""
    return lines if runs is None else [line for line in lines if fnmatch.fnmatchcase(_name(line), runs)]


def expected_time(
    key: str,
    runs: list[plan.RunPlan],
    *,
    scale: Scale,
    data_spec: str,
    out: str,
    jobs: int,
    machine: plan.Machine,
    judge: bool = True,
) -> float | None:
    """Print (a ``#`` comment) and return the expected seconds of paper ``key``'s sweep of ``runs`` on
    ``machine`` with ``jobs`` runs at a time, judged where ``judge`` (None where that speed-up was not
    measured)."""
    fraction = context(key, scale=scale, data_spec=data_spec, out=out).fraction
    share = "" if fraction is None else f"{fraction_text(fraction)} of each recipe's epochs; "
    if jobs not in machine.speedup:
        print(f"# {key}: {share}no estimate for --jobs {jobs} (measured: {sorted(machine.speedup)})")
        return None
    total = plan.expected_s(runs, jobs, machine, judge=judge)
    judging = f"+ {machine.assembly_s:.0f} s to judge" if judge else "not judged (--runs)"
    print(
        f"# {key}: {share}expected on {machine.name} with --jobs {jobs}: {total:.0f} s "
        f"({len(runs)} runs to train: {sum(r.alone_s for r in runs):.0f} s alone, "
        f"{plan.jobs_s(runs, jobs, machine):.0f} s {jobs} at a time; {judging}; "
        f"{'within' if total <= machine.budget_s else 'OVER'} {machine.budget_s:.0f} s)",
        flush=True,
    )
    return total


@contextlib.contextmanager
def _compilation_cache(path: str) -> Iterator[None]:
    """JAX's persistent compilation cache in ``path`` for every compilation (however short) while open;
    the previous settings are restored (and the cache reset, so that it is opened anew) on exit."""
    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    before = {n: getattr(jax.config, n) for n in names}
    compilation_cache.reset_cache()
    for name, value in zip(names, (path, 0.0, 0), strict=True):
        jax.config.update(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


if __name__ == "__main__":
    allocator.start()  # before JAX starts its threads: with --jobs 1 the runs train in this process
    main()
