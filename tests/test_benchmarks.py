"""train.helpers.timing (the one timer) and smoke runs of the benchmark scripts' --quick modes."""

from __future__ import annotations

import collections
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from subprocess_env import child_env

from benchmarks import cpu_recipe, ivf, malloc, reality_check, step_profile, train_step
from train.helpers import allocator
from train.helpers.results import (
    RESULTS_DIR,
    check_ratios,
    cpu_isa,
    destination,
    other_machine,
    write_result,
)
from train.helpers.timing import Call, Timing, interleaved, measure


def _sleeper(seconds: float, calls: list):
    def fn(tag):
        calls.append(tag)
        time.sleep(seconds)
        return tag

    return fn


def test_sleep_is_measured_as_wall_time_not_cpu_time():
    timing = measure(_sleeper(0.05, []), "x", repeats=3)
    assert len(timing.seconds) == len(timing.cpu_seconds) == 3
    assert all(0.05 <= s < 0.2 for s in timing.seconds)
    assert timing.best <= timing.median <= max(timing.seconds)
    assert timing.cpu_median < 0.02  # sleeping costs no CPU


def test_busy_work_is_measured_as_cpu_time():
    def spin(cpu_s: float) -> None:
        start = time.process_time()
        while time.process_time() - start < cpu_s:
            pass

    timing = measure(spin, 0.03, repeats=2, warmup=0)
    assert all(0.03 <= c <= s + 0.005 for c, s in zip(timing.cpu_seconds, timing.seconds, strict=True))


def test_warmup_calls_are_not_counted_and_samples_are_per_call():
    calls, blocked = [], []

    def block(out):
        blocked.append(out)
        return out

    fn = _sleeper(0.01, calls)
    timing = measure(fn, "x", repeats=3, warmup=2, number=4, block=block)
    assert len(calls) == 2 + 3 * 4
    assert len(blocked) == 2 + 3  # each warm-up call, then the last call of each sample
    assert len(timing.seconds) == 3
    assert all(0.01 <= s < 0.05 for s in timing.seconds)  # divided by number: seconds per call
    assert timing.result == "x"


def test_result_is_the_last_output():
    outputs = iter(range(10))
    assert measure(lambda: next(outputs), repeats=3, warmup=1).result == 3


def test_budget_stops_after_the_sample_that_exceeds_it():
    timing = measure(_sleeper(0.02, []), "x", repeats=100, warmup=0, budget_s=0.05)
    assert sum(timing.seconds[:-1]) <= 0.05 < sum(timing.seconds)
    assert len(timing.seconds) <= 3


def test_budget_counts_all_calls_of_a_sample():
    timing = measure(_sleeper(0.01, []), "x", repeats=100, warmup=0, number=3, budget_s=0.05)
    assert 3 * sum(timing.seconds[:-1]) <= 0.05 < 3 * sum(timing.seconds)


@pytest.mark.parametrize(
    "kwargs", [{"repeats": 0}, {"repeats": 1, "number": 0}, {"repeats": 1, "warmup": -1}]
)
def test_rejects_empty_or_negative_counts(kwargs):
    with pytest.raises(ValueError, match="repeats"):
        measure(lambda: None, **kwargs)


def test_blocks_on_jax_results():
    """JAX dispatches asynchronously: without blocking the timer would see only the dispatch."""

    @jax.jit
    def chain(x):
        for _ in range(8):
            x = jnp.tanh(x @ x)
        return x

    n = 768 if jax.default_backend() == "cpu" else 4096  # milliseconds of work on either
    x = jnp.full((n, n), 1 / n, jnp.float32)
    blocked = measure(chain, x, repeats=3)
    unblocked = measure(chain, x, repeats=3, block=lambda out: out)
    jax.block_until_ready(unblocked.result)
    assert blocked.result.is_ready()
    assert blocked.median > 10 * unblocked.median


def test_interleaved_takes_one_sample_of_each_contender_per_round_in_turn():
    calls: list = []
    times = interleaved(
        {"a": Call(_sleeper(0.002, calls), ("a",)), "b": Call(_sleeper(0.004, calls), ("b",))},
        rounds=3,
        warmup=2,
    )
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3  # the warm-ups, then the rounds in turn
    assert len(times["a"].seconds) == len(times["b"].seconds) == 3
    assert times["a"].median < times["b"].median and times["b"].result == "b"


def test_interleaved_settles_each_contender_before_its_sample():
    """With settle_s, untimed calls of the same contender fill at least settle_s before each sample."""
    starts: list = []

    def contender(tag):
        starts.append((tag, time.perf_counter()))
        time.sleep(0.01)

    times = interleaved({t: Call(contender, (t,)) for t in "ab"}, rounds=2, warmup=0, settle_s=0.025)
    runs = [[t for _, t in group] for _, group in itertools.groupby(starts, key=lambda s: s[0])]
    assert [tag for tag, _ in itertools.groupby(tag for tag, _ in starts)] == ["a", "b", "a", "b"]
    assert all(len(run) >= 2 and run[-1] - run[0] >= 0.025 for run in runs)  # settling, then the sample
    assert all(s < 0.025 for s in times["a"].seconds + times["b"].seconds)  # the sample alone is timed
    with pytest.raises(ValueError, match="settle_s"):
        interleaved({"a": Call(lambda: None, ())}, rounds=1, settle_s=-1.0)


def test_timing_statistics():
    timing = Timing(seconds=(3.0, 1.0, 2.0), cpu_seconds=(0.5, 0.7, 0.1), result=None)
    assert (timing.median, timing.best, timing.cpu_median, timing.cpu_best) == (2.0, 1.0, 0.5, 0.1)


# ----------------------------------------------------------------------------------------------------------
# smoke runs of the benchmark scripts (--quick), with or without the optional peers installed

ROOT = Path(__file__).resolve().parents[1]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m benchmarks.NAME ARGS`` from the checkout's root, as a user runs it."""
    env = child_env()  # the suite's compile flags; the script's own device set-up
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


