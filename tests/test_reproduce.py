"""train.reproduce: the tables' structure at a tiny size (Hong, Meng & Yuan 2018 and Bouhsine et al. 2024),
verdicts recomputed from the numbers; the shared records, statistics and plots against naive references."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import jax
import numpy as np
import pytest

from train.app import config, report
from train.app import data as data_lib
from train.helpers import plots, results, version
from train.reproduce import (
    atlas,
    binary,
    common,
    papers,
    records,
    render,
    rules,
    rundirs,
    similarities,
    simo,
    tables,
    torus,
)
from train.reproduce.__main__ import _compilation_cache, gated, main, scale_record

CLAIM_KEYS = {"claim", "ours", "paper", "source", "rule", "verdict"}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("reproduce") / "new" / "folder")  # created by the command
    results = main(["002", "--scale", "tiny", "--out", out])
    results += main(["004", "--scale", "tiny", "--out", out])
    return out, {r["seed"]: r for r in results}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_json_files_match_results_and_have_claim_tables(outputs):
    out, results = outputs
    for seed, res in results.items():
        with open(os.path.join(out, f"reproduce_{seed}_tiny.json"), encoding="utf-8") as f:
            on_disk = json.load(f)
        assert on_disk == res
        assert res["claims"], seed
        for c in res["claims"]:
            assert set(c) == CLAIM_KEYS
            assert c["verdict"] in rules.VERDICTS
            assert c["ours"] and c["rule"]
        assert _finite(res["wall_s"]) and res["wall_s"] > 0
        assert res["scale"]["name"] == "tiny"
        assert res["data"]["name"] == "digits" and res["data"]["train"] + res["data"]["test"] == 1797
        assert res["command"].startswith(f"python -m train.reproduce {seed} --scale tiny")
    assert not [p for p in os.listdir(out) if p.startswith(".tmp-")]  # no temporary files left


def test_seed_002_numbers_and_verdicts(outputs):
    res = outputs[1]["002"]
    rep = res["details"]["binary_eval"]
    assert {r["method"] for r in rep["rows"]} == {"ITQ", "TP"}
    for r in rep["rows"]:
        assert 0.0 <= r["map"] <= 1.0 and r["params"] > 0 and _finite(r["encode_us_per_vector"])
    by = {(r["bits"], r["method"]): r for r in rep["rows"]}
    assert all("ap" not in r for r in rep["rows"])  # the per-query APs gave the intervals, are not stored
    (bits,) = {b for b, _ in by}  # b = d alone at this scale
    diff, lo, hi = res["details"]["tp_minus_itq"][str(bits)]
    assert diff == pytest.approx(by[(bits, "TP")]["map"] - by[(bits, "ITQ")]["map"])  # mAP over the queries
    assert lo <= diff <= hi and res["details"]["bootstraps"] == common.SCALES["tiny"].bootstrap
    # b = 2d and 4d are not run at this scale: "outperforms on long codes" can at most be open; no b < d.
    long_verdict = rules.FAILS if hi < 0 else rules.INCONCLUSIVE
    # The encoding times: every repeated timing kept, their median the row's figure, judged by Welch.
    times = {m: by[(bits, m)]["encode_us_samples"] for m in ("TP", "ITQ")}
    assert len(times["TP"]) == binary.SIZES["tiny"].encode_repeats
    assert by[(bits, "TP")]["encode_us_per_vector"] == pytest.approx(np.median(times["TP"]))
    encoding = rules.above(rules.welch_interval(times["ITQ"], times["TP"]), 0.0)
    assert [c["verdict"] for c in res["claims"]] == [long_verdict, rules.INCONCLUSIVE, encoding]
    assert res["details"]["code_version"] == report.code_version()  # the fits record their code, as runs do
    # Paper-size counts come from geojax.tt and must equal Hong, Meng & Yuan 2018 Tables 1-2; they are
    # shown as a fact (a table), not judged.
    counts = {c["shape"]: c["tp_params"] for c in res["details"]["paper_counts"]}
    assert counts == {"4096 → 1024 bits (Table 1)": 1088, "4096 → 4096 bits (Table 2)": 1152}
    facts = dict(res["tables"])["Parameter counts (arithmetic on the shapes: a fact, not a verdict)"]
    assert "1/14,564" in facts  # 16,777,216 / 1,152


def test_seed_004_runs_and_verdicts(outputs):
    res = outputs[1]["004"]
    (dim,) = simo.SIZES["tiny"].simo_dims
    assert [r["ablation"] for r in res["runs"]] == [False, True]
    assert [r["overrides"]["dim"] for r in res["runs"]] == [dim, dim]
    # The ablation really trained with its own loss (simo_orthogonality=false is part of the recipe).
    assert res["runs"][0]["loss_trace"] != res["runs"][1]["loss_trace"]
    for r in res["runs"]:
        assert not r["diverged"] and r["steps"] == common.SCALES["tiny"].images // 128  # simo_cifar10's batch
        assert _finite(r["wall_s"]) and _finite(r["max_grad_norm"])
        rep = r["report"]
        for key in ("precision_at_1", "knn_accuracy", "linear_probe_accuracy"):
            assert 0.0 <= rep[key] <= 1.0, key
        cs = r["class_structure"]
        recalls = list(cs["per_class_1nn_recall"].values())
        assert len(recalls) == cs["classes"] == 10
        assert cs["distinguishable"] == sum(v >= simo.DISTINGUISHABLE for v in recalls)
        confusion = np.asarray(cs["confusion"])  # rows: the query's class, columns: its 1-NN's class
        np.testing.assert_allclose(np.diag(confusion) / confusion.sum(1), recalls)
        assert abs(cs["nn1"] - rep["precision_at_1"]) < 1e-6  # per-query 1-NN agrees with geojax.metrics
        assert 0.0 <= cs["mean_abs_cos_class_means"] <= 1.0
    # No SupCon control at this scale (its encoder has no batch norm): no calibration of "separates"; one
    # seed per variant: no interval of the classes lost, so no verdict on the collapse either.
    assert "control" not in res["details"]
    assert [c["verdict"] for c in res["claims"]] == [rules.INCONCLUSIVE] * 3


def test_markdown_holds_every_seed_and_claim(outputs):
    out, results = outputs
    with open(os.path.join(out, "reproduction.md"), encoding="utf-8") as f:
        text = f.read()
    for seed, res in results.items():
        assert f"## {res['title']}" in text
        assert f"`{res['command']}`" in text
        for c in res["claims"]:
            assert f"| {papers.PAPERS[seed].citation} | {c['claim']} | {c['verdict']} |" in text
    assert "Seed 0" not in text and "seed 0" not in text  # papers are cited by author and year
    assert "![reproduce_" not in text  # no plot referenced that these seeds did not write


# --------------------------------------------------------------------------------------------------------
# Records, statistics, rendering and plots (no training).
# --------------------------------------------------------------------------------------------------------


def test_scale_is_built_with_keywords():
    tiny = common.SCALES["tiny"]
    assert dataclasses.replace(tiny, images=7).images == 7
    with pytest.raises(TypeError):
        common.Scale(*dataclasses.astuple(tiny))  # positionals are refused


def test_scale_record_holds_every_papers_sizes_in_the_recorded_order():
    """The result JSON's scale: the shared sizes and each paper's own (its module's SIZES), in the order every
    result written so far has them; a size named twice is refused."""
    for name, scale in common.SCALES.items():
        record = scale_record(scale)
        assert list(record) == list(records.SIZE_ORDER), name
        assert record["atlas_seeds"] == atlas.SIZES[name].atlas_seeds and record["seeds"] == scale.seeds
        # the gpu scale's share of epochs of each paper that trains (its module's PAPER), as results hold them
        shares = {"000": 1 / 25, "001": 1 / 75, "003": 1 / 100, "004": 1 / 16} if name == "gpu" else None
        assert record["fractions"] == shares, name
    with pytest.raises(ValueError, match="named twice"):
        records.scale_record(common.SCALES["tiny"], [simo.SIZES["tiny"], simo.SIZES["tiny"]], None)


def test_claim_and_run_records():
    kw = dict(claim="c", ours="o", paper="p", source="s", rule="r")
    assert records.Claim(**kw, verdict=rules.HOLDS).to_json() == {**kw, "verdict": rules.HOLDS}
    assert not records.Claim(**kw, verdict=rules.INCONCLUSIVE).holds
    trained = records.Run(
        name="a", overrides={"preset": "simo"}, seed=0, steps=3, epochs=0.5, report={"precision_at_1": 0.5}
    )
    trained.report["recall_at_k"] = {"1": 0.25}
    trained.extra["ablation"] = True
    row = trained.to_json()
    assert "error" not in row and row["report"]["precision_at_1"] == 0.5 and row["ablation"] is True
    assert trained.metric("precision_at_1") == 0.5 and trained.metric("recall_at_1") == 0.25
    diverged = records.Run(
        name="b", overrides={}, seed=1, steps=3, epochs=0.5, diverged=True, error="nan loss"
    )
    row = diverged.to_json()
    assert "report" not in row and row["error"] == "nan loss" and row["diverged"] is True
    assert math.isnan(diverged.metric("precision_at_1"))
    back = records.Run.from_json(trained.to_json())
    assert back == trained and back.extra == {"ablation": True}
    legacy = {k: v for k, v in diverged.to_json().items() if k not in ("epochs", "code_version")}
    assert math.isnan(records.Run.from_json(legacy).epochs)  # made before runs recorded their epochs


def test_stale_runs_are_those_of_other_or_unknown_code():
    current = {"code_hash": "a" * 64, "commit": "1" * 40, "dirty": False}
    runs = [
        records.Run(name="now", overrides={}, seed=0, steps=1, epochs=1.0, code_version=current),
        records.Run(
            name="old", overrides={}, seed=0, steps=1, epochs=1.0, code_version={"code_hash": "b" * 64}
        ),
        records.Run(name="unknown", overrides={}, seed=0, steps=1, epochs=1.0),
    ]
    assert [r.stale(current) for r in runs] == [False, True, True]
    text = render.stale_runs({"runs": [r.to_json() for r in runs]}, current)
    assert "2 of 3 runs" in text and "unknown: unknown" in text and "code bbbbbbbbbbbb: old" in text
    assert "now" not in text.replace("known", "")
    assert render.stale_runs({"runs": [runs[0].to_json()]}, current) == ""
    # Hong, Meng & Yuan 2018 trains nothing: its fits record the code version, as runs do.
    fits = {"seed": "002", "runs": [], "details": {"code_version": current}}
    assert render.stale_runs(fits, current) == "" and render.stale_fits(fits, current) == ""
    older = {**fits, "details": {"code_version": {"code_hash": "b" * 64}}}
    assert "fits were made by code bbbbbbbbbbbb" in render.stale_fits(older, current)
    assert "recorded no code version" in render.stale_fits({**fits, "details": {}}, current)
    assert render.stale_fits({"seed": "000", "runs": [], "details": {}}, current) == ""  # a paper of runs


def test_code_hash_follows_the_code_files(tmp_path):
    for d in ("geojax", "train", "train/reproduce"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "geojax" / "a.py").write_text("x = 1\n")
    (tmp_path / "train" / "b.py").write_text("y = 2\n")
    (tmp_path / "train" / "reproduce" / "c.py").write_text("z = 3\n")
    before = version.code_hash(tmp_path)
    (tmp_path / "train" / "reproduce" / "c.py").write_text("z = 4\n")  # the analyses: not the runs' code
    (tmp_path / "README.md").write_text("docs\n")
    assert version.code_hash(tmp_path) == before
    (tmp_path / "geojax" / "search").mkdir()
    (tmp_path / "geojax" / "search" / "s.py").write_text("w = 5\n")  # no run's report depends on search
    (tmp_path / "geojax" / "a.py").write_text('"""A module."""\n\nx = 1  # the one\n')  # documentation only
    assert version.code_hash(tmp_path) == before
    (tmp_path / "train" / "b.py").write_text("def g(a: int) -> int:\n    return a\ny = 2\n")
    before = version.code_hash(tmp_path)
    (tmp_path / "train" / "b.py").write_text("def g(a: float):\n    return a\n\n\ny = 2\n")  # type hints
    assert version.code_hash(tmp_path) == before
    (tmp_path / "train" / "b.py").write_text("import os\ny = 2\n")  # g moved to another file: same code
    (tmp_path / "train" / "g.py").write_text("def g(a):\n    return a\n")
    assert version.code_hash(tmp_path) == before
    (tmp_path / "train" / "g.py").write_text("def g(a):\n    return a\n\n\ng.__doc__ = 'From elsewhere.'\n")
    assert version.code_hash(tmp_path) == before  # documentation by reference
    checked = "import typing\nif typing.TYPE_CHECKING:\n    from os import PathLike\n"
    (tmp_path / "train" / "b.py").write_text(checked + "y = 2\n")  # imports for the type checker alone
    assert version.code_hash(tmp_path) == before
    (tmp_path / "train" / "b.py").write_text(checked + "    y = 3\ny = 2\n")  # … but a statement under it
    assert version.code_hash(tmp_path) != before
    (tmp_path / "train" / "b.py").write_text(checked + "else:\n    y = 3\ny = 2\n")
    assert version.code_hash(tmp_path) != before
    (tmp_path / "train" / "b.py").write_text("import os\ny = 2\n")
    (tmp_path / "geojax" / "a.py").write_text("x = 2\n")
    assert version.code_hash(tmp_path) != before
    assert set(report.code_version()) == {"code_hash", "commit", "dirty"}
    # one record: the benchmarks' results files carry the runs' own code version
    assert results.machine_info()["code_version"] == report.code_version() == version.code_version()
    assert "commit" not in results.machine_info()


def test_mean_sd_and_bootstrap():
    assert rules.mean_sd([]) == "–" and rules.mean_sd([math.nan]) == "–"
    assert rules.mean_sd([0.5, math.nan]) == "50.0"
    # The sample sd (ddof 1): √(Σ(x − x̄)² / (n − 1)) = √(2 × 0.05² / 1) = 0.0707 → 7.1 (np.std: 5.0).
    assert rules.mean_sd([0.9, 0.8]) == "85.0 ± 7.1"
    assert rules.mean_sd([0.1, 0.2, 0.6]) == "30.0 ± 26.5"  # √((0.04 + 0.01 + 0.09) / 2) = 0.2646
    assert math.isnan(rules.mean([math.nan])) and rules.mean([1.0, math.nan, 3.0]) == 2.0
    ones, zeros = np.ones(40), np.zeros(40)
    assert rules.bootstrap_diff(ones, zeros, n=20) == (1.0, 1.0, 1.0)
    rng = np.random.default_rng(0)
    a, b = (rng.random(200) < 0.7).astype(float), (rng.random(200) < 0.5).astype(float)
    diff, lo, hi = rules.bootstrap_diff(a, b, n=500)
    assert diff == pytest.approx(a.mean() - b.mean())
    # The resampled differences of paired 0/1 outcomes: the CI is near diff ± 1.96 × its standard error.
    se = np.std(a - b) / np.sqrt(len(a))
    assert lo < diff < hi and abs(hi - lo - 2 * 1.96 * se) < 0.3 * (2 * 1.96 * se)


def test_t_interval_against_the_t_table():
    # Student-t 97.5% quantiles from a printed table: 1 df 12.706, 2 df 4.303, 4 df 2.776.
    for values, q in (([0.1, 0.3], 12.706), ([0.0, 0.02, -0.01], 4.303), ([1.0, 2.0, 4.0, 8.0, 16.0], 2.776)):
        v = np.asarray(values)
        half = q * np.sqrt(((v - v.mean()) ** 2).sum() / (len(v) - 1)) / np.sqrt(len(v))
        m, lo, hi = rules.t_interval([*values, math.nan])  # NaN (a diverged run) is left out
        assert m == pytest.approx(v.mean())
        assert (lo, hi) == pytest.approx((v.mean() - half, v.mean() + half), rel=1e-3)
    m, lo, hi = rules.t_interval([0.5])  # one value: no spread, no interval
    assert m == 0.5 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(x) for x in rules.t_interval([math.nan]))


def test_data_tag_and_file_names():
    assert common.data_tag("digits") == ""
    assert common.data_tag("npz:../shared/data/mnist_t10k.npz") == "mnist_t10k"
    assert common.data_tag("npz:my data.v2.npz") == "my_data_v2"
    assert common.data_tag("tfds:fashion_mnist") == common.data_tag("fashion_mnist") == "fashion_mnist"
    assert common.data_tag("idx:/usr/share/datasets/fashion-mnist/") == "fashion_mnist"
    ctx = dataclasses.replace(
        common.Context(scale=common.SCALES["tiny"], data="digits", dataset=None, runs_dir="", out=""), tag="m"
    )
    assert ctx.file("reproduce_000", "json") == "reproduce_000_m.json"
    assert dataclasses.replace(ctx, tag="").file("reproduce_000", "json") == "reproduce_000.json"


def test_compilation_cache_is_set_then_restored(tmp_path):
    def settings():
        return jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs

    before = settings()
    with _compilation_cache(str(tmp_path)):
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        jax.jit(lambda x: x * 3.0 + 1.0)(np.ones(5, np.float32)).block_until_ready()
        assert os.listdir(tmp_path)  # the compiled program was written
    assert settings() == before


def _toy_run(tmp_path, name, p1, seed=0):
    """A finished run of one fixed P@1 with its run directory's report.json (what run_analysis ties its
    stored analyses to)."""
    rep = {"precision_at_1": p1, "knn_accuracy": p1, "linear_probe_accuracy": p1}
    (tmp_path / name).mkdir()
    (tmp_path / name / "report.json").write_text(json.dumps(rep), encoding="utf-8")
    return records.Run(
        name=name, overrides={}, seed=seed, steps=1, epochs=1.0, report=rep, workdir=str(tmp_path / name)
    )


def _toy_embeddings():
    """Unit vectors of 3 classes (0 and 1 close, 2 apart): 60 training, 30 test rows, ranked by cosine."""
    rng = np.random.default_rng(3)
    centres = np.array([[1.0, 0.0, 0.0, 0.0], [0.9, 0.45, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])

    def rows(labels):
        x = centres[labels] + 0.35 * rng.normal(size=(len(labels), 4))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    ref_y, query_y = np.arange(60) % 3, np.arange(30) % 3
    return {
        "geometry": "sphere",
        "similarity": "cosine",
        "query": rows(query_y),
        "query_labels": query_y,
        "reference": rows(ref_y),
        "reference_labels": ref_y,
    }


def test_per_run_analyses_are_kept_so_that_runs_without_embeddings_are_judged(tmp_path, monkeypatch):
    """Feeney & Hughes's per-query hits, Bouhsine et al.'s class structure and Stowell's quantised reports go
    through rundirs.run_analysis: computed from the embeddings once, then read back from analysis.json by a
    run committed without them, with the same numbers."""
    emb = _toy_embeddings()
    nearest = rules.nearest_labels(emb["query"], emb["reference"], emb["reference_labels"], "cosine")
    hits = (nearest == emb["query_labels"]).astype(float)
    p1 = float(hits.mean())
    assert 0.5 < p1 < 1.0  # classes 0 and 1 are confused now and then

    runs = {label: _toy_run(tmp_path, f"sim{i}", p1) for i, label in enumerate(similarities.VARIANTS)}
    first = similarities.analyse({k: [(r, emb)] for k, r in runs.items()}, bootstrap=20)
    again = similarities.analyse({k: [(r, None)] for k, r in runs.items()}, bootstrap=20)
    assert first == again and first["accuracy"]["SupCon, cosine"]["1nn"] == [p1]
    assert runs["SupCon, cosine"].extra["nn1_check"] == pytest.approx(0.0)
    packed = similarities.nn1_hits(emb)
    np.testing.assert_array_equal(similarities.unpack_hits(packed), hits)
    assert len(packed["hits"]) == 2 * ((len(hits) + 7) // 8)  # one bit per query, in hexadecimal

    full, abl, control = (_toy_run(tmp_path, n, p1) for n in ("simo", "ablation", simo.LOSS_CONTROL))
    trained = {16: {simo.FULL: [(full, emb)], simo.ABLATION: [(abl, emb)]}}
    details = simo.analyse(trained, [(control, emb)], names=["a", "b", "c"])
    trained_back = {16: {simo.FULL: [(full, None)], simo.ABLATION: [(abl, None)]}}
    assert simo.analyse(trained_back, [(control, None)], names=["a", "b", "c"]) == details
    want = np.zeros((3, 3), int)
    np.add.at(want, (emb["query_labels"], nearest), 1)
    assert details["control"]["confusion"] == want.tolist() and details["control"]["run"] == simo.LOSS_CONTROL
    assert simo.confusable_pair(want.tolist(), [0, 1, 2])[0] == (0, 1)
    assert full.extra["class_structure"]["nn1"] == pytest.approx(p1)

    calls = []

    def quantised_report(**kwargs):
        calls.append(kwargs["pq_iters"])
        return {"geometry": str(kwargs["geometry"]), "dim": 4, "rows": [{"method": "float32", "p_at_1": p1}]}

    monkeypatch.setattr(torus.evaluate, "quantised_report", quantised_report)
    seed1 = _toy_run(tmp_path, "sphere-seed1", p1, seed=1)
    rep = torus.quantise(seed1, emb, 0, pq_iters=3)
    assert rep == torus.quantise(seed1, None, 0, pq_iters=3) and calls == [3]  # read back, not recomputed
    assert (rep["run"], rep["seed"]) == ("sphere-seed1", 1)
    with pytest.raises(ValueError, match="is not stored"):  # other sizes: another analysis, not this one
        torus.quantise(seed1, None, 0, pq_iters=4)
    replica = dataclasses.replace(seed1, extra={"program": "sphere-seeds3"})  # shares seed 0's directory
    assert not torus._own_embeddings(replica) and torus._own_embeddings(seed1)


def test_nearest_labels_against_a_numpy_scan():
    rng = np.random.default_rng(1)
    query = rng.normal(size=(30, 5)).astype(np.float32)
    reference = rng.normal(size=(50, 5)).astype(np.float32)
    reference[7] = reference[3]  # a tie: the lower index wins
    query[0] = reference[3]
    labels = np.arange(50) % 7
    got = rules.nearest_labels(query, reference, labels, "neg_euclidean")
    dist = ((query[:, None, :].astype(np.float64) - reference[None, :, :]) ** 2).sum(-1)
    want = labels[[int(np.flatnonzero(row == row.min())[0]) for row in dist]]
    np.testing.assert_array_equal(got, want)
    assert got[0] == labels[3]


def test_render_cites_papers_and_escapes_cells(tmp_path):
    docs = os.path.join(os.path.dirname(__file__), os.pardir, "docs")
    with open(os.path.join(docs, "reproduce_000_fashion_mnist.json"), encoding="utf-8") as f:
        res = json.load(f)
    res["claims"][0]["rule"] = "|P@1(torusN) − P@1(sphere)| ≤ 2 pts"
    (tmp_path / "reproduce_000_fashion_mnist.json").write_text(json.dumps(res), encoding="utf-8")
    text = render.render(str(tmp_path))
    assert text.rstrip("\n") + "\n" == (tmp_path / "reproduction.md").read_text(encoding="utf-8")
    assert (
        f"| paper | claim | {res['data']['name']}, {res['scale']['name']} |" in text
        and f"## {res['title']}" in text
    )
    for c in res["claims"]:
        assert f"| Stowell 2026 | {c['claim']} | {c['verdict']}" in text
    assert "\\|P@1(torusN) − P@1(sphere)\\| ≤ 2 pts" in text  # a '|' inside a cell is escaped
    # the recipe table: one row per paper on the page, its deviations stated once
    assert text.count("| Stowell 2026 | best epoch on 10 % held out of training") == 1
    assert "| Korman 2021 | no clipping" not in text  # not on this page
    for title, table in res["tables"]:
        assert f"### {title}\n\n{table.rstrip()}\n" in text


def test_render_puts_data_sets_side_by_side(tmp_path):
    def result(seed, tag, name, verdicts, finished, walls):
        claims = [
            {"claim": f"c{i}", "ours": "o", "paper": "p", "source": "s", "rule": "r", "verdict": v}
            for i, v in enumerate(verdicts)
        ]
        data = {"name": name, "tag": tag, "train": 8, "test": 2, "classes": 2, "image_shape": [2, 2, 1]}
        runs = [
            {"name": f"r{i}", "overrides": {}, "seed": 0, "steps": 1, "wall_s": w}
            for i, w in enumerate(walls)
        ]
        scale = {"name": "full", "steps": 5, "width": 4, "batch": 2}
        return {
            "seed": seed, "title": f"T{seed}", "command": f"cmd {tag}", "claims": claims, "tables": [],
            "data": data, "scale": scale, "training_seeds": [0], "runs": runs,
            "wall_s": 90.0,
            "device": "cpu", "finished": f"2026-01-01 {finished} UTC",
        }  # fmt: skip

    files = {
        "reproduce_001.json": result("001", "", "digits", [rules.HOLDS, rules.FAILS], "00:01:30", [1, 2]),
        "reproduce_001_m.json": result("001", "m", "npz:m.npz", [rules.FAILS], "00:02:00", [4]),
        "reproduce_004_m.json": result("004", "m", "npz:m.npz", [rules.HOLDS], "00:04:30", [6]),
    }
    for name, res in files.items():
        (tmp_path / name).write_text(json.dumps(res), encoding="utf-8")
    text = render.render(str(tmp_path))
    assert "| paper | claim | digits, full | npz:m.npz, full |" in text
    stale = " (stale: unknown)"  # the runs recorded no code version
    assert f"| Korman 2021 | c0 | {rules.HOLDS}{stale} | {rules.FAILS}{stale} |" in text
    assert f"| Korman 2021 | c1 | {rules.FAILS}{stale} | – |" in text
    assert f"| Bouhsine et al. 2024 | c0 | – | {rules.HOLDS}{stale} |" in text
    digits, npz = text.index("## Data: digits, full"), text.index("## Data: npz:m.npz, full")
    assert digits < npz and "2 training runs, 3 s (0.1 min) summed over the runs" in text[:npz]
    assert "2 training runs, 10 s (0.2 min) summed over the runs" in text[npz:]
    assert "`cmd `" in text[digits:npz] and "`cmd m`" in text[npz:]
    assert "**Stale runs**: all 2 runs of this section" in text[digits:npz]  # no code version recorded
    assert "sample standard deviation (ddof = 1)" in text
    assert text.count("Sizes (scale full") == 2  # one line per data set: its papers share their sizes
    files["reproduce_004_m.json"]["scale"] = {"name": "full", "steps": 7}
    (tmp_path / "reproduce_004_m.json").write_text(
        json.dumps(files["reproduce_004_m.json"]), encoding="utf-8"
    )
    text = render.render(str(tmp_path))
    npz = text.index("## Data: npz:m.npz, full")
    assert (
        "each paper's section gives its own" in text[npz:]
        and "Sizes (scale full" not in text[npz : npz + 400]
    )
    assert "steps 5, width 4" in text[npz:] and "steps 7." in text[npz:]


def test_a_page_over_stale_runs_prints_no_bare_verdict(tmp_path):
    """Korman 2021's gpu page with its runs trained by code that no same-results record links to the current
    code (e59f3b0c… here, as its MSimCLR runs were): every verdict over them, in the summary and in the
    section, names that code."""
    docs = os.path.join(os.path.dirname(__file__), os.pardir, "docs")
    with open(os.path.join(docs, "reproduce_001_fashion_mnist_gpu.json"), encoding="utf-8") as f:
        res = json.load(f)
    old = {"code_hash": "e59f3b0c" + "0" * 56, "commit": None}
    for r in res["runs"]:
        r["code_version"] = old
    res["claims"][0]["verdict"] = rules.HOLDS
    (tmp_path / "reproduce_001_fashion_mnist_gpu.json").write_text(json.dumps(res), encoding="utf-8")
    text = render.render(str(tmp_path))
    claim = res["claims"][0]["claim"]
    assert f"| Korman 2021 | {claim} | holds (stale: code e59f3b0c) |" in text
    assert "| **holds** (stale: code e59f3b0c) |" in text
    for verdict in rules.VERDICTS:
        assert f"| {verdict} |" not in text and f"| **{verdict}** |" not in text
    # Runs of the current code, or of code checked to give the same results, print their verdict bare.
    current = report.code_version()
    for r in res["runs"]:
        r["code_version"] = current
    (tmp_path / "reproduce_001_fashion_mnist_gpu.json").write_text(json.dumps(res), encoding="utf-8")
    text = render.render(str(tmp_path))
    assert f"| Korman 2021 | {claim} | holds |" in text and "| holds (stale" not in text


def test_stale_codes_follow_a_claims_own_runs(monkeypatch):
    current = {"code_hash": "a" * 64}
    old = {"code_hash": "b" * 64}
    runs = [
        {"name": "torus_c-D2-clip100-seed0", "code_version": old},
        {"name": "sphere-D16-seed0", "code_version": current},
    ]
    res = {"seed": "000", "runs": [dict(r, overrides={}, seed=0, steps=1, epochs=1.0) for r in runs]}
    assert render.stale_codes(res, "torusN ≈ sphere (P@1)", current) == []  # its arms: the sphere's runs
    assert render.stale_codes(res, "clipping helps to stabilise torusC at low D", current) == [
        "code bbbbbbbb"
    ]
    assert render.stale_codes(res, "a claim without arms", current) == ["code bbbbbbbb"]  # every run
    assert (
        render.verdict_cell(rules.HOLDS, ["code bbbbbbbb"], bold=True) == "**holds** (stale: code bbbbbbbb)"
    )


def test_runs_table_marks_divergence():
    runs = [
        records.Run(
            name="ok",
            overrides={},
            seed=0,
            steps=5,
            epochs=1.0,
            report={"precision_at_1": 0.875},
            wall_s=1.25,
        ),
        records.Run(name="bad", overrides={}, seed=1, steps=5, epochs=1.0, diverged=True, error="nan"),
    ]
    lines = tables.runs_table(runs).splitlines()
    assert lines[0].startswith("| run | seed | steps | epochs | P@1 |") and lines[1].startswith("|:---|---:|")
    assert lines[2] == "| ok | 0 | 5 | 1 | 0.8750 | – | – | – | – | – | 1.2 |"
    assert lines[3].startswith("| bad (DIVERGED) | 1 | 5 | 1 | – |")
    assert len(lines) == 4  # no report with the raw-pixel baseline: no raw-pixel row
    runs[0].report["baseline_raw_1nn"] = {"precision_at_1": 0.85, "knn_accuracy": 0.86}
    last = tables.runs_table(runs).splitlines()[-1]
    assert last.startswith(f"| {tables.RAW} | – | 0 | – | 0.8500 | 0.8600 |")


def test_target_noise_against_a_loop_and_plots(tmp_path):
    rng = np.random.default_rng(2)
    emb = {
        "query": rng.normal(size=(12, 4)).astype(np.float32),
        "query_labels": np.arange(12) % 3,
        "reference": rng.normal(size=(20, 4)).astype(np.float32),
        "reference_labels": np.arange(20) % 3,
    }
    target, noise = plots.target_noise(emb, "cosine")
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    for i, (q, y) in enumerate(zip(unit(emb["query"]), emb["query_labels"], strict=True)):
        cos = unit(emb["reference"]) @ q
        assert target[i] == pytest.approx(cos[emb["reference_labels"] == y].max(), abs=1e-5)
        assert noise[i] == pytest.approx(cos[emb["reference_labels"] != y].max(), abs=1e-5)
    fig = plots.plot_target_noise({"a": emb, "b": emb}, str(tmp_path / "h.png"))
    assert len(fig.axes) == 4 and (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    atlas = {
        "query_coords": rng.random((30, 3, 2)).astype(np.float32),
        "query_q": rng.dirichlet(np.ones(3), size=30).astype(np.float32),
        "query_labels": np.arange(30) % 10,
    }
    fig = plots.plot_charts(atlas, str(tmp_path / "c.png"), title="t")
    assert len(fig.axes) == 4  # 3 charts on a 2 × 2 grid, the fourth panel blank
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


@pytest.mark.slow
def test_a_sweep_rerun_reads_back_finished_runs_and_resumes_the_interrupted_one(tmp_path, monkeypatch):
    from train.app import cli

    real_run = cli.run
    reference = main(["004", "--scale", "tiny", "--out", str(tmp_path / "whole")])[0]
    out = str(tmp_path / "split")
    interrupted = "simo-no-orthogonality-D8-seed0"

    def killed_midway(cfg, **kwargs):  # the second run is lost after its first step's checkpoint
        if cfg.workdir.endswith(interrupted):
            real_run(dataclasses.replace(cfg, checkpoint_every=1), stop_at=1)
            raise RuntimeError("machine lost")
        return real_run(cfg, **kwargs)

    monkeypatch.setattr(cli, "run", killed_midway)
    with pytest.raises(RuntimeError, match="machine lost"):
        main(["004", "--scale", "tiny", "--out", out])
    runs = os.path.join(out, "runs", "digits", "tiny", "004")
    assert os.path.exists(os.path.join(runs, "simo-D8-seed0", "report.json"))
    assert not os.path.exists(os.path.join(runs, interrupted, "report.json"))
    trained = []

    def recorded(cfg, **kwargs):
        trained.append(os.path.basename(cfg.workdir))
        return real_run(cfg, **kwargs)

    monkeypatch.setattr(cli, "run", recorded)
    again = main(["004", "--scale", "tiny", "--out", out])[0]
    assert trained == [interrupted]  # the finished run is read back, only the interrupted one trains
    with open(os.path.join(runs, interrupted, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f][0] == 1  # resumed after its first step
    assert [r.get("reused", False) for r in again["runs"]] == [True, False]
    assert again["claims"] == reference["claims"] and again["details"] == reference["details"]
    # Both runs record the code they were trained with: the current code, so none is stale.
    assert [r["code_version"] for r in again["runs"]] == [report.code_version()] * 2
    assert [r["device"] for r in again["runs"]] == ["cpu"] * 2 and again["device"] == "cpu"
    assert "Stale runs" not in (tmp_path / "split" / "reproduction.md").read_text(encoding="utf-8")


def test_render_mode_rejudges_stored_results_without_training(outputs, tmp_path, monkeypatch):
    """`render` rebuilds each stored result's claims and tables from its runs and details alone: the same
    as the command that trained them made, with no training (cli.run refuses)."""
    import shutil

    from train.app import cli

    out, results = outputs
    folder = tmp_path / "stored"
    shutil.copytree(out, folder, ignore=shutil.ignore_patterns("runs"))

    def refuse(cfg, **kwargs):
        raise AssertionError("render must not train")

    monkeypatch.setattr(cli, "run", refuse)
    judged = {r["seed"]: r for r in main(["render", "--out", str(folder)])}
    assert set(judged) == set(results)
    page = (folder / "reproduction.md").read_text(encoding="utf-8")
    for key in results:
        paper = papers.PAPERS[key]
        assert (f"| {paper.citation} | {paper.recipe} |" in page) is (key != "002")
    for seed, res in results.items():
        assert judged[seed]["claims"] == res["claims"] and judged[seed]["tables"] == res["tables"], seed
        assert judged[seed]["judged"]["code_version"] == report.code_version()


def test_render_drops_the_table2_copy_older_korman_results_stored(tmp_path):
    """A Korman 2021 result stored by an older version kept a copy of Table 2 in its details (with population
    sds); `render` keeps the details the current analysis reads (and the baselines it derives from them) and
    the table shows sample sds."""
    docs = os.path.join(os.path.dirname(__file__), os.pardir, "docs")
    with open(os.path.join(docs, "reproduce_001_fashion_mnist.json"), encoding="utf-8") as f:
        res = json.load(f)
    res["details"]["table2"] = [{"charts n": 16, "ours": "68.4 ± 1.8"}]  # as the old layout stored it
    (tmp_path / "reproduce_001_fashion_mnist.json").write_text(json.dumps(res), encoding="utf-8")
    (judged,) = main(["render", "--out", str(tmp_path)])
    assert "table2" not in judged["details"]
    derived = ("baselines", "bars", "pca_recall", "triplet_recall_at_1")  # from the runs, or empty until run
    kept = {k: v for k, v in judged["details"].items() if k not in derived}
    assert kept == {k: v for k, v in res["details"].items() if k not in ("table2", *derived)}
    assert judged["details"]["baselines"][0]["value"] == np.mean(res["details"]["pca_probe"])
    acc = judged["details"]["piecewise_linear_accuracy"]["16"]
    want = f"{100 * np.mean(acc):.1f} ± {100 * np.std(acc, ddof=1):.1f}"
    assert any(f"| 16 | 90.4 ± 3.0 | 68.5 ± 2.2 | {want} |" in t for _, t in judged["tables"])


def test_rendering_again_changes_no_stored_result(tmp_path):
    """`render` is idempotent: a second pass leaves every stored result as the first made it (Stowell 2026's
    note on run states is held once)."""
    docs = os.path.join(os.path.dirname(__file__), os.pardir, "docs")
    with open(os.path.join(docs, "reproduce_000_fashion_mnist.json"), encoding="utf-8") as f:
        res = json.load(f)
    res["notes"] += [torus.RUN_STATES, torus.RUN_STATES]  # as repeated renders once left it
    (tmp_path / "reproduce_000_fashion_mnist.json").write_text(json.dumps(res), encoding="utf-8")
    (first,) = main(["render", "--out", str(tmp_path)])
    (second,) = main(["render", "--out", str(tmp_path)])
    assert first["notes"].count(torus.RUN_STATES) == 1
    assert {k: v for k, v in first.items() if k != "judged"} == {
        k: v for k, v in second.items() if k != "judged"
    }


def test_run_length_is_the_recipes_epochs_or_the_scales_share():
    cfg = config.make(preset="msimclr_mnist", dataset="digits")  # 100 epochs of batch 128
    assert common.run_steps(cfg, 60_000, None) == 100 * (60_000 // 128)
    assert common.run_steps(cfg, 60_000, 480_000) == 480_000 // 128  # 8 of the 100 epochs
    assert common.run_steps(cfg, 1_347, 480_000) == 100 * (1_347 // 128)  # the recipe's epochs come first
    assert common.run_steps(cfg, 60_000, 10) == 1  # at least one step
    steps_only = config.make(preset="supcon")  # a recipe given in steps
    assert common.run_steps(steps_only, 60_000, None) == steps_only.steps


def test_run_keys_set_the_scales_encoder_and_length():
    ds = data_lib.load("digits")

    def keys(scale, **overrides):
        ctx = common.Context(scale=common.SCALES[scale], data="digits", dataset=ds, runs_dir="", out="")
        return common.run_keys(ctx, overrides)

    cpu = keys("cpu", preset="simo_cifar10")  # the recipe's ResNet-18 in bf16 becomes the small CNN
    assert (cpu["encoder"], cpu["width"], cpu["norm"], cpu["precision"]) == ("cnn", None, "batch", "fp32")
    assert cpu["steps"] == 12 * (len(ds.train_y) // 128) and cpu["probe_epochs"] == 10  # the cpu recipe's 12
    built = config.from_args(
        common.run_args(
            common.Context(scale=common.SCALES["cpu"], data="digits", dataset=ds, runs_dir="r", out=""),
            "x",
            {"preset": "simo_cifar10"},
        )
    )
    assert (built.encoder, built.width, built.norm, built.precision) == ("cnn", None, "batch", "fp32")
    quick = keys("quick", preset="simo_cifar10")
    assert (quick["encoder"], quick["width"], "norm" in quick) == ("mlp", 128, False)
    paper = keys("paper", preset="simo_cifar10")
    assert paper["encoder"] == "resnet18" and "width" not in paper and "precision" not in paper
    assert "probe_epochs" not in paper  # the recipe's one epoch
    assert keys("paper", preset="sincere_cifar10")["encoder"] == "resnet50"  # the recipe's own network
    assert "probe_epochs" not in keys("cpu", preset="supcon_cifar10")  # no probe: the key is not used
    assert keys("paper", preset="mtriplet")["encoder"] == "resnet18"  # the stand-in for GoogLeNet


def test_cpu_scale_trains_supervised_arms_with_its_recipe_and_keeps_what_the_claims_compare():
    """At the cpu scale every supervised run trains with the scale's recipe at its own length (12 epochs, no
    image cap), keeping its paper's objective; a self-supervised run keeps its own recipe (two views, Adam
    1e-4, the scale's share of images); a class-composed batch keeps its size; a run of its own length keeps
    it."""
    ds = data_lib.load("digits")
    ctx = common.Context(scale=common.SCALES["cpu"], data="digits", dataset=ds, runs_dir="r", out="")

    def built(**overrides):
        return config.from_args(common.run_args(ctx, "x", overrides))

    n = len(ds.train_y)
    sphere = built(preset="supcon_sphere_cifar100")
    assert (sphere.optimizer, sphere.lr, sphere.views, sphere.augment, sphere.encoder) == (
        "adamw",
        1e-3,
        1,
        "crop_flip",
        "cnn",
    )
    assert sphere.steps == 12 * (n // 256) and not sphere.select_best and sphere.ema is None
    assert (sphere.loss, sphere.koleo, sphere.temperature, sphere.clip) == ("supcon", 1.0, 0.1, 100.0)
    sincere = built(preset="sincere_cifar10", similarity="neg_arc_length")
    assert (sincere.loss, sincere.similarity, sincere.temperature, sincere.dim) == (
        "sincere",
        "neg_arc_length",
        0.1,
        128,
    )
    assert sincere.optimizer == "adamw" and sincere.batch_size == 256
    triplet = built(preset="mtriplet")  # 8 classes × 4: the sampler's batch
    assert (triplet.batch_size, triplet.sampler, triplet.optimizer) == (32, "m_per_class", "adamw")
    msimclr = built(preset="msimclr_mnist", charts=16)  # self-supervised: its own recipe
    assert (msimclr.optimizer, msimclr.lr, msimclr.views, msimclr.augment) == (
        "adam",
        1e-4,
        2,
        "crop_jitter_gray",
    )
    assert msimclr.steps == min(100 * (n // 128), common.CPU_IMAGES // 128)
    short = built(preset="supcon_torus_c_cifar100", dim=2, steps=30)
    assert short.steps == 30 and short.optimizer == "adamw"


def test_run_length_counts_epochs_on_the_images_left_after_the_validation_split():
    """A select_best recipe trains on the training split less its held-out validation images: the sweep's
    steps are the recipe's epochs over those (as the training loop resolves them), not over the split."""
    ds = data_lib.load("digits")
    ctx = common.Context(scale=common.SCALES["paper"], data="digits", dataset=ds, runs_dir="", out="")
    recipe = {"preset": "supcon_sphere_cifar100", "batch_size": 32}
    cfg = config.make(**recipe, dataset="digits")
    assert cfg.select_best and cfg.val_fraction == 0.1 and cfg.epochs == 100
    rest = len(data_lib.hold_out(ds, 0.1)[0].train_y)  # the loop's own split
    assert rest // 32 < len(ds.train_y) // 32  # fewer steps per epoch than the whole split gives
    assert common.training_images(cfg, ds) == rest
    assert common.run_keys(ctx, recipe)["steps"] == 100 * (rest // 32)
    plain = config.make(preset="msimclr_mnist", dataset="digits")
    assert common.training_images(plain, ds) == len(ds.train_y)


def test_paper_scale_runs_each_papers_recipe_with_its_own_network(tmp_path, monkeypatch):
    """Every run of the paper scale is a valid config: the recipe's network (ResNet-18, Feeney & Hughes's
    ResNet-50; ResNet-18 for MTriplet's GoogLeNet), the recipe's length, 10 steps per call (the runs are
    recorded, not trained: each is reported as diverged, which the analyses must also survive)."""
    from train.app import cli
    from train.reproduce.__main__ import run_paper

    asked = []

    def record(cfg, **kwargs):
        asked.append(cfg)
        raise FloatingPointError("recorded, not trained")

    monkeypatch.setattr(cli, "run", record)
    scale = common.SCALES["paper"]
    for key in ("000", "001", "003", "004"):
        res = run_paper(key, scale=scale, data_spec="digits", out=str(tmp_path), command="c")
        assert res["claims"] and all(r["diverged"] for r in res["runs"])
    assert {c.steps_per_call for c in asked} == {10}
    by_preset = {c.preset: c for c in asked}
    assert {p: c.encoder for p, c in by_preset.items() if c.encoder != "resnet18"} == {
        "supcon_cifar10": "resnet50",
        "sincere_cifar10": "resnet50",
    }
    assert set(by_preset) >= {"supcon_sphere_cifar100", "msimclr_mnist", "mtriplet", "sincere_cifar10"}
    n_train = len(data_lib.load("digits").train_y)
    msimclr = by_preset["msimclr_mnist"]  # Korman 2021 A.1: 100 epochs of batch 128
    assert msimclr.steps == 100 * (n_train // 128) and msimclr.probe_epochs == 20
    msimclr_charts = {c.charts for c in asked if c.preset == "msimclr_mnist" and c.geometry == "atlas"}
    assert sorted(msimclr_charts) == [1, 4, 16, 32]
    simclr = [c for c in asked if c.preset == "msimclr_mnist" and c.geometry == "euclidean"]
    # Korman's f: X → R^d, each seed its own program (stacked seeds ran slower per seed on an H100)
    assert [(c.seed, c.seeds, c.head, c.projection) for c in simclr] == [
        (s, 1, "linear", "mlp") for s in range(3)
    ]
    assert by_preset["simo_cifar10"].probe_epochs == 1  # Bouhsine et al. 2024: one probe epoch


@pytest.mark.slow
def test_seeds_as_one_program_equal_seeds_one_by_one(tmp_path):
    """A scale that trains replicas gives each seed the record its own run directory would give (the same
    metrics; seed 0's embeddings), from one several-seeds program."""
    ds = data_lib.load("digits")

    def trained(replicas):
        scale = dataclasses.replace(common.SCALES["tiny"], replicas=replicas)
        runs_dir = str(tmp_path / str(replicas))
        ctx = common.Context(scale=scale, data="digits", dataset=ds, runs_dir=runs_dir, out=str(tmp_path))
        return ctx, rundirs.train_seeds(ctx, "simo", 2, preset="simo_cifar10")

    ctx_apart, apart = trained(False)
    t0 = time.time()
    ctx_one, one = trained(True)
    elapsed = time.time() - t0
    assert os.listdir(tmp_path / "True") == ["simo-seeds2"] and len(os.listdir(tmp_path / "False")) == 2
    assert [r.name for r in ctx_one.runs] == [r.name for r in ctx_apart.runs] == ["simo-seed0", "simo-seed1"]
    for (a, _), (b, _) in zip(apart, one, strict=True):
        assert a.seed == b.seed and b.extra["program"] == "simo-seeds2"
        assert b.wall_s == one[0][0].wall_s  # equal shares of the program's wall time …
        for key in ("precision_at_1", "knn_accuracy", "linear_probe_accuracy"):
            assert b.metric(key) == pytest.approx(a.metric(key), abs=2 / len(ds.test_y)), key
    assert sum(r.wall_s for r, _ in one) <= elapsed + 0.05  # … which sum to it, not to twice it
    assert one[1][1] is None
    np.testing.assert_allclose(one[0][1]["query"], apart[0][1]["query"], atol=1e-4)


def test_recipe_trials_are_read_back_with_their_changes_and_end_the_notes_of_an_untestable_claim(tmp_path):
    runs_dir = tmp_path / "runs" / "fashion_mnist" / "cpu" / "004"

    def trial(name: str, p1: float, **changes) -> None:
        folder = runs_dir / rundirs.TRIALS / name
        folder.mkdir(parents=True)
        cfg = {"lr": 0.001, "sampler": "class_subsampled", "steps": 1404, "workdir": str(folder), **changes}
        (folder / "config.json").write_text(json.dumps(cfg))
        rep = {"precision_at_1": p1, "baseline_raw_1nn": {"precision_at_1": 0.85}}
        (folder / "report.json").write_text(json.dumps(rep))

    assert rundirs.recipe_trials(str(runs_dir)) == []
    trial("random", 0.23, sampler="random")
    with pytest.raises(ValueError, match="no 'base' run"):
        rundirs.recipe_trials(str(runs_dir))
    trial("base", 0.70)
    trial("sphere", 0.881, geometry="sphere")  # 88.1 ≥ 85.0 + 3: worth having
    trial("b64", 0.75, batch_size=64, steps=2808)
    found = rundirs.recipe_trials(str(runs_dir))
    assert [t["name"] for t in found] == ["base", "b64", "random", "sphere"]  # the sweep's recipe first
    assert found[0]["changes"] == {} and found[1]["changes"] == {"batch_size": 64, "steps": 2808}
    note = rules.trials_note(found)
    assert note.startswith(rules.TRIALS_NOTE) and "(1,404/2,808 steps; P@1, raw pixels 85.0)" in note
    assert "the sweep's recipe (1,404 steps): 70.0; batch_size=64 (2,808 steps): 75.0" in note
    assert "geometry=sphere (1,404 steps): 88.1. 1 of 4 reached raw-pixel 1-NN + 3 points" in note
    # gated: a claim whose runs are short of the bar is not testable, and the notes end with the scale's
    # recipes and then these trials, once however often it is judged; a testable claim's notes have neither.
    claim = records.Claim(
        claim="SimO separates the classes, but for one confusable pair (D=16)",
        ours="x",
        paper="y",
        source="§5",
        rule="r",
        verdict=rules.HOLDS,
    )
    run = records.Run(name="simo-D16-seed0", overrides={}, seed=0, steps=1, epochs=1.0)
    notes, details = ["own note"], {"recipe_trials": found}
    for p1, verdict, ends in ((0.70, rules.NOT_TESTABLE, 2), (0.90, rules.HOLDS, 0)):
        run.report = {"precision_at_1": p1, "baseline_raw_1nn": {"precision_at_1": 0.85}}
        for _ in range(2):
            (out,) = gated("004", [claim], [run], 10, notes, details)
        assert out.verdict == verdict
        assert notes == ["own note", rules.RECIPES_TRIED, note][: 1 + ends]


def test_render_lists_recipe_trials_for_results_of_the_current_recipe_alone(outputs, tmp_path, monkeypatch):
    import shutil

    # SimO's class separation at the tiny scale's D rests on its runs, none clearing a bar of 100 points
    claim = "SimO separates the classes, but for one confusable pair (D=8)"
    monkeypatch.setitem(simo.ARMS, claim, rules.Arms(("simo-D8-seed*",)))
    monkeypatch.setattr(rules, "ABOVE_BASELINE", 1.0)

    out, _ = outputs
    folder = tmp_path / "stored"
    shutil.copytree(out, folder, ignore=shutil.ignore_patterns("runs"))
    for name, p1, lr in (("base", 0.30, 0.001), ("lr", 0.35, 0.0003)):
        trial = folder / "runs" / "digits" / "tiny" / "004" / rundirs.TRIALS / name
        trial.mkdir(parents=True)
        (trial / "config.json").write_text(json.dumps({"lr": lr, "steps": 20}))
        (trial / "report.json").write_text(
            json.dumps({"precision_at_1": p1, "baseline_raw_1nn": {"precision_at_1": 0.9}})
        )
    judged = {r["seed"]: r for r in main(["render", "--out", str(folder)])}["004"]
    assert [t["name"] for t in judged["details"]["recipe_trials"]] == ["base", "lr"]
    assert [c["verdict"] for c in judged["claims"] if c["claim"] == claim] == [rules.NOT_TESTABLE]
    assert judged["notes"][-1] == rules.trials_note(judged["details"]["recipe_trials"])
    # A result stored before the scale recorded its recipe was trained on an earlier one: no trials.
    path = folder / "reproduce_004_tiny.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    del stored["scale"]["recipe"]
    path.write_text(json.dumps(stored), encoding="utf-8")
    again = {r["seed"]: r for r in main(["render", "--out", str(folder)])}["004"]
    assert "recipe_trials" not in again["details"]
    assert not [n for n in again["notes"] if n.startswith(rules.TRIALS_NOTE)]


def test_simo_tuned_note_states_the_chosen_weight_beside_the_bar():
    """The tuning's line names the weight of the best validation P@1 (not the best test P@1) and how far its
    test P@1 falls from raw-pixel 1-NN + ABOVE_BASELINE; nothing before a tuning run or a report exists."""
    run = records.Run(name="simo-D16-seed0", overrides={}, seed=0, steps=1, epochs=1.0)
    run.report = {"precision_at_1": 0.7, "baseline_raw_1nn": {"precision_at_1": 0.85}}
    tuning = [
        {"weight": 0.1, "val_p_at_1": 0.66, "p_at_1": 0.65, "epoch": 12},
        {"weight": 1.0, "val_p_at_1": 0.63, "p_at_1": 0.70, "epoch": 12},
    ]
    note = simo.tuned_note(tuning, [run])
    assert note.startswith(simo.TUNED_NOTE + ", 0.1, reached a test P@1 of 65.0")
    assert "23.0 points short of raw-pixel 1-NN + 3 points" in note
    tuning[0]["p_at_1"] = 0.90
    assert "2.0 points above raw-pixel 1-NN + 3 points" in simo.tuned_note(tuning, [run])
    assert simo.tuned_note([], [run]) is None
    assert simo.tuned_note(tuning, [records.Run(name="x", overrides={}, seed=0, steps=1, epochs=1.0)]) is None


def test_a_page_names_the_devices_its_runs_were_trained_on_not_the_judges():
    # runs trained on a GPU and judged again on a CPU: the page's training time was spent on the GPU
    def run(name, device):
        return records.Run(name=name, overrides={}, seed=0, steps=1, epochs=1.0, device=device)

    gpu, cpu = run("a", "NVIDIA H200"), run("b", "cpu")
    assert records.trained_on([gpu, run("c", "NVIDIA H200")], "cpu") == "NVIDIA H200"
    assert records.trained_on([gpu, cpu, run("d", None)], "cpu") == "NVIDIA H200 and cpu"
    assert records.trained_on([run("e", None)], "TPU v5 lite") == "TPU v5 lite"  # diverged: none recorded
    assert records.Run.from_json(gpu.to_json()).device == "NVIDIA H200"
