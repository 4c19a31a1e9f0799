"""``python -m train.reproduce PAPER --print``: every run of the sweep as the ``python -m train`` line it is.

The printed line of each run parses (``train.app.config.from_args``, what ``python -m train`` calls) to the
very config the sweep hands to ``train.app.cli.run``, at every scale and on more than one data set; and a run
started by hand with its line is the sweep's run: the sweep reads its report back and judges it as its own.
"""

from __future__ import annotations

import os
import shlex

import numpy as np
import pytest

from train.app import cli, config
from train.reproduce import atlas, common, papers, simo, torus
from train.reproduce.__main__ import MODULES, context, main


def _printed(capsys, argv: list[str]) -> dict[str, config.Config]:
    """Run ``--print`` and parse its stdout as a user's shell would: each non-comment line split by shlex,
    ``python -m train`` then key=value arguments; the configs by run directory, in printed order."""
    capsys.readouterr()
    main([*argv, "--print"])
    out = capsys.readouterr().out
    configs = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "train"], line
        cfg = config.from_args(words[3:])
        assert cfg.workdir not in configs, f"two printed runs share {cfg.workdir}"
        configs[cfg.workdir] = cfg
    return configs


def _trained(monkeypatch, argv: list[str], test_fraction: float) -> dict[str, config.Config]:
    """The sweep's runs of ``argv`` (``PAPER --scale S --data D --out O``): each paper's own run code on the
    sweep's context (what ``run_paper`` trains), with ``train.app.cli.run`` recording the config it is given
    and reporting the run as diverged, so nothing trains; the configs by run directory, in sweep order."""
    asked: dict[str, config.Config] = {}

    def record(cfg, **kwargs):
        assert cfg.workdir not in asked, f"the sweep trains {cfg.workdir} twice"
        asked[cfg.workdir] = cfg
        raise FloatingPointError("recorded, not trained")

    monkeypatch.setattr(cli, "run", record)
    scale, spec, out = (argv[argv.index(flag) + 1] for flag in ("--scale", "--data", "--out"))
    for key, paper in papers.PAPERS.items():
        if paper.trains:
            ctx = context(
                key, scale=common.SCALES[scale], data_spec=spec, out=out, test_fraction=test_fraction
            )
            MODULES[key].run(ctx)
    monkeypatch.undo()
    return asked


@pytest.fixture(scope="module")
def npz_data(tmp_path_factory) -> str:
    """A small npz data set of 12 × 12 images in 10 classes (not the digits' 8 × 8, nor their size)."""
    path = tmp_path_factory.mktemp("data") / "small set.npz"  # a space: the line must quote it
    rng = np.random.default_rng(0)
    labels = np.arange(500) % 10
    images = (rng.random((500, 12, 12)) * 50 + labels[:, None, None] * 20).astype(np.uint8)
    np.savez(path, images=images, labels=labels)
    return f"npz:{path}"


@pytest.mark.parametrize("scale", ["quick", "cpu", "paper"])
@pytest.mark.parametrize("data", ["digits", "npz"])
def test_printed_lines_parse_to_the_configs_the_sweep_trains(
    scale, data, npz_data, tmp_path, capsys, monkeypatch
):
    spec = npz_data if data == "npz" else data
    test_fraction = 0.2 if data == "npz" else 0.25
    argv = ["all", "--scale", scale, "--data", spec, "--out", str(tmp_path / "out dir")]
    printed = _printed(capsys, [*argv, "--test-fraction", str(test_fraction)])
    assert not os.path.exists(tmp_path / "out dir")  # --print writes nothing
    trained = _trained(monkeypatch, argv, test_fraction)
    assert list(printed) == list(trained)  # every run, in the sweep's order, each once
    for workdir, cfg in trained.items():
        assert printed[workdir] == cfg, workdir  # dataclass equality: every key the same
    # The runs are the sweep's: its run directories, the data, the scale's encoder, every seed of each paper.
    assert all(os.path.dirname(w).startswith(str(tmp_path / "out dir" / "runs")) for w in printed)
    assert {c.dataset for c in printed.values()} == {spec}
    encoders = {"paper": {"resnet18", "resnet50"}}.get(scale, {common.SCALES[scale].encoder})  # paper: own
    assert {c.encoder for c in printed.values()} == encoders
    s, own = common.SCALES[scale], (atlas.SIZES[scale], simo.SIZES[scale], torus.SIZES[scale])
    seeds = {c.seed + i for c in printed.values() for i in range(c.seeds)}
    most = max(s.seeds, own[0].atlas_seeds, own[1].simo_seeds, own[2].torus_seeds, own[2].unstable_seeds)
    assert seeds == set(range(most))
    if s.replicas:  # several seeds as one program: one line with seeds=S
        assert any(c.seeds == own[2].torus_seeds > 1 for c in printed.values())


def test_arg_text_round_trips_through_the_parser():
    cases = {"clip": 1e30, "lr": 0.1 + 0.2, "base_temperature": None, "simo_orthogonality": False}
    cases |= {"ema": 1 / 3, "koleo_eps": 1e-8, "dataset": "npz:a b=c.npz", "width": 7}
    for key, value in cases.items():
        parsed = config._parse(key, common.arg_text(value))
        assert parsed == value and type(parsed) is type(value), key


def test_print_refuses_render_and_bad_input(capsys):
    with pytest.raises(SystemExit):
        main(["render", "--print"])
    assert "--print lists the training runs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["005", "--print"])
    assert "paper must be one of" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_started_by_hand_with_its_line_is_the_sweeps_run(tmp_path, capsys, monkeypatch):
    """Both runs of Bouhsine et al. 2024's tiny reproduction started by hand with their printed lines (as
    ``python -m train`` runs them): the sweep then trains nothing, reads their reports back and finds what a
    sweep that trained them itself finds."""
    reference = main(["004", "--scale", "tiny", "--out", str(tmp_path / "sweep")])[0]
    out = str(tmp_path / "by hand")
    capsys.readouterr()
    (listed,) = main(["004", "--scale", "tiny", "--out", out, "--print"])
    assert capsys.readouterr().out.splitlines()[1:] == listed["commands"]
    for line in listed["commands"]:
        assert cli.main(shlex.split(line)[3:]) == 0  # python -m train's own entry point

    def refuse(cfg, **kwargs):
        raise AssertionError(f"the sweep trains {cfg.workdir} again")

    monkeypatch.setattr(cli, "run", refuse)
    again = main(["004", "--scale", "tiny", "--out", out])[0]
    assert [r.get("reused") for r in again["runs"]] == [True, True]
    assert again["claims"] == reference["claims"] and again["details"] == reference["details"]
    for by_hand, swept in zip(again["runs"], reference["runs"], strict=True):
        assert by_hand["name"] == swept["name"] and by_hand["overrides"] == swept["overrides"]
        assert by_hand["loss_trace"] == swept["loss_trace"]  # the same training, step by step
        untimed = [{k: v for k, v in r["report"].items() if k != "timing"} for r in (by_hand, swept)]
        assert untimed[0] == untimed[1]