def _run_script(name: str, *args: str) -> str:
    proc = _script(name, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _tables(stdout: str) -> list[list[dict[str, str]]]:
    """The Markdown tables in stdout, each as a list of {column: cell} rows (checks the rule line)."""
    tables, lines = [], stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            block = list(itertools.takewhile(lambda s: s.startswith("|"), lines[i:]))
            header, rule, *body = ([c.strip() for c in row.strip("|").split("|")] for row in block)
            assert len(rule) == len(header) and all(set(c) <= set(":-") for c in rule), block[:2]
            assert all(len(row) == len(header) for row in body), block
            tables.append([dict(zip(header, row, strict=True)) for row in body])
    return tables


def _figures(folder: Path, name: str, argv: tuple[str, ...], module: str | None = None) -> dict:
    """The figures a benchmark run wrote to ``folder/name.json`` (the only file there), after checking its
    command line (``python -m benchmarks.MODULE ARGV``, MODULE the file's stem unless given) and machine
    record."""
    assert sorted(p.name for p in folder.iterdir()) == [f"{name}.json"]
    record = json.loads((folder / f"{name}.json").read_text())
    assert record["command"].split() == ["python", "-m", f"benchmarks.{module or name}", *argv]
    assert record["machine"]["cores"] == os.cpu_count() and len(record["machine"]["load_before"]) == 3
    return record["figures"]


def test_quick_runs_write_only_where_out_says(tmp_path):
    assert destination(None, quick=False) == RESULTS_DIR == ROOT / "benchmarks" / "results"
    assert (RESULTS_DIR / "ivf.json").is_file()  # the checkout's results folder, not a path beside it
    assert destination(None, quick=True) is None
    assert destination(tmp_path, quick=True) == destination(tmp_path, quick=False) == tmp_path


def test_write_result_keeps_figures_strict_json(tmp_path):
    path = write_result("x_quick", {"ms": 1.5, "bad": float("nan")}, argv=["b.py"], folder=tmp_path / "r")
    record = json.loads(path.read_text())
    assert path == tmp_path / "r" / "x_quick.json" and record["figures"] == {"ms": 1.5, "bad": None}
    assert record["command"] == "b.py" and record["machine"]["date"]
    with pytest.raises(ValueError, match="name must be a plain file stem"):
        write_result("../x", {}, argv=[], folder=tmp_path)


@pytest.mark.slow
def test_losses_gpu_runs_dry_on_the_cpu(tmp_path):
    """``--gpu`` without a GPU: the same rows on the CPU, saying so, into losses_gpu.json with the devices
    used and the accelerator's memory size."""
    argv = ("--gpu", "--quick", "--repeats", "1", "--out", str(tmp_path))
    out = _run_script("losses", *argv)
    figures = _figures(tmp_path, "losses_gpu", argv, module="losses")
    if jax.default_backend() == "cpu":
        assert "a dry run" in out and figures["jax_backend"] == "cpu"
        assert figures["torch_device"] == "cpu"
    assert figures["memory"]["N"] == 16384 and {r["N"] for r in figures["timing"]} == {128, 256}
    assert all(r["geojax_ms"] > 0 for r in figures["timing"])


@pytest.mark.slow
def test_losses_quick(tmp_path):
    argv = ("--quick", "--repeats", "1", "--out", str(tmp_path))
    out = _run_script("losses", *argv)
    timing, memory = _tables(out)
    figures = _figures(tmp_path, "losses", argv)
    assert [(r["loss"], str(r["N"]), f"{r['geojax_ms']:.2f}", r["note"]) for r in figures["timing"]] == [
        (r["loss"], r["N"], r["geojax ms"], r["note"]) for r in timing
    ]
    for stored, printed in zip(figures["timing"], timing, strict=True):
        assert f"{stored['similarity_ms']:.2f}" == printed["similarity ms"] and stored["similarity_ms"] > 0
        if stored["pml_ms"] is not None:
            assert f"{stored['pml_ms']:.1f}" == printed["PML ms"]
            assert f"{stored['pml_ms'] / stored['geojax_ms']:.1f}×" == printed["PML/geojax"]
            assert f"{stored['pml_ms'] / stored['similarity_ms']:.1f}×" == printed["PML/similarity"]
        else:
            assert stored["pml_over_similarity"] is None and printed["PML/similarity"] == "–"
    assert [f"{m['temporary_mib']:,.1f}" for m in figures["memory"]["forms"]] == [
        r["temporary MiB"] for r in memory
    ]
    names = ["supcon", "info_nce", "triplet", "proxy_anchor C=100", "proxy_anchor C=1000", "multi_similarity"]
    names += ["circle", "arcface C=1000", "sigmoid"]
    assert [(r["loss"], r["N"]) for r in timing] == [(loss, n) for n in ("128", "256") for loss in names]
    assert all(float(r["geojax ms"]) > 0 for r in timing)
    floored = {"supcon", *names[3:]}  # the rows with a plain jnp form of the same formula
    for stored, printed in zip(figures["timing"], timing, strict=True):
        if stored["loss"] not in floored:
            assert stored["floor_ms"] is None and printed["floor ms"] == printed["geojax/floor"] == "–"
            continue
        assert f"{stored['floor_ms']:.2f}" == printed["floor ms"]
        assert f"{stored['geojax_ms'] / stored['floor_ms']:.2f}×" == printed["geojax/floor"]
        # the floor computes the same value as geojax
        assert float(re.search(r"vs floor \S+ \(rel (\S+)\)", stored["note"]).group(1)) < 1e-5
    if not _installed("pytorch_metric_learning") or not _installed("torch"):
        assert all(r["PML ms"] == r["PML/geojax"] == "–" for r in timing)
        assert all(r["note"].startswith("PML not installed") for r in timing)
    else:
        assert [r["loss"] for r in timing if r["PML ms"] == "–"] == ["sigmoid", "sigmoid"]  # PML has none
        for r in figures["timing"]:
            if r["pml_ms"] is not None:  # PML computes the same value as geojax
                assert float(re.search(r"vs PML \S+ \(rel (\S+)\)", r["note"]).group(1)) < 1e-5
    plain, blocked = (float(r["temporary MiB"].replace(",", "")) for r in memory)
    assert blocked < plain  # the blocked form never holds an [N, N] matrix
    assert figures["malloc"] == "default"


@pytest.mark.slow
def test_losses_malloc_keep_is_recorded_in_its_own_file(tmp_path):
    argv = ("--quick", "--repeats", "1", "--malloc", "keep", "--out", str(tmp_path))
    out = _run_script("losses", *argv)
    figures = _figures(tmp_path, "losses_malloc_keep", argv, module="losses")
    assert figures["malloc"] == "keep"
    assert [r["loss"] for r in figures["timing"]] == [r["loss"] for r in _tables(out)[0]]


@pytest.mark.slow
def test_cpu_recipe_under_glibc_default_malloc_is_recorded_in_its_own_file(tmp_path):
    argv = ("--quick", "--malloc", "glibc", "--out", str(tmp_path))
    _run_script("cpu_recipe", *argv)
    figures = _figures(tmp_path, "cpu_recipe_malloc_glibc", argv, module="cpu_recipe")
    assert figures["malloc"] == "glibc" and [r["steps"] for r in figures["rows"]] == [30]


def test_cpu_recipe_malloc_glibc_refuses_an_environment_that_already_sets_malloc(tmp_path):
    env = {**child_env(), "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    command = [
        sys.executable,
        "-m",
        "benchmarks.cpu_recipe",
        "--quick",
        "--malloc",
        "glibc",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "--malloc glibc needs glibc" in proc.stderr
    assert not list(tmp_path.iterdir())  # refused before any training


@pytest.mark.slow
@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc's malloc only")
def test_malloc_quick_trains_every_line_under_every_setting_here(tmp_path):
    argv = ("--quick", "--out", str(tmp_path))
    out = _run_script("malloc", *argv)
    figures = _figures(tmp_path, "malloc", argv)
    here = malloc.settings_here()
    trained = [(r["line"], r["setting"]) for r in figures["runs"]]
    assert trained == [(line, setting) for line in malloc.LINES for setting in here]
    assert figures["app_setting"] == allocator.setting({}) in ("huge pages", "kept")
    assert [r["setting"] for r in _tables(out)[0]] == here * len(malloc.LINES)


def test_malloc_summary_is_each_settings_median_over_glibcs_on_the_same_line():
    def run(line, setting, rate):
        return {"line": line, "setting": setting, "train_s": 1.0, "steady_steps_per_s": rate, "eval_s": 2.0}

    runs = [run("large steps", "glibc", r) for r in (10, 12, 30)]  # median 12
    runs += [run("large steps", "kept", r) for r in (18, 1, 20)]  # median 18
    runs += [run("small steps", "glibc", r) for r in (100, 90)]  # median 95
    runs += [run("small steps", "kept", r) for r in (76, 76)]
    table = malloc.summarise(runs, ["glibc", "kept"])
    assert [(r["line"], r["setting"], r["runs"], r["over_glibc"]) for r in table] == [
        ("large steps", "glibc", 3, 1.0),
        ("large steps", "kept", 3, 1.5),
        ("small steps", "glibc", 2, 1.0),
        ("small steps", "kept", 2, 0.8),
    ]


@pytest.mark.slow
def test_binary_quick(tmp_path):
    argv = ("--quick", "--repeats", "2", "--out", str(tmp_path))
    tables = _tables(_run_script("binary", *argv))
    cases = _figures(tmp_path, "binary", argv)["cases"]
    assert [(c["d"], c["bits"]) for c in cases] == [(256, 256), (256, 64)]  # the two shapes of the quick run
    for rows, case in zip(tables, cases, strict=True):
        assert [(v["variant"], f"{v['ms']:.2f}", f"{v['cpu_speedup']:.2f}×") for v in case["variants"]] == [
            (r["variant"], r["ms"], r["CPU speed-up"]) for r in rows
        ]
        assert rows[0]["variant"] == "dense x @ R.T" and rows[0]["speed-up vs dense"] == "1.00×"
        assert len(rows) == 1 + 6 + (jax.default_backend() == "gpu")
        assert all(r["bits equal to dense"] == "1.00000" for r in rows)  # same codes as the dense matrix


@pytest.mark.slow
def test_search_quick(tmp_path):
    argv = ("--quick", "--rows", "5000", "--queries", "50", "--repeat", "1", "--out", str(tmp_path))
    out = _run_script("search", *argv)
    (rows,) = _tables(out)
    figures = _figures(tmp_path, "search", argv)
    assert (figures["queries"], figures["rows"], figures["k"]) == (50, 5000, 10)
    stored = figures["searches"]
    assert [(s["search"], f"{s['geojax_s']:.3f}", f"{s['of_floor']:.2f}", s["check"]) for s in stored] == [
        (r["search"], r["geojax s"], r["of floor"], r["check"]) for r in rows
    ]
    floors = figures["floors"]
    assert f"memory read {floors['memory_gb_per_s']:.1f} GB/s" in out
    assert f"lane operations {floors['lane_ops_g_per_s']:.1f} G/s" in out
    for s, r in zip(stored, rows, strict=True):
        assert r["lane ops/pair → floor s"] == f"{s['lane_ops_per_pair']} → {s['lane_op_floor_s']:.3f}"
        assert s["geojax_rounds_s"] == [s["geojax_s"]] and s["geojax_s"] > 0  # one round: its median
    assert [r["search"].split()[0] for r in rows] == ["Hamming", "uint8", "PQ(m=8,"]
    bit_count = stored[0]["checks"]["bit_count"]  # the Hamming kernel's form on this host, and its count
    assert f"bits counted by {bit_count}" in rows[0]["check"]
    assert stored[0]["lane_ops_per_pair"] == {"population count": 24, "SWAR": 90}[bit_count]
    assert figures["xla_flags"] == child_env()["XLA_FLAGS"]
    if _installed("faiss"):
        assert "distances identical: True" in rows[0]["check"]
        assert stored[0]["checks"]["distances_identical"] is True
        for s, r in zip(stored, rows, strict=True):
            assert r["ratio (faiss/geojax)"] == f"**{s['ratio']:.2f}×**"
            assert s["ratio"] == pytest.approx(s["faiss_s"] / s["geojax_s"])
            assert s["cpu_ratio"] == pytest.approx(s["faiss_cpu_s"] / s["geojax_cpu_s"])
        recall = stored[2]["checks"]["recall_geojax"]
        assert f"recall@10: geojax {recall:.4f}" in rows[2]["check"]
    else:
        assert "faiss not installed" in out
        assert all(r["faiss s"] == r["ratio (faiss/geojax)"] == r["faiss CPU-s"] == "–" for r in rows)
        assert all(s["faiss_s"] is s["ratio"] is None for s in stored)
        assert "distances equal numpy scan on 20 queries: True" in rows[0]["check"]
    assert rows[1]["check"].endswith("numpy scan on 20 queries: True")


def _fake_run(folder: Path, geometry: str, dim: int, rows: int, queries: int, seed: int) -> str:
    """A run directory holding only embeddings.npz as the app writes it: unit sphere vectors, or torusN
    vectors (each adjacent pair of norm √(2/dim)), clustered so that an index has lists to find."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    z = {}
    for split, n in (("reference", rows), ("query", queries)):
        x = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, dim))
        pairs = x.reshape(n, -1, 2) if geometry == "torus_n" else x[:, None]
        scale = np.sqrt(2 / dim) if geometry == "torus_n" else 1.0
        z[split] = (scale * pairs / np.linalg.norm(pairs, axis=-1, keepdims=True)).reshape(n, dim)
        z[f"{split}_labels"] = np.zeros(n, np.int32)
    folder.mkdir()
    np.savez(folder / "embeddings.npz", **z, geometry=geometry, similarity="cosine")
    return str(folder)


@pytest.mark.slow
def test_ivf_learned_quick(tmp_path):
    torus = _fake_run(tmp_path / "torus", "torus_n", 16, 1200, 20, 0)
    sphere = _fake_run(tmp_path / "sphere", "sphere", 16, 1200, 20, 1)
    out_dir = tmp_path / "out"
    argv = ("--learned", torus, sphere, "--nlist", "4", "--repeat", "1", "--out", str(out_dir))
    out = _run_script("ivf", *argv)
    figures = _figures(out_dir, "ivf_learned", argv, module="ivf")
    assert [s["geometry"] for s in figures["learned"]] == ["torus_n", "sphere"]
    assert (figures["rows"], figures["queries"], figures["nlist"]) == (1200, 20, 4)
    sweep, table = figures["sweep"], _tables(out)[0]
    cases = ["torus, 8 angles", "sign bits (2 B)", "PQ 4×8 (4 B)"]  # torusN of 16: 8 angles
    assert list(dict.fromkeys(r["case"] for r in sweep)) == cases
    ours = [r for r in sweep if r["library"] == "geojax"]
    assert [r["code_bytes"] for r in ours if r["nprobe"] == 1] == [8, 8, 2, 4]
    # the torus's two indexes are timed together, nprobe by nprobe
    assert [r["nprobe"] for r in ours] == [1, 1, 2, 2, 4, 4, 1, 2, 4, 1, 2, 4]
    assert all(r["recall_same_codes"] == 1.0 for r in ours if r["nprobe"] == 4)  # full probe = exact
    for index in {r["index"] for r in ours}:  # recall against the same codes rises with nprobe
        recalls = [r["recall_same_codes"] for r in ours if r["index"] == index]
        assert recalls == sorted(recalls)
    assert all(("recall_torus" in r) == (r["case"] == cases[0]) for r in sweep)
    assert all(b["bytes_per_row"] > 0 for b in figures["builds"])
    assert len(table) == len(sweep) and all(r["qps"] > 0 for r in sweep)
    theirs = [r for r in sweep if r["library"] == "faiss"]
    if _installed("faiss"):  # the Clifford features at 4 bits, 8 bits and float; the binary IVF; IVFPQ
        assert [r["code_bytes"] for r in theirs if r["nprobe"] == 1] == [8, 16, 64, 2, 4]
        assert all(r["recall_same_codes"] == 1.0 for r in theirs if r["nprobe"] == 4)
        assert len(figures["equal_recall"]) == 2 * 2 * 3 + 2  # torus: 2 × 3 pairs × 2 distances
    else:
        assert theirs == [] and figures["same_codes"] == figures["equal_recall"] == []


@pytest.mark.slow
def test_ivf_gpu_dry_run_times_filtered_search(tmp_path):
    """``--gpu`` without an accelerator says it is a dry run and writes ivf_gpu.json with the filtered
    searches: per density every index, only allowed ids returned, the full probe exact against itself, and
    faiss's binary IVF named as refusing a selector."""
    argv = ("--gpu", "--rows", "1500", "--queries", "20", "--nlist", "8", "--repeat", "1")
    argv += ("--out", str(tmp_path))
    out = _run_script("ivf", *argv)
    figures = _figures(tmp_path, "ivf_gpu", argv, module="ivf")
    if jax.default_backend() == "cpu":
        assert "a dry run" in out and figures["jax_backend"] == "cpu"
    filtered = figures["filtered"]
    indexes = list(dict.fromkeys(r["index"] for r in figures["sweep"]))
    assert [(r["density"], r["index"]) for r in filtered] == [
        (d, i) for case in dict.fromkeys(r["case"] for r in filtered) for d in ivf.FILTER_DENSITIES
        for i in indexes if any(s["case"] == case and s["index"] == i for s in figures["sweep"])
    ]  # fmt: skip
    refused = [r for r in filtered if r["qps"] is None]
    assert {r["index"] for r in refused} == ({"faiss IndexBinaryIVF (8 B)"} if _installed("faiss") else set())
    timed = [r for r in filtered if r["qps"] is not None]
    assert all(r["only_allowed"] and r["nprobe"] == 8 and r["qps"] > 0 for r in timed)
    assert all(r["recall_same_codes"] == 1.0 for r in timed)  # nprobe 8 = nlist: the exact filtered search
    assert len(_tables(out)[-1]) == len(filtered)


def test_ivf_synthetic_data_and_cases():
    # The default run's data (its indexing is test_ivf_learned_quick's): clustered angles wrapped to [0, 1),
    # unit sphere vectors, and per data set geojax's indexes beside faiss's (none without faiss).
    faiss = ivf.load_faiss()
    data, cases = ivf.synthetic_data(faiss, np.random.default_rng(0), 500, 20, 16)
    (x, q), (s, sq) = data["torus"], data["sphere"]
    assert x.shape == (500, 16) and q.shape == (20, 16) and x.min() >= 0 and x.max() < 1
    np.testing.assert_allclose(np.linalg.norm(np.concatenate([s, sq]), axis=1), 1, rtol=1e-5)
    assert [(c.label, c.space) for c in cases] == [
        ("torus, 16 angles", "torus"),
        ("sign bits (2 B)", "sphere"),
        ("PQ 8×8 (8 B)", "sphere"),
    ]
    peers = [[(label, nbytes) for label, lib, nbytes, _ in c.indexes if lib == "faiss"] for c in cases]
    if faiss is None:
        assert peers == [[], [], []]
    else:
        assert [nbytes for _, nbytes in peers[0]] == [16, 32, 128]  # SQ4 = the 8-bit angles' bytes
    np.testing.assert_allclose(ivf.clifford(np.array([[0.25, 0.5]])), [[0, 1, -1, 0]], atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "name", "key", "columns"),
    [
        (("--index-devices", "--cpu-devices", "2"), "search_index_devices", "index_devices", ("queries/s",)),
        (("--torus-bits",), "search_torus_bits", "torus_bits", ("geojax q/s", "C q/s (1 thread)")),
    ],
)
def test_search_quick_variants_write_their_own_file(tmp_path, flags, name, key, columns):
    argv = ("--quick", *flags, "--rows", "3000", "--queries", "20", "--repeat", "1", "--out", str(tmp_path))
    (rows,) = _tables(_run_script("search", *argv))
    stored = _figures(tmp_path, name, argv, module="search")[key]
    assert len(stored) == len(rows) == (6 if key == "index_devices" else 4)
    fields = {
        "queries/s": "queries_per_s",
        "geojax q/s": "geojax_queries_per_s",
        "C q/s (1 thread)": "c_queries_per_s",
    }
    for s, r in zip(stored, rows, strict=True):
        for column in columns:
            assert r[column] == ("–" if s[fields[column]] is None else f"{s[fields[column]]:,.0f}")
    if key == "index_devices":
        assert [(s["codes"], s["devices"]) for s in stored] == [
            (c, d) for c in ("hamming", "torus", "pq") for d in (1, 2)
        ]
        assert all(s["equal_to_one_device"] is True for s in stored)
        assert [s["code_bytes"] for s in stored] == [32, 32, 64, 64, 8, 8]
    else:
        assert [(s["bits"], s["bytes"]) for s in stored] == [(8, 64), (4, 32), (2, 16), (1, 8)]


@pytest.mark.slow
def test_train_step_quick(tmp_path):
    args = ("--quick", "--steps", "4", "--repeats", "1", "--steps-per-call", "1,2", "--replicas", "1,2")
    args += ("--out", str(tmp_path))
    out = _run_script("train_step", *args)
    *tables, seeds_mlp, seeds_cnn = _tables(out)
    figures = _figures(tmp_path, "train_step", args)
    for table, case in zip(tables, figures["cases"], strict=True):
        assert [(r["step"], f"{r['ms_per_step']:.2f}") for r in case["rows"]] == [
            (r["step"], r["ms/step"]) for r in table if r["steps/s"] != "torch not installed"
        ]
    for table, stored in zip((seeds_mlp, seeds_cnn), figures["replicas"], strict=True):
        assert [f"{r['replica_steps_per_s']:.1f}" for r in stored["rows"]] == [
            r["replica-steps/s"] for r in table
        ]
    assert [table[0]["model"] for table in tables] == ["mlp", "cnn"]
    # quick: 64 and 32 images × 2 views; the ratios from the stored (unrounded) figures
    for table, case, per_step in zip(tables, figures["cases"], (64, 32), strict=True):
        one, two, *peers = table
        assert (one["step"], two["step"]) == (
            "geojax (device feed, 1 step/call)",
            "geojax (device feed, 2 steps/call)",
        )
        for row in case["rows"]:
            assert row["steps_per_s"] > 0
            assert row["images_per_s"] / row["steps_per_s"] == pytest.approx(per_step)
            assert row["view_images_per_s"] / row["images_per_s"] == pytest.approx(2)
        (peer,) = peers
        assert peer["step"] == "PyTorch eager"
        if _installed("torch"):
            ours, theirs = case["rows"][:2], case["rows"][2]
            best = min(r["ms_per_step"] for r in ours)
            assert theirs["over_best_geojax"] == pytest.approx(theirs["ms_per_step"] / best)
            assert case["best_torch_over_best_geojax"] == pytest.approx(theirs["ms_per_step"] / best)
        else:
            assert peer["steps/s"] == "torch not installed" and peer["best geojax ×"] == "–"
            assert "ratio best geojax / best PyTorch (mlp): – " in out
    for table, per_step in zip((seeds_mlp, seeds_cnn), (64, 32), strict=True):
        assert [r["replicas"] for r in table] == ["1", "2"]
        assert table[0]["vs one seed at a time"] == "1.00×"
        for row in table:
            per_replica = float(row["replica-steps/s"]) / int(row["replicas"])
            assert abs(per_replica / float(row["steps/s"]) - 1) < 0.01
            assert abs(float(row["images/s"]) / float(row["replica-steps/s"]) / per_step - 1) < 0.01


@pytest.mark.slow
def test_train_step_quick_data_parallel_over_cpu_devices(tmp_path):
    # --cpu-devices 2: the host split into two one-thread XLA devices, the step data-parallel over them.
    args = ("--quick", "--models", "mlp", "--steps", "4", "--repeats", "1", "--steps-per-call", "2")
    args += ("--cpu-devices", "2", "--out", str(tmp_path))
    (table,) = _tables(_run_script("train_step", *args))
    (case,) = _figures(tmp_path, "train_step_cpu_devices_2", args, module="train_step")["cases"]
    assert case["rows"][0]["step"] == table[0]["step"]
    ours = table[0]
    assert ours["step"] == "geojax (device feed, 2 steps/call, 2 CPU devices)"
    assert abs(float(ours["images/s"]) / float(ours["steps/s"]) / 64 - 1) < 0.01
    assert abs(float(ours["view-images/s"]) / float(ours["steps/s"]) / 128 - 1) < 0.01


@pytest.mark.slow
def test_train_step_refuses_a_batch_the_cpu_devices_do_not_divide():
    args = ("--quick", "--models", "mlp", "--steps", "2", "--repeats", "1", "--cpu-devices", "3")
    proc = _script("train_step", *args)
    assert proc.returncode != 0
    assert "mlp: batch_size 64 must be divisible by the 3 devices" in proc.stderr


def test_train_step_times_each_batch_norm_only_where_the_encoder_has_one():
    resnet = train_step.gpu_case(quick=True)
    variants = train_step.norm_variants(resnet, ["batch", "fused_batch"])
    assert [v.cfg.norm for v in variants] == ["batch", "fused_batch"]
    assert all(v.cfg.encoder == "resnet18" and v.images is resnet.images for v in variants)
    names = [train_step.geojax_name(10, 1, v.cfg.norm) for v in variants]
    assert names == [
        "geojax (device feed, 10 steps/call)",
        "geojax (device feed, 10 steps/call, norm=fused_batch)",
    ]
    cnn = train_step.cpu_cases(quick=True)[1]  # the small CNN without a norm: timed as it is
    assert train_step.norm_variants(cnn, ["batch", "fused_batch"]) == [cnn]


def test_train_step_busy_time_is_the_union_of_intervals():
    ts = train_step
    assert ts.busy_time([]) == 0
    assert ts.busy_time([(0, 2), (1, 3), (5, 6), (5.5, 5.7), (2.5, 2.6)]) == pytest.approx(4.0)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 100, 30)
    spans = [(int(a), int(a + b)) for a, b in zip(starts, rng.integers(1, 10, 30), strict=True)]
    covered = np.zeros(120, bool)
    for a, b in spans:
        covered[a:b] = True
    assert ts.busy_time(spans) == covered.sum()


