"""The gpu scale: its plan fits one 9-minute command per paper, its prepared script runs end to end (a dry
run at the tiny scale on the CPU), and reports committed without their embeddings are read back as finished
runs."""

import dataclasses
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from tests import test_idx
from tests.subprocess_env import child_env
from train.app import cli, config
from train.app import data as data_lib
from train.app import report as app_report
from train.reproduce import atlas, common, papers, plan, rundirs, simo
from train.reproduce.__main__ import list_runs, main

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_sweep.sh")


def fashion_like(tmp_path, n_train=256, n_test=64):
    """A small IDX folder named as the Fashion-MNIST one (so its runs file under the same data tag)."""
    return test_idx.folder(
        tmp_path / "fashion-mnist",
        gz=tuple(test_idx.STEMS),
        n_train=n_train,
        n_test=n_test,
        h=8,
        w=8,
        classes=10,
    )


def test_gpu_scale_trains_each_papers_share_of_its_recipes_epochs():
    """At the gpu scale a run trains its paper's share of the recipe's epochs (Korman 2021: 1/75 of MSimCLR's
    100 and MTriplet's 300), with the recipe's own network and ten steps per dispatch; a recipe given in steps
    keeps them."""
    assert common.SCALES["gpu"].shares and atlas.PAPER.fractions["gpu"] == pytest.approx(1 / 75)
    lines = list_runs("001", scale=common.SCALES["gpu"], data_spec="digits", out="o")
    configs = [config.from_args(line.split()[3:]) for line in lines]
    digits = data_lib.load("digits")
    for cfg in configs:
        epochs = {"msimclr_mnist": 100, "mtriplet": 300}[cfg.preset]
        seen = digits.train_y < 5 if cfg.classes == "disjoint" else digits.train_y >= 0  # MTriplet's half
        assert cfg.steps == round(epochs * (int(seen.sum()) // cfg.batch_size) / 75), cfg.workdir
        assert (cfg.encoder, cfg.steps_per_call) == ("resnet18", 10)
    # MSimCLR n = 1, 16, 4, 32, SimCLR, the normalised-triplet baseline, MTriplet n = 1, 16: three seeds each
    assert len(configs) == 24
    assert [os.path.basename(c.workdir) for c in configs[:6]] == [
        f"msimclr-d2-n{n}-seed{s}" for n in (1, 16) for s in range(3)
    ]
    assert os.path.dirname(configs[0].workdir) == os.path.join("o", "runs", "digits", "gpu", "001")
    steps_only = config.make(preset="supcon")
    assert common.run_steps(steps_only, 60_000, None, 0.5) == steps_only.steps
    unsized = dataclasses.replace(simo.PAPER, fractions={})
    kw = dict(data="digits", dataset=None, runs_dir="", out="", paper=unsized)
    with pytest.raises(ValueError, match="paper '004' sets none there"):
        _ = common.Context(scale=common.SCALES["gpu"], **kw).fraction
    assert common.Context(scale=common.SCALES["paper"], **kw).fraction is None  # every epoch: no share needed


def test_every_paper_that_trains_sets_its_share_at_each_scale_of_shares():
    """Each paper's module holds its record, selector order is the papers' order, and every paper that trains
    sets its share of epochs at every scale that trains shares (and only there)."""
    assert list(papers.PAPERS) == ["000", "001", "002", "003", "004"]
    assert all(papers.MODULES[key].PAPER is paper for key, paper in papers.PAPERS.items())
    shares = {name for name, scale in common.SCALES.items() if scale.shares}
    assert shares == {"gpu"}
    for paper in papers.PAPERS.values():
        assert set(paper.fractions) == (shares if paper.trains else set()), paper.key


def test_plan_counts_steps_compiles_and_jobs():
    """The expected time against a hand count: each run's fixed part (compiling, or reading the cache when a
    run of the same shapes compiled) plus its steps, summed and divided by the measured speed-up of the
    runs at a time."""
    lines = [
        "python -m train preset=msimclr_mnist dim=2 charts=1 seed=0 encoder=resnet18 steps=100",
        "python -m train preset=msimclr_mnist dim=2 charts=1 seed=1 encoder=resnet18 steps=200",
        "python -m train preset=msimclr_mnist dim=2 charts=4 seed=0 encoder=resnet18 steps=100",
    ]
    runs = plan.plan_runs(lines, (28, 28, 1))
    assert [r.compiles for r in runs] == [True, False, True]
    assert runs[0].step_ms == pytest.approx(23.7)  # the app's MSimCLR step, measured
    gpu = plan.GPU
    assert runs[1].alone_s == pytest.approx(gpu.cached_s + 200 * 23.7e-3)
    alone = 2 * gpu.compile_s + gpu.cached_s + 400 * 23.7e-3
    assert plan.expected_s(runs, 1) == pytest.approx(alone + gpu.assembly_s)
    assert plan.expected_s(runs, 4) == pytest.approx(alone / gpu.speedup[4] + gpu.assembly_s)
    cnn = [
        "python -m train preset=supcon_sphere_cpu seed=0 steps=100",
        "python -m train preset=mtriplet encoder=cnn batch_size=16",
    ]
    on_cpu = plan.plan_runs(cnn, (28, 28, 1), plan.CPU)  # 256 × 0.40 ms; 16 images: the floor
    assert [r.step_ms for r in on_cpu] == pytest.approx([256 * 0.40, plan.CPU_FLOOR_MS])
    with pytest.raises(ValueError, match="CPU estimate needs encoder='cnn'"):
        plan.plan_runs(lines, (28, 28, 1), plan.CPU)
    small = plan.plan_runs(["python -m train preset=mtriplet encoder=resnet18 steps=10"], (28, 28, 1))
    assert small[0].step_ms == plan.STEP_FLOOR_MS  # 32 images: the launch-bound floor
    assert small[0].at_floor and not any(r.at_floor for r in runs)
    # launch-bound runs share the GPU worse: their own measured speed-up
    assert plan.expected_s(small + runs, 4) == pytest.approx(
        small[0].alone_s / gpu.floor_speedup[4] + alone / gpu.speedup[4] + gpu.assembly_s
    )
    with pytest.raises(ValueError, match="speed-up was measured"):
        plan.expected_s(runs, 3)


def test_print_states_the_plan_within_one_command(capsys):
    """`--print --scale gpu` lists every run with its expected time and the paper's total: Korman 2021's
    MSimCLR and SimCLR runs on Fashion-MNIST's 60,000 training images of 28 × 28 × 1 (what `--retrain-stale`
    trains again after its MTriplet runs of the current code) within one 540 s command with 4 jobs; all 24
    runs at once would not fit."""
    main(["001", "--scale", "gpu", "--print", "--jobs", "4"])
    text = capsys.readouterr().out
    assert text.count("expected") == 25 and "# 001: 1/75 of each recipe's epochs" in text
    assert "(24 runs to train: " in text
    lines = list_runs("001", scale=common.SCALES["gpu"], data_spec="digits", out="o")
    runs = plan.plan_runs(lines, (28, 28, 1))
    # 1/75 of 100 epochs of 468 batches of 128; of 300 epochs of 937 batches of 32 (the first five classes'
    # 30,000 images: MTriplet's and its baseline's disjoint-class protocol)
    steps = [624] * 15 + [3748] * 9
    fashion = [dataclasses.replace(r, steps=n) for r, n in zip(runs, steps, strict=True)]
    assert plan.expected_s(fashion[:15], 4) <= plan.GPU.budget_s < plan.expected_s(fashion, 4)
    main(["001", "--scale", "gpu", "--print", "--jobs", "3"])
    assert "no estimate for --jobs 3" in capsys.readouterr().out


def test_a_sweep_over_one_command_splits_by_run_names(capsys):
    """Stowell 2026's gpu sweep does not fit one command (its runs' fixed parts and the judging pass), but
    `--runs` splits it: its 18 stability runs alone, judged by nothing, then the 6 others and the judging
    pass, each within 540 s on Fashion-MNIST's sizes. A pattern that names no run is refused, naming
    them."""
    main(["000", "--scale", "gpu", "--print", "--jobs", "4", "--runs", "*-sgd-seed*"])
    text = capsys.readouterr().out
    assert text.count("python -m train ") == 18 and "(18 runs to train: " in text
    assert "not judged (--runs)" in text and "to judge" not in text
    lines = list_runs("000", scale=common.SCALES["gpu"], data_spec="digits", out="o")
    runs = plan.plan_runs(lines, (28, 28, 1))
    fashion = [  # 1/25 of 100 epochs of 270 batches of 200 (54,000 images: 10 % held out); 1,000 steps each
        dataclasses.replace(r, steps=1000 if "-sgd-" in r.line else 1080) for r in runs
    ]
    stability = [r for r in fashion if "-sgd-" in r.line]
    others = plan.plan_runs([r.line for r in fashion if "-sgd-" not in r.line], (28, 28, 1))
    others = [dataclasses.replace(r, steps=1080) for r in others]
    assert plan.expected_s(stability, 4, judge=False) <= plan.GPU.budget_s
    assert plan.expected_s(others, 4) <= plan.GPU.budget_s < plan.expected_s(fashion, 4)
    with pytest.raises(SystemExit):
        main(["000", "--scale", "gpu", "--print", "--runs", "nothing-*"])
    assert "--runs 'nothing-*' matches none of paper 000's runs: sphere-D16-seed0" in capsys.readouterr().err


@pytest.mark.slow
def test_runs_pattern_trains_those_runs_alone_and_judges_nothing(tmp_path, capsys):
    """`--runs` trains the matching runs as `python -m train` processes and writes no result: the command
    without it reads them back."""
    out = tmp_path / "out"
    assert main(["001", "--scale", "tiny", "--out", str(out), "--runs", "triplet-*"]) == []
    said = capsys.readouterr().out
    assert said.count(": done in ") == 1 and "the command without --runs judges them" in said
    reports = sorted(p.parent.name for p in out.glob("runs/*/*/*/*/report.json"))
    assert reports == ["triplet-d3-seed0"] and not list(out.glob("reproduce_*.json"))


def test_committed_reports_are_read_back_as_finished_runs(tmp_path, monkeypatch):
    """A run directory holding only report.json, config.json and metrics.jsonl (what is committed from the GPU
    machine) is a finished run: the sweep reads it back and trains nothing; where a paper needs the
    embeddings, it says so in one line."""
    ds = data_lib.load("digits")
    scale = common.SCALES["tiny"]
    ctx = common.Context(scale=scale, data="digits", dataset=ds, runs_dir=str(tmp_path), out=str(tmp_path))
    first, emb = rundirs.train_recipe(ctx, "r", preset="simo_cifar10")
    mean = rundirs.run_analysis(first, emb, "mean", lambda e: float(e["query"].mean()))
    assert mean == pytest.approx(float(emb["query"].mean()))
    os.remove(tmp_path / "r" / "embeddings.npz")
    for name in os.listdir(tmp_path / "r"):
        if name not in ("report.json", "config.json", "metrics.jsonl", "analysis.json"):
            path = tmp_path / "r" / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def refuse(cfg, **kwargs):
        raise AssertionError("a committed run must not train again")

    monkeypatch.setattr(cli, "run", refuse)
    again = common.Context(scale=scale, data="digits", dataset=ds, runs_dir=str(tmp_path), out=str(tmp_path))
    run, emb = rundirs.train_recipe(again, "r", need_embeddings=False, preset="simo_cifar10")
    assert emb is None and run.extra["reused"] and run.report == first.report
    assert run.loss_trace == first.loss_trace
    # Its per-run analysis is read back from analysis.json; one never computed cannot be, and says so.
    assert rundirs.run_analysis(run, None, "mean", lambda e: 1 / 0) == mean
    with pytest.raises(ValueError, match="analysis 'other' is not stored"):
        rundirs.run_analysis(run, None, "other", lambda e: 0.0)
    report_path = tmp_path / "r" / "report.json"  # a run trained again: its stored analyses are not its own
    report_path.write_text(report_path.read_text().replace("{", "{ ", 1))
    with pytest.raises(ValueError, match="analysis 'mean' is not stored"):
        rundirs.run_analysis(run, None, "mean", lambda e: 0.0)
    assert "workdir" not in run.to_json()  # a folder of the machine that ran the sweep is not recorded
    third = common.Context(scale=scale, data="digits", dataset=ds, runs_dir=str(tmp_path), out=str(tmp_path))
    with pytest.raises(ValueError, match="has a report but no embeddings.npz"):
        rundirs.train_recipe(third, "r", preset="simo_cifar10")


def test_damaged_or_foreign_committed_reports_are_refused_and_the_run_trains_again(tmp_path, capsys):
    """A committed report that is not JSON, lacks what every report holds, or sits beside another run's
    config is refused in one line; its run directory is set aside and the run is not read back."""
    ds = data_lib.load("digits")
    ctx = common.Context(
        scale=common.SCALES["tiny"], data="digits", dataset=ds, runs_dir=str(tmp_path), out=""
    )
    cfg = config.from_args(common.run_args(ctx, "r", {"preset": "simo_cifar10"}))
    good = {"precision_at_1": 0.5, "timing": {"total_s": 1.0}}
    saved = {k: v for k, v in dataclasses.asdict(cfg).items()}
    damages = {
        "not JSON": ("{", saved, "cannot be read"),
        "no timing": (json.dumps({"precision_at_1": 0.5}), saved, "lacks what every report holds"),
        "another run's config": (json.dumps(good), {**saved, "lr": 0.5}, "different config"),
    }
    for what, (report_text, config_values, message) in damages.items():
        os.makedirs(cfg.workdir, exist_ok=True)
        (tmp_path / "r" / "report.json").write_text(report_text)
        (tmp_path / "r" / "config.json").write_text(json.dumps(config_values))
        assert not rundirs.is_finished(cfg), what
        out = capsys.readouterr().out
        assert message in out and out.count("\n") == 1 and "trained again" in out, what
        assert not (tmp_path / "r").exists() and (tmp_path / "r.refused" / "report.json").exists(), what
    os.makedirs(cfg.workdir)
    (tmp_path / "r" / "report.json").write_text(json.dumps(good))
    (tmp_path / "r" / "config.json").write_text(json.dumps(saved))
    assert rundirs.is_finished(cfg)  # the same run, whole: read back


def test_runs_of_older_code_are_read_back_or_with_retrain_stale_set_aside_and_planned(tmp_path, capsys):
    """A finished run of older code is read back (not planned) unless `--retrain-stale` is given: then
    `--print` plans it, changing nothing, and the sweep sets its directory aside as <run>.stale to train it
    again. A run of the current code stays finished either way."""
    out = str(tmp_path / "out")
    lines = list_runs("001", scale=common.SCALES["gpu"], data_spec="digits", out=out)
    current = app_report.code_version()
    older = {**current, "code_hash": "0" * 64}
    for cfg, version in zip(plan.configs(lines[:2]), (older, current), strict=True):
        os.makedirs(cfg.workdir)
        with open(os.path.join(cfg.workdir, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(cfg), f)
        with open(os.path.join(cfg.workdir, "report.json"), "w") as f:
            json.dump({"precision_at_1": 0.5, "timing": {"total_s": 1.0}, "code_version": version}, f)
    main(["001", "--scale", "gpu", "--print", "--jobs", "4", "--out", out])
    text = capsys.readouterr().out
    assert text.count("# finished: read back") == 2 and "(22 runs to train: " in text
    main(["001", "--scale", "gpu", "--print", "--jobs", "4", "--out", out, "--retrain-stale"])
    text = capsys.readouterr().out
    assert text.count("# finished: read back") == 1 and "(23 runs to train: " in text
    stale_run, fresh_run = plan.configs(lines[:2])
    assert rundirs.is_finished(stale_run)  # --print moved nothing
    assert not rundirs.retrain_if_stale(fresh_run, current) and rundirs.is_finished(fresh_run)
    assert rundirs.retrain_if_stale(stale_run, current)
    said = capsys.readouterr().out
    assert "(code 000000000000), not the current code; set aside as" in said and "stale: trained by" in said
    assert os.path.exists(stale_run.workdir + ".stale/report.json") and not rundirs.is_finished(stale_run)


def test_compare_sets_each_planned_run_beside_its_measured_time(capsys, tmp_path):
    plan_text = """# 001: Korman 2021 [scale gpu, data idx:x]: 2 training runs
# expected 80 s alone: 1,000 steps × 20.0 ms + 60 s (compiles)
python -m train preset=msimclr seed=0 workdir=docs/runs/x/gpu/001/msimclr_seed0
# expected 45 s alone: 1,000 steps × 20.0 ms + 25 s (programs from the cache)
python -m train preset=msimclr seed=1 workdir=docs/runs/x/gpu/001/msimclr_seed1/
# 001: 1/75 of each recipe's epochs; expected on one H100-class GPU with --jobs 4: 77 s (125 s of runs alone)
"""
    sweep_log = """001: 1 of 2 runs to train, 4 at a time
  run msimclr_seed1: done in 90.0 s
  run msimclr_seed0: exit status 1 (the sweep trains it again) in 3.0 s
gpu_sweep: sweep exit status 0 after 154 s
"""
    found = plan.compare(plan_text, sweep_log)
    assert [(r["name"], r["steps"], r["fixed_s"], r["measured_s"]) for r in found["runs"]] == [
        ("msimclr_seed0", 1000, 60.0, None),  # failed here: no time of a finished run
        ("msimclr_seed1", 1000, 25.0, 90.0),
    ]
    assert found["runs"][1]["ratio"] == pytest.approx(2.0) and found["median_ratio"] == pytest.approx(2.0)
    assert (found["jobs"], found["expected_total_s"], found["wall_s"]) == (4, 77.0, 154.0)
    (tmp_path / "plan.txt").write_text(plan_text)
    (tmp_path / "sweep.log").write_text(sweep_log)
    plan.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "msimclr_seed1: 45 s (1,000 × 20.0 ms + 25 s) → 90 s, ×2.00" in out
    assert "the sweep: expected 77 s, took 154 s (×2.00)" in out
    with pytest.raises(ValueError, match="plan_text: no 'python -m train' line"):
        plan.compare("# expected 80 s alone: 1,000 steps × 20.0 ms + 60 s (compiles)\n", sweep_log)


@pytest.mark.slow
def test_dry_run_of_the_prepared_script(tmp_path, monkeypatch):
    """benchmarks/gpu_sweep.sh at the tiny scale on the CPU: plan, sweep (two runs at a time as processes),
    and the packed results, which unpack to run directories that a sweep reads back without training."""
    data = fashion_like(tmp_path)
    out, results = tmp_path / "out", tmp_path / "results"
    env = child_env(
        GPU_SWEEP_DATA=str(data), GPU_SWEEP_RESULTS=str(results), OUT=str(out), GPU_SWEEP_JOBS="2"
    )
    aside = results / "runs" / "fashion_mnist" / "tiny" / "001" / "old.refused"  # set aside: never packed
    aside.mkdir(parents=True)
    (aside / "report.json").write_text("{}")
    command = ["bash", SCRIPT, "001", "--retrain-stale", "--dry-run"]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "6 of 6 runs to train, 2 at a time" in done.stdout
    assert json.loads((out / "machine.json").read_text())["platform"] == "cpu"  # the machine, beside
    plan_text = (out / "plan.txt").read_text()
    assert plan_text.count("python -m train ") == 6
    measured = plan.compare(plan_text, (out / "sweep.log").read_text())  # what the plan's constants meet
    assert measured["jobs"] == 2 and measured["wall_s"] is not None and len(measured["runs"]) == 6
    assert all(r["measured_s"] > 0 and r["expected_s"] is None for r in measured["runs"])  # tiny: no plan
    assert "no estimate →" in done.stdout
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
    runs = [n for n in names if n.endswith("/report.json")]
    assert len(runs) == 6 and all("/runs/fashion_mnist/tiny/001/" in n and ".refused" not in n for n in runs)
    assert any(n.endswith("reproduce_001_fashion_mnist_tiny.json") for n in names)
    assert not any(n.endswith(".npz") for n in names)
    assert sum(n.endswith("/train.log") for n in names) == 6  # each run trained in its own process
    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    # The packed runs, put where a sweep looks for them, are read back: nothing trains again.
    unpacked = tmp_path / "unpacked" / str(results).lstrip("/") / "runs"
    committed = tmp_path / "committed"
    shutil.copytree(unpacked, committed / "runs")
    for report in committed.glob("runs/*/*/*/*/report.json"):
        assert json.loads(report.read_text())["timing"]["steps_run"] > 0

    def refuse(cfg, **kwargs):
        raise AssertionError("a committed run must not train again")

    monkeypatch.setattr(cli, "run", refuse)
    (again,) = main(["001", "--scale", "tiny", "--data", f"idx:{data}", "--out", str(committed)])
    assert len(again["runs"]) == 6 and all(r["reused"] for r in again["runs"])
    with open(results / "reproduce_001_fashion_mnist_tiny.json") as f:
        assert again["details"] == json.load(f)["details"]


def test_dry_run_refuses_missing_data(tmp_path):
    env = child_env(GPU_SWEEP_DATA=str(tmp_path / "nowhere"), OUT=str(tmp_path / "out"))
    done = subprocess.run(["bash", SCRIPT, "001", "--dry-run"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "not found: carry the Fashion-MNIST IDX files there" in done.stderr