def test_train_step_kernel_split_reads_the_device_streams_of_a_trace():
    ts = train_step
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7(Compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "XLA Ops"}},
    ]
    kernel = {"ph": "X", "pid": 2, "tid": 7}
    events = meta + [
        {**kernel, "name": "sm90_xmma_fprop_implicit_gemm_bf16_cudnn", "ts": 0, "dur": 3000},
        {**kernel, "name": "loop_convert_fusion", "ts": 3000, "dur": 1000},
        {**kernel, "name": "loop_convert_fusion", "ts": 6000, "dur": 1000},
        {**kernel, "name": "nvjet_hsh_128x64_64x4", "ts": 6500, "dur": 1500},  # overlaps the last
        {**kernel, "name": "input_reduce_fusion_3", "ts": 8000, "dur": 500},
        {"ph": "X", "pid": 2, "tid": 8, "name": "fusion.3", "ts": 0, "dur": 8000},  # XLA Ops line
        {"ph": "X", "pid": 1, "tid": 1, "name": "loop_add_fusion", "ts": 0, "dur": 50000},  # host side
    ]
    split = ts.kernel_split(events, steps=2, top=2)
    assert split["kernels_per_step"] == 2.5
    assert split["kinds_ms"] == {
        "convolution": 1.5,
        "element-wise": 1.0,
        "matrix product": 0.75,
        "reduction": 0.25,
    }
    assert split["products_ms"] == pytest.approx((3 + 1.5) / 2)
    assert split["rest_ms"] == pytest.approx((2 + 0.5) / 2)
    assert split["busy_ms"] == pytest.approx(6.5 / 2)  # 0–4 ms and 6–8.5 ms
    assert split["window_ms"] == pytest.approx(8.5 / 2)
    assert [(k["kernel"], k["ms_per_step"], k["kind"]) for k in split["top"]] == [
        ("sm90_xmma_fprop_implicit_gemm_bf16_cudnn", 1.5, "convolution"),
        ("loop_convert_fusion", 1.0, "element-wise"),
    ]
    assert ts.kernel_split(meta[:1] + events[-1:], steps=1) is None  # a CPU trace: no device


@pytest.mark.parametrize(
    "name, kind",
    [
        ("sm90_xmma_dgrad_implicit_gemm_bf16bf16_nhwc_cudnn", "convolution"),
        ("sm90_xmma_wgrad_indexed_implicit_gemm_bf16_cudnn", "convolution"),
        ("triton_convolution2d_238", "convolution"),
        # Inductor names a fused pointwise kernel after the operations in it: not a product
        ("triton_poi_fused__native_batch_norm_legit_functional_convolution_backward_37", "element-wise"),
        ("triton_red_fused__native_batch_norm_legit_functional_add_32", "reduction"),
        ("triton_mm_422", "matrix product"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "matrix product"),
        ("input_reduce_select_fusion_3", "reduction"),
        ("loop_convert_fusion", "element-wise"),  # "convert" is no convolution
        ("Memcpy DtoD (Device -> Device)", "copy"),
        ("void cub::DeviceRadixSortOnesweepKernel<float>", "other"),
    ],
)
def test_train_step_kernel_kind(name, kind):
    assert train_step.kernel_kind(name) == kind


def test_step_profile_classes_compiled_hlo_by_what_its_kernels_hold():
    sp = step_profile

    def fn(x, w, k):
        y = jnp.tanh(x @ w) + 1.0  # a product, maybe fused with its epilogue
        c = jax.lax.conv_general_dilated(k, k, (1, 1), "SAME")
        z = jax.lax.fori_loop(0, 3, lambda i, z: jnp.sin(z) * 2.0, y)  # a loop of element-wise work
        with jax.named_scope("tap_conv"):  # element-wise work whose metadata names a convolution
            scoped = jnp.cos(y) * 3.0
        return z.sum() + c.sum(), scoped

    args = (jnp.ones((64, 32)), jnp.ones((32, 16)), jnp.ones((1, 1, 8, 8)))
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    kinds = sp.classify_hlo(hlo)
    assert set(kinds.values()) == {"product", "other", "loop"}
    lines = {name: next(s for s in hlo.splitlines() if f"%{name} = " in s) for name in kinds}
    for name, kind in kinds.items():  # the ENTRY's and the loop body's instructions alike
        opcode = lines[name].split(" = ", 1)[1]
        if " dot(" in opcode or " convolution(" in opcode:
            assert kind == "product", lines[name]
        if " while(" in opcode:
            assert kind == "loop", lines[name]
        if any(f" {op}(" in opcode for op in ("sine", "tanh", "add", "reduce", "parameter", "constant")):
            assert kind == "other", lines[name]
    scoped = [n for n in kinds if "tap_conv" in lines[n] and " fusion(" in lines[n]]
    assert scoped and all(kinds[n] == "other" for n in scoped), [lines[n] for n in scoped]
    # Trace events: only complete ("X") events that name a product or another kernel count, per step.
    product = next(n for n, k in kinds.items() if k == "product")
    other = next(n for n, k in kinds.items() if k == "other")
    loop = next(n for n, k in kinds.items() if k == "loop")
    events = [
        {"ph": "X", "name": product, "dur": 3000.0},
        {"ph": "X", "name": other, "dur": 1000.0},
        {"ph": "X", "name": loop, "dur": 9000.0},  # its body's kernels are counted instead
        {"ph": "X", "name": "ThunkExecutor::Execute", "dur": 9000.0},
        {"ph": "B", "name": product, "dur": 5000.0},
    ]
    assert sp.split_events(events, kinds, steps=2) == {"product": 1.5, "other": 0.5}


@pytest.mark.slow
def test_step_profile_quick(tmp_path):
    argv = ("--quick", "--models", "mlp", "--steps", "4", "--steps-per-call", "2", "--out", str(tmp_path))
    out = _run_script("step_profile", *argv)
    (table,) = _tables(out)
    (model,) = _figures(tmp_path, "step_profile", argv)["models"]
    stored = [(r["step"], f"{r['sum_ms']:.2f}") for r in model["rows"]]
    assert stored == [(r["step"], r["sum ms"]) for r in table]
    assert table[0]["step"] == "geojax"
    for row in table:
        products, rest, total = (float(row[c]) for c in ("products ms", "rest ms", "sum ms"))
        assert products > 0 and rest > 0 and abs(products + rest - total) < 0.02
        assert float(row["unprofiled ms"]) > 0
    assert len(table) == (2 if _installed("torch") else 1)
    assert "4 steps (geojax 2 per call)" in out


@pytest.mark.slow
def test_seeds_quick(tmp_path):
    out = _run_script("seeds", "--quick", "--out", str(tmp_path))
    (rows,) = _tables(out)
    stored = _figures(tmp_path, "seeds", ("--quick", "--out", str(tmp_path)))["rows"]
    assert [(str(r["S"]), f"{r['ratio']:.3f}") for r in stored] == [(r["S"], r["ratio"]) for r in rows]
    assert [r["S"] for r in rows] == ["1", "2"]
    assert rows[0]["ratio"] == "1.000"  # S = 1 is the single run itself
    assert all(float(r["one program MiB"]) > 0 for r in rows)


@pytest.mark.slow
def test_memory_quick(tmp_path):
    argv = ("--quick", "--out", str(tmp_path))
    out = _run_script("memory", *argv)
    speed, p1 = _tables(out)  # the step timings come first (minutes), then the trainings (hours)
    figures = _figures(tmp_path, "memory", argv)
    assert [(a["batch"], a["memory"]) for a in figures["arms"]] == [(16, 0), (16, 64)]
    assert [(r["batch"], r["memory"]) for r in p1] == [("16", "0"), ("16", "64")]
    for arm, row in zip(figures["arms"], p1, strict=True):
        assert row["P@1 mean"] == f"{arm['precision_at_1_mean']:.4f}" and len(arm["rows"]) == 1
        assert arm["rows"][0]["steps"] == figures["steps"] == 12 and 0 < arm["precision_at_1_mean"] <= 1
        assert all(len(arm["rows"][0][k]) == 3 for k in ("load_before", "load_after"))  # kept when trained
    timing = figures["speed"]
    assert [r["step"] for r in timing["rows"]] == [r["step"] for r in speed]
    ms = {(r["side"], r["memory"]): r["ms_per_step"] for r in timing["rows"]}
    assert timing["geojax_memory_over_none"] == pytest.approx(ms["geojax", 64] / ms["geojax", 0])
    assert timing["target_met"] == (timing["geojax_memory_over_none"] <= 1.3)
    if _installed("pytorch_metric_learning") and _installed("torch"):
        assert timing["pml_memory_over_none"] == pytest.approx(ms["pml", 64] / ms["pml", 0])
    else:
        assert timing["pml_memory_over_none"] is None and len(speed) == 2


def test_a_benchmark_reads_back_only_a_training_of_the_same_command(tmp_path):
    """A committed training is read back for its own arm; one of another seed, memory, batch or length is
    refused, naming what differs."""
    from dataclasses import asdict

    from train.app import config

    line = ["preset=supcon_sphere_cpu", "dataset=digits", "batch_size=64", "memory=1024", "steps=30"]
    line += ["seed=0", "progress=false", "memory_warmup=5"]
    saved = asdict(config.from_args([*line, f"workdir={tmp_path}"]))
    (tmp_path / "config.json").write_text(json.dumps(saved))
    cpu_recipe.check_trained_as(str(tmp_path), line)  # the same arm: read back
    cpu_recipe.check_trained_as(str(tmp_path), [*line[:-2], "progress=true", line[-1]])  # a run key differs
    for changed, named in (("seed=1", "seed"), ("memory=8192", "memory"), ("batch_size=32", "batch_size")):
        other = [changed if a.split("=")[0] == named else a for a in line]
        with pytest.raises(SystemExit, match=f"different config.*{named}"):
            cpu_recipe.check_trained_as(str(tmp_path), other)
    with pytest.raises(SystemExit, match="steps=30, the run asks steps=40"):
        cpu_recipe.check_trained_as(str(tmp_path), [a if a != "steps=30" else "steps=40" for a in line])


def test_a_training_of_epochs_is_read_back_by_its_epochs(tmp_path):
    """A run given in epochs saves its steps resolved on the data (2808 for 12 epochs of Fashion-MNIST at
    batch 256), not the default steps its command line parses to: it is read back, and another number of
    epochs is refused."""
    from dataclasses import asdict, replace

    from train.app import config

    line = ["preset=supcon_sphere_cpu", "dataset=digits", "seed=0", "progress=false"]
    cfg = config.from_args([*line, f"workdir={tmp_path}"])
    assert cfg.epochs == 12 and cfg.steps != 2808
    (tmp_path / "config.json").write_text(json.dumps(asdict(replace(cfg, steps=2808))))
    cpu_recipe.check_trained_as(str(tmp_path), line)
    with pytest.raises(SystemExit, match=r"epochs=12(\.0)?, the run asks epochs=6"):
        cpu_recipe.check_trained_as(str(tmp_path), [*line, "epochs=6"])


# ----------------------------------------------------------------------------------------------------------
# --check: a stored comparison rerun, its ratios held against the file's


def test_other_machine_names_what_moves_a_ratio():
    stored = {"cpu": "AMD EPYC", "cpu_isa": ["avx", "avx2"], "cores": 2}
    assert other_machine(stored, "AMD EPYC", ["avx", "avx2"], 2) == ""
    assert other_machine({}, "AMD EPYC", ["avx2"], 2) == ""  # an older record that does not say
    got = other_machine(stored, "Intel Xeon", ["avx", "avx2", "avx512_vpopcntdq"], 4).split("; ")
    assert got == [
        "stored on AMD EPYC, this CPU is Intel Xeon",
        "stored on a CPU with avx, avx2, this one has avx, avx2, avx512_vpopcntdq",
        "stored with 2 cores, this machine has 4",
    ]
    x86 = "fpu sse4_2 avx2 fma avx512_vpopcntdq amx_tile".split()
    assert cpu_isa(x86) == ["amx_tile", "avx2", "avx512_vpopcntdq"]
    assert cpu_isa("fp asimd asimddp sve".split()) == ["asimd", "asimddp", "sve"]
    assert cpu_isa([]) == []


def test_check_ratios_names_the_rows_that_fell_or_went_unmeasured(capsys):
    stored = {"held": 2.0, "fell": 1.0, "no peer then": None, "unmeasured": 3.0}
    now = {"held": 1.41, "fell": 0.69, "no peer then": 5.0, "unmeasured": None, "new": 1.0}
    assert check_ratios(stored, now) == ["fell", "unmeasured"]
    out = capsys.readouterr().out
    assert "held: stored 2.00×, now 1.41× (0.70× the stored) ok" in out
    assert "fell: stored 1.00×, now 0.69× (0.69× the stored) FELL" in out
    assert "new: now 1.00× (not in the stored file)" in out


def test_ivf_summaries_compare_each_pair_at_its_own_settings():
    def row(index, library, nprobe, same, flt, qps):
        return {
            "case": "c",
            "index": index,
            "library": library,
            "code_bytes": 8,
            "nprobe": nprobe,
            "recall_same_codes": same,
            "recall_float": flt,
            "qps": qps,
        }

    rows = [
        row("ours", "geojax", 1, 0.90, 0.50, 400.0),
        row("theirs", "faiss", 1, 0.96, 0.70, 900.0),
        row("ours", "geojax", 2, 0.97, 0.60, 300.0),
        row("theirs", "faiss", 2, 1.00, 0.80, 100.0),
    ]
    (same,) = ivf.at_same_codes(rows)
    assert (same["geojax"]["nprobe"], same["faiss"]["nprobe"]) == (2, 1) and same["ratio"] == 300 / 900
    (equal,) = ivf.at_equal_recall(rows)  # the highest float recall both reach: ours' best, 0.60
    assert equal["level"] == 0.60 and (equal["geojax"]["nprobe"], equal["faiss"]["nprobe"]) == (2, 1)
    assert equal["ratio"] == pytest.approx(300 / 900)
    assert [(b["index"], b["nprobe"], b["recall_float"]) for b in ivf.at_bytes(rows)] == [
        ("ours", 2, 0.60),
        ("theirs", 2, 0.80),
    ]
    assert ivf.ratios({"sweep": rows}) == {"c: ours / theirs": pytest.approx((400 / 900 * 300 / 100) ** 0.5)}


@pytest.mark.slow
def test_search_check_reruns_the_stored_command_and_fails_on_a_fallen_ratio(tmp_path):
    # A stored file whose Hamming ratio any run beats and whose wrap-L1 ratio none does: --check reruns its
    # command, exits 1 naming only the wrap-L1 row (both without faiss: nothing to compare), writes nothing.
    command = "python -m benchmarks.search --quick --searches hamming,wrap-l1 --rows 2000 --queries 20"
    command += " --repeat 1"
    searches = [
        {"search": "Hamming 256-bit top-k", "ratio": 1e-6},
        {"search": "uint8 wrap-L1 64-byte top-k", "ratio": 1e6},
    ]
    machine = {"code_version": {"commit": "0" * 40}, "cpu": "a CPU of another make"}
    record = {"command": command, "machine": machine, "figures": {"searches": searches}}
    (tmp_path / "search.json").write_text(json.dumps(record))
    proc = _script("search", "--check", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"rerunning {command!r}" in proc.stdout
    assert "NOTE: stored on a CPU of another make, this CPU is" in proc.stdout
    fell = proc.stderr.strip().splitlines()[-1]
    assert "uint8 wrap-L1 64-byte top-k" in fell
    assert ("Hamming" in fell) is not _installed("faiss")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["search.json"]


@pytest.mark.slow
def test_reality_check_quick(tmp_path):
    """Two losses (one on the batch, one on proxies) tuned on a validation split and trained on both
    protocols at a few steps: the table's rows are the file's, each setting the best of its grid."""
    argv = ("--quick", "--out", str(tmp_path))
    out = _run_script("reality_check", *argv)
    assert re.search(r"\d+ trainings left: expected [\d.]+ h", out)  # said before anything trains
    (rows,) = _tables(out)
    figures = _figures(tmp_path, "reality_check", argv)
    names = [r["loss"] for r in figures["losses"]]
    assert (
        [r["loss"] for r in rows]
        == ["raw pixels (784-d, Euclidean)", *names]
        == ["raw pixels (784-d, Euclidean)", "supcon", "proxy_anchor"]
    )
    for loss, row in zip(figures["losses"], rows[1:], strict=True):
        tuning = figures["tuning"][loss["loss"]]
        best = max(tuning["scores"], key=lambda s: s["val_p_at_1"])["val_p_at_1"]
        chosen = next(s for s in tuning["scores"] if s["setting"] == tuning["setting"])
        assert chosen["val_p_at_1"] == best
        for protocol, column in (("a", "(a) P@1"), ("b", "(b) R@1")):
            summary = loss[protocol]
            assert row[column] == f"{100 * summary['precision_at_1_mean']:.1f}"
            assert 0 <= summary["map_at_r_mean"] <= 1 and len(summary["runs"]) == 1


def test_reality_check_page_and_plan():
    """The sweep's pieces: a tuning run validates once at its last step, the final runs name their protocol,
    the table marks a loss under the bar, and the page's section is replaced in place."""
    plan = reality_check.Plan("digits", None, 50, (0, 1), reality_check.LOSSES[:1], "runs", full=200)
    loss = plan.losses[0]
    line = reality_check.tune_line(plan, loss, loss.grid[1])
    assert {"select_best=true", "val_every=50", "steps=50", "seed=0", "temperature=0.05", "koleo=0"} <= set(
        line
    )
    assert "classes=disjoint" in reality_check.final_line(plan, loss, (), "b", 1)
    assert "classes=all" in reality_check.final_line(plan, loss, (), "a", 1)
    left = reality_check.left_to_train(plan)
    assert sorted(left) == [*[("a", 200)] * 2, *[("b", 100)] * 2, *[("tune", 50)] * 3]
    raw = {"a": {"precision_at_1": 0.85, "map_at_r": 0.5}, "b": {"precision_at_1": 0.7, "map_at_r": 0.4}}

    def summary(p1):
        return {
            "precision_at_1_mean": p1,
            "precision_at_1_sd": 0.01,
            "map_at_r_mean": 0.6,
            "map_at_r_sd": None,
        }

    rows = [
        {"loss": "good", "keys": ["loss=x", "t=1"], "a": summary(0.9), "b": summary(0.8)},
        {"loss": "weak", "keys": ["loss=y"], "a": summary(0.87), "b": summary(0.8)},
    ]
    text = reality_check.table(rows, raw)
    assert "| good | `t=1` | 90.0 ± 1.0 | 60.0 |" in text and "| weak | – | 87.0 ± 1.0 | 60.0 |" in text
    assert text.splitlines()[-2].endswith("| yes |") and text.splitlines()[-1].endswith("| **no** |")


def test_reality_check_writes_its_section_in_place(tmp_path):
    page = tmp_path / "losses.md"
    page.write_text(f"# Losses\n\ntable\n\n{reality_check.HEADING}\n\nold text\n\n## Miners\n\nkept\n")
    reality_check.write_page("| a |\n|---|\n| 1 |", str(page))
    reality_check.write_page("| a |\n|---|\n| 2 |", str(page))  # a second run replaces the first
    heading = reality_check.HEADING
    assert page.read_text() == f"# Losses\n\ntable\n\n{heading}\n\n| a |\n|---|\n| 2 |\n\n## Miners\n\nkept\n"


def test_reality_check_page_says_its_length_and_the_settings_tried(tmp_path):
    """The sweep's hours come from the speed of its runs made on a quiet machine (all its runs, said to be
    under load, when none was); the page names the losses under the bar and every setting each loss tried."""
    plan = reality_check.Plan("digits", None, 50, (0, 1), reality_check.LOSSES[:1], str(tmp_path), full=200)
    runs = reality_check.planned(plan)
    assert [(stage, steps) for stage, _, steps in runs] == [("tune", 50)] * 3 + [("a", 200)] * 2 + [
        ("b", 100)
    ] * 2
    for i, (_, workdir, _) in enumerate(runs):
        os.makedirs(workdir)
        quiet = i in (1, 4)  # started and ended below 2.5
        timing = {"steps_per_s": [1, 4, 1, 1, 6, 1, 1][i], "eval_s": [9, 9, 9, 30, 40, 20, 20][i]}
        selection = [{"precision_at_1": [0.8, 0.7, 0.75, 0, 0, 0, 0][i]}]  # the grid's first is best
        (Path(workdir) / "report.json").write_text(json.dumps({"timing": timing, "selection": selection}))
        loads = {"load_before": [1.0 if quiet else 2.0, 0, 0], "load_after": [2.0 if quiet else 5.0, 0, 0]}
        (Path(workdir) / "load.json").write_text(json.dumps(loads))
    time = reality_check.training_time(plan)
    assert time == {
        "trainings": 7,
        "finished": 7,
        "steps": 750,
        "steps_per_s": 5.0,
        "quiet": True,
        "quiet_runs": 2,
        "hours": 750 / 5 / 3600,
    }
    loud = reality_check.training_time(plan, quiet_load=1.5)
    assert not loud["quiet"] and loud["steps_per_s"] == 1.0 and loud["hours"] == 750 / 3600
    assert reality_check.left_to_train(plan) == []
    # the runs left at the quiet speed, each with its stage's median evaluation time
    assert reality_check.expected_s(plan, [("a", 200), ("tune", 50)]) == 200 / 5 + 35 + 50 / 5 + 9

    raw = {"a": {"precision_at_1": 0.85, "map_at_r": 0.5}, "b": {"precision_at_1": 0.7, "map_at_r": 0.4}}
    summary = {"precision_at_1_sd": None, "map_at_r_mean": 0.6, "map_at_r_sd": None}
    rows = [
        {
            "loss": "good",
            "keys": ["loss=x"],
            "a": {**summary, "precision_at_1_mean": 0.9},
            "b": summary | {"precision_at_1_mean": 0.8},
        },
        {
            "loss": "weak",
            "keys": ["loss=y"],
            "a": {**summary, "precision_at_1_mean": 0.87},
            "b": summary | {"precision_at_1_mean": 0.8},
        },
    ]
    chosen = {
        "good": {
            "setting": ["t=1"],
            "scores": [{"setting": ["t=2"], "val_p_at_1": 0.5}, {"setting": ["t=1"], "val_p_at_1": 0.75}],
            "at_edge": False,
        },
        "weak": {"setting": ["m=0"], "scores": [{"setting": ["m=0"], "val_p_at_1": 0.4}], "at_edge": True},
    }
    text = reality_check.page(plan, rows, raw, chosen, time)
    assert (
        "7 trainings, 750 steps in all: about 0.0 h at 5.00 steps/s, the median speed of the 2 runs made"
        in text
    )
    assert "tuned with one seed at 50 of the 200 steps" in text and "--data digits" in text
    assert "with the settings below tried: weak." in text
    assert "Chosen at the edge of the values tried, so a better setting may lie beyond it: weak." in text
    assert "one value beyond that edge is tried too" in text
    assert "| good | `t=2` 50.0 · **`t=1` 75.0** |" in text and "| weak | **`m=0` 40.0** |" in text
    assert reality_check.table(rows, raw) in text
    assert "under load" in reality_check.page(plan, rows[:1], raw, chosen, loud)
    assert "Every loss reaches raw pixels + 3 points" in reality_check.page(plan, rows[:1], raw, chosen, loud)
    assert "On (b), every loss finished there is above the raw pixels' R@1 (70.0)." in text  # both at 80.0
    rows[1]["b"] = summary | {"precision_at_1_mean": 0.6}
    below = "On (b), below the raw pixels' R@1 (70.0): weak."
    assert below in reality_check.page(plan, rows, raw, chosen, time)
    rows[0]["b"] = summary | {"precision_at_1_mean": 0.65}
    every = "On (b), the raw pixels' R@1 (70.0) is above every loss finished there."
    assert every in reality_check.page(plan, rows, raw, chosen, time)


def test_reality_check_tries_one_value_beyond_an_edge_of_the_grid(tmp_path):
    """A grid whose best value is its lowest or highest trains the value beyond that edge (once the grid has
    finished: the plan counts it then), and the best of all tried is chosen; a choice still at the edge of
    what was tried is flagged, one bracketed by its neighbours is not. Nothing lies below contrastive's
    neg_margin=0.0, so a best there is flagged without a run beyond."""
    supcon, contrastive = reality_check.LOSSES[0], reality_check.LOSSES[2]
    plan = reality_check.Plan("digits", None, 50, (0,), (supcon,), str(tmp_path), full=200)
    assert [s[0] for s in supcon.grid] == ["temperature=0.1", "temperature=0.05", "temperature=0.2"]
    assert supcon.beyond_best([0.8, 0.9, 0.7]) == ("temperature=0.025",)  # 0.05, the lowest, is best
    assert supcon.beyond_best([0.8, 0.7, 0.9]) == ("temperature=0.4",)  # 0.2, the highest
    assert supcon.beyond_best([0.9, 0.8, 0.9]) is None  # 0.1 inside (the earliest of a tie)
    assert contrastive.beyond_best([0.9, 0.8, 0.7]) is None  # neg_margin=0.0: nothing below

    def reader(scores):
        def read(line, workdir):
            (setting,) = [k for k in line if k.startswith("temperature=")]
            if setting not in scores:
                return None
            return {"selection": [{"precision_at_1": scores[setting]}]}, {}

        return read

    grid = {"temperature=0.1": 0.8, "temperature=0.05": 0.9, "temperature=0.2": 0.7}
    assert reality_check.tuned(plan, supcon, reader(grid)) is None  # the run beyond 0.05 is not there yet
    lost = reality_check.tuned(plan, supcon, reader(grid | {"temperature=0.025": 0.85}))
    assert lost["setting"] == ["temperature=0.05"] and not lost["at_edge"]
    assert [s["setting"] for s in lost["scores"]][-1] == ["temperature=0.025"]
    won = reality_check.tuned(plan, supcon, reader(grid | {"temperature=0.025": 0.95}))
    assert won["setting"] == ["temperature=0.025"] and won["at_edge"]
    inside = reality_check.tuned(plan, supcon, reader({**grid, "temperature=0.1": 0.95}))
    assert len(inside["scores"]) == 3 and not inside["at_edge"]

    def stages():
        return [(stage, Path(workdir).name) for stage, workdir, _ in reality_check.planned(plan)]

    names = ["supcon_temperature-0.1", "supcon_temperature-0.05", "supcon_temperature-0.2"]
    finals = [("a", "supcon_temperature-0.1_seed0"), ("b", "supcon_temperature-0.1_seed0")]
    assert stages() == [("tune", n) for n in names] + finals  # the grid's first stands for the choice
    for name, score in zip(names, (0.8, 0.9, 0.7), strict=True):
        os.makedirs(tmp_path / "tune" / name)
        report = {"selection": [{"precision_at_1": score}]}
        (tmp_path / "tune" / name / "report.json").write_text(json.dumps(report))
    beyond = ("tune", "supcon_temperature-0.025")
    assert stages() == [("tune", n) for n in names] + [beyond] + finals
    os.makedirs(tmp_path / "tune" / beyond[1])
    (tmp_path / "tune" / beyond[1] / "report.json").write_text(
        json.dumps({"selection": [{"precision_at_1": 1}]})
    )
    chosen = [("a", "supcon_temperature-0.025_seed0"), ("b", "supcon_temperature-0.025_seed0")]
    assert stages() == [("tune", n) for n in names] + [beyond] + chosen  # the finals follow the choice


def test_reality_check_so_far_shows_the_finished_runs_and_trains_nothing(tmp_path):
    """--so-far: a loss is in the table once its whole grid has finished, a protocol's figures once all its
    seeds have ('–' before), only losses finished on (a) are judged against the bar, and the page says how
    many trainings have finished; finished_only trains nothing."""
    plan = reality_check.Plan("digits", None, 50, (0, 1), reality_check.LOSSES[:2], str(tmp_path), full=200)
    supcon, triplet = plan.losses
    scores = {
        "temperature=0.1": 0.8,
        "temperature=0.05": 0.9,
        "temperature=0.2": 0.7,
        "temperature=0.025": 0.85,
    }
    finals = {("a", 0): 0.80, ("a", 1): 0.82, ("b", 0): 0.6}  # (b) seed 1 not finished

    def read(line, workdir):
        stage, name = Path(workdir).parent.name, Path(workdir).name
        rep = {"timing": {"train_s": 1.0, "steps_run": 50}}
        if stage == "tune" and name.startswith("supcon"):
            (setting,) = [k for k in line if k.startswith("temperature=")]
            return rep | {"selection": [{"precision_at_1": scores[setting]}]}, {"load_before": None}
        if stage == "tune" and name.endswith("margin-0.2"):  # one of triplet's three settings
            return rep | {"selection": [{"precision_at_1": 0.5}]}, {"load_before": None}
        seed = int(name[-1])
        if stage in "ab" and (stage, seed) in finals and name.startswith("supcon"):
            os.makedirs(workdir, exist_ok=True)
            (Path(workdir) / reality_check.ANALYSIS).write_text(json.dumps({"map_at_r": 0.5}))
            return rep | {"precision_at_1": finals[stage, seed]}, {"load_before": None}
        return None

    chosen = reality_check.tune(plan, read)
    assert list(chosen) == ["supcon"] and chosen["supcon"]["setting"] == ["temperature=0.05"]
    (row,) = reality_check.final(plan, chosen, read)
    assert row["a"]["precision_at_1_mean"] == pytest.approx(0.81) and len(row["b"]["runs"]) == 1
    assert "precision_at_1_mean" not in row["b"]
    raw = {"a": {"precision_at_1": 0.85, "map_at_r": 0.5}, "b": {"precision_at_1": 0.7, "map_at_r": 0.4}}
    text = reality_check.table([row], raw)
    last = "| supcon | `temperature=0.05` | 81.0 ± 1.4 | 50.0 ± 0.0 | – | – | **no** |"
    assert text.splitlines()[-1] == last
    time = {"trainings": 14, "finished": 6, "steps": 1050, "hours": None}
    page = reality_check.page(plan, [row], raw, chosen, time)
    assert "So far 6 of the 14 trainings have finished" in page and "settings below tried: supcon." in page
    assert "On (b)" not in page  # no loss finished there yet
    row["a"] = {"runs": row["a"]["runs"][:1]}  # (a) not finished either: nothing judged
    page = reality_check.page(plan, [row], raw, chosen, time)
    assert "| – | – | – | – | – |" in page and "Every loss finished on (a) reaches" in page
    assert reality_check.finished_only(["steps=1"], str(tmp_path / "nowhere")) is None
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.slow
def test_call_path_of_a_run_visits_no_file_more_than_four_times(tmp_path):
    """Following ``python -m train`` from ``cli.main`` through its first calls (the house's rule for a loop a
    reader can follow): no file of ``train/`` is entered more than 4 times, and the path reaches the loop,
    the step, the program and the report."""
    out = _run_script(
        "call_path",
        "steps=2",
        "batch_size=32",
        "log_every=1",
        "progress=false",
        f"workdir={tmp_path / 'run'}",
    )
    path = [line.split()[0] for line in out.splitlines() if line.startswith("train/")]
    per_file = collections.Counter(path)
    assert max(per_file.values()) <= 4, per_file.most_common(5)
    assert {"train/app/cli.py", "train/app/loop.py", "train/app/step.py", "train/app/program.py"} <= set(path)
    assert {"train/app/report.py"} <= set(path) and path[0] == "train/app/cli.py"
    assert f"{len(path)} visits of {len(per_file)} files" in out
