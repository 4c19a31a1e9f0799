"""The training application: config errors, optimiser chain, resume equality, every preset end to end."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiers import default_tier

from train.app import checkpoint, cli, config, data, loop, optim, program, rundir
from train.app.errors import UsageError

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512)


@pytest.mark.parametrize(
    "args,match",
    [
        (["preset=nope"], "unknown preset"),
        (["bogus=1"], "unknown key"),
        (["steps=many"], "steps must be a int"),
        (["steps=0"], "steps must be a positive"),
        (["geometry=hyperbolic"], "geometry must be one of"),
        (["dim=5"], "dim must be even"),  # torus_n (the default geometry) with odd D
        (["geometry=atlas"], "manifold"),  # atlas without a projection head has no vector similarity
        (["preset=mtriplet", "loss=simo"], "simo"),
        (["geometry=sphere", "similarity=manifold"], "manifold"),
        (["geometry=atlas", "similarity=manifold", "koleo=0.1"], "koleo"),
        (["mmd=1"], "atlas"),
        (["geometry=sphere", "similarity=torus"], "torus"),
        (["class_fraction=0.6"], "class_fraction"),
        (["dataset=imagenet"], "dataset"),
        (["multihost=maybe"], "true or false"),
        (["steps_per_call=0"], "steps_per_call must be a positive"),
        (["feed=disk"], "feed must be one of"),
        (["feed=device", "parallel=pmap"], "needs parallel='shard_map'"),
        (["num_processes=2", "process_id=2"], "process_id must be in"),
        (["process_id=-1"], "process_id must be in"),
        (["coordinator=localhost"], "HOST:PORT"),
        (["steps"], "key=value"),
    ],
)
def test_bad_configs_raise_naming_the_key(args, match):
    with pytest.raises(ValueError, match=match):
        config.from_args(args)


def test_cli_help_lists_presets_and_keys_and_errors_exit_2(capsys, tmp_path):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in (
        "supcon_sphere",
        "supcon_torus_c",
        "supcon_torus_n",
        "msimclr",
        "mtriplet",
        "sincere",
        "simo",
    ):
        assert name in text
    keys = ("geometry", "loss", "clip", "parallel", "precision", "multihost", "feed")
    for key in (*keys, "steps_per_call", "coordinator", "num_processes", "process_id"):
        assert f"\n  {key} " in text
    # a key that belongs to a choice is listed under it
    assert "\n  when loss=triplet:\n    margin " in text
    assert "\n  when geometry=euclidean|sphere|torus_c|torus_n:\n    koleo " in text
    workdir = tmp_path / "never-created"
    assert cli.main(["dataset=npz:/no/such/file.npz", f"workdir={workdir}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not workdir.exists()  # a rejected run leaves nothing behind


def test_presets_apply_then_overrides_win():
    cfg = config.from_args(["preset=mtriplet", "charts=4"])
    assert (cfg.loss, cfg.similarity, cfg.sampler, cfg.margin, cfg.mmd, cfg.membership) == (
        "triplet",
        "manifold",
        "m_per_class",
        0.2,
        1.0,
        0.1,
    )
    assert cfg.charts == 4 and cfg.batch_size == 32  # 8 classes × 4
    assert config.make().geometry == "torus_n" and config.make().clip == 100.0


def test_schedules_warm_up_then_decay_or_hold():
    cos = optim.schedule(config.make(lr=0.5, warmup=10, steps=100))
    assert (
        float(cos(0)) == 0 and float(cos(5)) == pytest.approx(0.25) and float(cos(10)) == pytest.approx(0.5)
    )
    assert float(cos(55)) == pytest.approx(0.25, abs=1e-6) and float(cos(100)) == pytest.approx(0, abs=1e-7)
    const = optim.schedule(config.make(lr=0.5, warmup=10, steps=100, schedule="constant"))
    assert float(const(5)) == pytest.approx(0.25) and float(const(80)) == pytest.approx(0.5)


def test_clipping_modes_and_optimisers():
    g = {"w": jnp.asarray([3.0, -4.0, 0.1])}  # global norm ≈ 5.001
    params = {"w": jnp.zeros(3)}

    def first_update(**kw):
        tx = optim.make_optimizer(
            config.make(optimizer="sgd", momentum=0.0, lr=1.0, warmup=0, schedule="constant", **kw)
        )
        return np.asarray(tx.update(g, tx.init(params), params)[0]["w"])

    norm = np.linalg.norm(np.asarray(g["w"]))
    np.testing.assert_allclose(first_update(clip=0.5), -np.asarray(g["w"]) * 0.5 / norm, rtol=1e-6)
    np.testing.assert_allclose(first_update(clip=0.5, clip_mode="value"), [-0.5, 0.5, -0.1], rtol=1e-6)
    np.testing.assert_allclose(first_update(clip=100.0), -np.asarray(g["w"]), rtol=1e-6)
    # SGD with momentum 0.9: the second update of a constant gradient is −(1 + 0.9)·g
    tx = optim.make_optimizer(
        config.make(optimizer="sgd", momentum=0.9, lr=1.0, warmup=0, schedule="constant")
    )
    state = tx.init(params)
    _, state = tx.update(g, state, params)
    np.testing.assert_allclose(tx.update(g, state, params)[0]["w"], -1.9 * np.asarray(g["w"]), rtol=1e-6)
    big = {"w": g["w"] * 1e6}
    tx = optim.make_optimizer(config.make(optimizer="sgd", lr=1.0, warmup=0, schedule="constant", clip=None))
    np.testing.assert_allclose(
        tx.update(big, tx.init(params), params)[0]["w"], -np.asarray(big["w"]), rtol=1e-6
    )
    # PyTorch's SGD(weight_decay=l2) after clip_grad_norm_: d = clip(g) + l2·w, buf = 0.9·buf + d, w -= lr·buf
    w = {"w": jnp.asarray([1.0, 2.0, -3.0])}
    tx = optim.make_optimizer(
        config.make(optimizer="sgd", momentum=0.9, l2=0.1, lr=1.0, warmup=0, schedule="constant", clip=0.5)
    )
    state = tx.init(w)
    clipped = np.asarray(g["w"]) * 0.5 / norm
    first, state = tx.update(g, state, w)
    np.testing.assert_allclose(first["w"], -(clipped + 0.1 * np.asarray(w["w"])), rtol=1e-6)
    second = tx.update(g, state, w)[0]["w"]
    np.testing.assert_allclose(second, -1.9 * (clipped + 0.1 * np.asarray(w["w"])), rtol=1e-6)
    with pytest.raises(UsageError, match=r"l2 applies to optimizer=sgd\|rmsprop"):
        config.make(optimizer="adamw", l2=0.1)
    with pytest.raises(UsageError, match="clip_mode applies to clip=a threshold"):
        config.make(clip=None, clip_mode="value")
    for name in ("adam", "adamw", "rmsprop"):
        tx = optim.make_optimizer(config.make(optimizer=name, lr=1e-2, warmup=0, schedule="constant"))
        upd = tx.update(g, tx.init(params), params)[0]["w"]
        assert np.all(np.sign(upd) == -np.sign(np.asarray(g["w"])))


def test_interrupted_and_resumed_run_ends_with_the_same_parameters(tmp_path):
    kw = dict(TINY, steps=6, checkpoint_every=2, log_every=1, lr=1e-2)
    ref = loop.train(config.make(workdir=str(tmp_path / "a"), **kw)).state
    cfg = config.make(workdir=str(tmp_path / "b"), **kw)
    stopped = loop.train(cfg, stop_at=3).state  # killed after step 3; last checkpoint at step 2
    assert int(stopped["step"]) == 3
    resumed = loop.train(cfg).state
    assert int(resumed["step"]) == 6
    for a, b in zip(jax.tree.leaves(resumed["params"]), jax.tree.leaves(ref["params"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for a, b in zip(jax.tree.leaves(resumed["opt_state"]), jax.tree.leaves(ref["opt_state"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    with open(tmp_path / "b" / "metrics.jsonl") as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [1, 2, 3, 4, 5, 6]  # the re-done step 3 is logged once
    with pytest.raises(ValueError, match="different config"):
        loop.train(config.make(workdir=str(tmp_path / "b"), **{**kw, "lr": 0.5}))


def test_a_key_added_after_a_run_reads_its_directory_back_at_the_default(tmp_path):
    """A config.json written before a key existed (SimO's simo_orthogonality_weight) holds the run of that
    key's default, which keeps what the code computed before it; another value is another run."""
    cfg = config.make(workdir=str(tmp_path), loss="simo", steps=1)
    saved = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "simo_orthogonality_weight"}
    (tmp_path / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    assert rundir.check_workdir(cfg) == saved
    with pytest.raises(ValueError, match="simo_orthogonality_weight"):
        rundir.check_workdir(dataclasses.replace(cfg, simo_orthogonality_weight=2.0))


def test_each_process_feeds_its_own_rows_of_the_same_global_batch():
    cfg = config.make(batch_size=8, labels="instance", sampler="m_per_class", m_per_class=2)
    labels = np.repeat(np.arange(10), 5).astype(np.int32)
    images = np.arange(50, dtype=np.float32).reshape(50, 1, 1, 1) * np.ones((1, 8, 8, 1), np.float32)
    batches, tables = data.Batches.of(cfg), data.label_tables(labels)
    calls = [(3, 2), (5, 1)]  # a call of steps 3 and 4, then one of step 5

    def feed(p, count):
        return list(program.host_feed(batches, tables, images, calls, process=p, processes=count))

    whole = feed(0, 1)
    parts = [feed(p, 2) for p in (0, 1)]
    for c, (first, length) in enumerate(calls):
        assert whole[c]["x"].shape == (length, 8, 8, 8, 1) and parts[0][c]["x"].shape == (length, 4, 8, 8, 1)
        for key in ("x", "y", "pos"):  # process p holds rows p·4 … p·4 + 3 of every global batch
            np.testing.assert_array_equal(
                np.concatenate([parts[0][c][key], parts[1][c][key]], 1), whole[c][key]
            )
        for s in range(length):
            idx = np.asarray(batches.indices(tables, first + s))
            np.testing.assert_array_equal(whole[c]["x"][s, :, 0, 0, 0], idx)  # the image of row i is i
            np.testing.assert_array_equal(whole[c]["y"][s], np.arange(8))  # instance ids: global positions
            np.testing.assert_array_equal(whole[c]["pos"][s], np.arange(8))
    assert program.schedule_calls(3, 10, 3) == [(3, 3), (6, 3), (9, 1)]


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


# A well-conditioned recipe, so that another order of the same sums stays at round-off: SGD, whose update is
# linear in the gradient (Adam's g/√v amplifies round-off), and no KoLeo (1/distance gradients).
SGD4 = dict(TINY, steps=7, optimizer="sgd", lr=0.05, koleo=0.0, ema=0.5, checkpoint_every=2, devices=4)


@pytest.fixture(scope="module")
def sgd4_reference(tmp_path_factory):
    """7 single steps on 4 devices, host feed, a log line per step (shared by the tests below)."""
    workdir = str(tmp_path_factory.mktemp("sgd4_reference"))
    return loop.train(config.make(workdir=workdir, feed="host", log_every=1, **SGD4))


@pytest.mark.multidevice
def test_steps_per_call_and_either_feed_give_the_same_run(tmp_path, sgd4_reference):
    kw, ref = SGD4, sgd4_reference
    same = loop.train(config.make(workdir=str(tmp_path / "dev"), feed="device", log_every=1, **kw))
    assert (ref.timing["feed"], same.timing["feed"]) == ("host", "device")
    for a, b in zip(jax.tree.leaves(same.state), jax.tree.leaves(ref.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # the same batches, the same steps
    scan = loop.train(config.make(workdir=str(tmp_path / "k3"), steps_per_call=3, log_every=2, **kw))
    assert scan.timing["feed"] == "device"  # digits fit: held on the devices by default
    for a, b in zip(jax.tree.leaves(scan.state), jax.tree.leaves(ref.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # 3 steps per dispatch: round-off only
    # calls of steps 1–3, 4–6, 7: a log line and a checkpoint where a call crosses a multiple of 2, and at
    # the end; each line the mean of the single-step losses since the previous line
    lines, per_step = _metrics(tmp_path / "k3"), [r["loss"] for r in _metrics(ref.workdir)]
    assert [r["step"] for r in lines] == [3, 6, 7]
    for record, (lo, hi) in zip(lines, [(0, 3), (3, 6), (6, 7)], strict=True):
        assert record["loss"] == pytest.approx(np.mean(per_step[lo:hi]), rel=1e-5)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "k3" / "checkpoints"))
    assert ckpt.steps() == [6, 7]  # the two newest of 3, 6, 7
    ckpt.close()
    pmap = loop.train(config.make(workdir=str(tmp_path / "pmap"), parallel="pmap", steps_per_call=3, **kw))
    assert pmap.timing["feed"] == "host"  # pmap takes the host feed
    for a, b in zip(jax.tree.leaves(pmap.state), jax.tree.leaves(ref.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.multidevice
def test_a_run_of_several_steps_per_call_resumes_exactly(tmp_path, sgd4_reference):
    cfg = config.make(workdir=str(tmp_path), steps_per_call=4, log_every=1, **SGD4)
    # calls of 4 and 1 steps, killed after step 5: the checkpoint of step 4 (its call crossed 4) remains
    assert int(loop.train(cfg, stop_at=5).state["step"]) == 5
    resumed = loop.train(dataclasses.replace(cfg, steps_per_call=3))  # a run-only key; one call: steps 5–7
    for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(sgd4_reference.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert [r["step"] for r in _metrics(tmp_path)] == [4, 7]


def test_multi_process_settings_come_from_keys_or_jax_environment(monkeypatch):
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    started, updates = [], []
    monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append((name, value)))
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    timeouts = []

    def initialize(*args, heartbeat_timeout_seconds, shutdown_timeout_seconds):
        started.append(args)
        timeouts.append((heartbeat_timeout_seconds, shutdown_timeout_seconds))

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    loop.join_processes(config.make())  # a single-process run starts nothing
    loop.join_processes(config.make(coordinator="10.0.0.1:1234", num_processes=4, process_id=3))
    assert timeouts == [(180, 180)]  # distributed_timeout_s's default, both ways
    loop.join_processes(config.make(coordinator="10.0.0.1:1234", num_processes=4, distributed_timeout_s=7))
    assert timeouts[-1] == (7, 7) and started.pop() == ("10.0.0.1:1234", 4, None)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:99")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    loop.join_processes(config.make())
    loop.join_processes(config.make(process_id=0))  # a key wins over the environment
    assert started == [("10.0.0.1:1234", 4, 3), ("127.0.0.1:99", 2, 1), ("127.0.0.1:99", 2, 0)]
    assert set(updates) == {("jax_cpu_collectives_implementation", "gloo")}  # CPU collectives: gloo
    monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES must be a non-negative integer"):
        loop.join_processes(config.make())
    monkeypatch.delenv("JAX_COORDINATOR_ADDRESS")
    monkeypatch.delenv("JAX_NUM_PROCESSES")
    with pytest.raises(ValueError, match="coordinator"):
        loop.join_processes(config.make(num_processes=2, process_id=1))
    monkeypatch.setattr(jax.distributed, "initialize", lambda *args, **kw: started.append(("auto", *args)))
    loop.join_processes(config.make(multihost=True, process_id=None))  # the cluster's own settings
    assert started[-1] == ("auto", None, None, 1)


PRESETS = [
    "supcon_torus_n",
    "supcon_sphere",
    "supcon_torus_c",
    "supcon",
    "sincere",
    "msimclr",
    "mtriplet",
    "simo",
]


@pytest.mark.parametrize(
    "preset", default_tier(PRESETS, keep=("supcon", "supcon_sphere", "supcon_torus_c", "mtriplet", "simo"))
)
def test_every_preset_runs_on_digits_and_writes_its_outputs(preset, tmp_path):
    rep = cli.run(config.make(preset=preset, workdir=str(tmp_path), **TINY, steps=2, devices=1))
    with open(tmp_path / "report.json") as f:
        saved = json.load(f)
    assert saved["precision_at_1"] == rep["precision_at_1"] and 0 <= rep["precision_at_1"] <= 1
    base = saved["baseline_raw_1nn"]["precision_at_1"]
    assert base == pytest.approx(0.9822, abs=1e-3)  # raw-pixel 1-NN on the fixed digits split
    for key in ("knn_accuracy", "circular_variance", "timing"):
        assert key in saved
    if preset == "mtriplet":
        assert set(saved["recall_at_k"]) == {"1", "2", "4", "8"}
        assert saved["recall_at_k"]["1"] == pytest.approx(saved["precision_at_1"])  # R@1 = P@1
    assert os.path.getsize(tmp_path / "curve.png") > 0
    with np.load(tmp_path / "embeddings.npz") as z:
        geometry = str(z["geometry"])
        assert geometry == config.make(preset=preset).geometry
        assert z["query"].dtype == np.float32 and z["reference"].dtype == np.float32
        assert (
            z["query_labels"].dtype == np.int32 and z["query"].shape[0] == z["query_labels"].shape[0] == 450
        )
        assert z["reference"].shape[0] == 1347
        if geometry == "atlas":
            assert z["query_coords"].shape == (450, 16, 4) and z["query_q"].shape == (450, 16)
            np.testing.assert_allclose(z["query_q"].sum(1), 1, rtol=1e-5)
        elif geometry in ("sphere", "torus_c", "torus_n"):
            np.testing.assert_allclose(np.linalg.norm(z["query"], axis=1), 1, rtol=1e-5)
        if geometry == "torus_n":  # each adjacent pair on the Clifford circle of radius √(2/D)
            pairs = np.linalg.norm(z["query"].reshape(450, -1, 2), axis=2)
            np.testing.assert_allclose(pairs, np.sqrt(2 / 4), rtol=1e-5)
    if preset == "msimclr":
        assert 0 <= saved["piecewise_linear_accuracy"] <= 1
    if preset == "simo":
        assert 0 <= saved["linear_probe_accuracy"] <= 1


def test_a_select_best_run_reports_its_chosen_evaluation(tmp_path):
    """report.json names the evaluation whose weights it reports: selection.json's best entry per seed; a run
    without select_best reports none."""
    workdir = tmp_path / "selected"
    rep = cli.run(
        config.make(**TINY, steps=6, select_best=True, val_every=2, workdir=str(workdir), devices=1)
    )
    with open(workdir / "report.json") as f:
        saved = json.load(f)
    with open(workdir / "selection.json") as f:
        best = json.load(f)["best"]
    assert len(best) == 1 and best[0]["step"] in (2, 4, 6)
    assert saved["selection"] == rep["selection"] == best
    plain = cli.run(config.make(**TINY, steps=2, workdir=str(tmp_path / "plain"), devices=1))
    assert "selection" not in plain


def test_raw_baseline_is_computed_once_per_data_set(monkeypatch):
    """The raw-pixel baseline equals geojax.metrics on the pixels; a second data set object with the same
    arrays reuses it, one with other labels does not."""
    from geojax import metrics
    from train.app import report

    ds = data.load("digits")
    q, r = ds.test_x.reshape(len(ds.test_x), -1), ds.train_x.reshape(len(ds.train_x), -1)
    want = {
        "precision_at_1": metrics.precision_at_1(q, ds.test_y, r, ds.train_y, similarity="neg_euclidean"),
        "knn_accuracy": metrics.knn_accuracy(q, ds.test_y, r, ds.train_y, k=3, similarity="neg_euclidean"),
    }
    calls = []
    counted = metrics.precision_at_1
    monkeypatch.setattr(metrics, "precision_at_1", lambda *a, **k: calls.append(1) or counted(*a, **k))
    monkeypatch.setattr(report, "_RAW_BASELINES", {})
    assert report.raw_baseline(ds, 3) == want and len(calls) == 1
    copy = dataclasses.replace(ds, train_x=ds.train_x.copy())
    assert report.raw_baseline(copy, 3) == want and len(calls) == 1  # same arrays: reused
    relabelled = dataclasses.replace(ds, test_y=(ds.test_y + 1) % ds.num_classes)
    assert report.raw_baseline(relabelled, 3)["precision_at_1"] != want["precision_at_1"] and len(calls) == 2
    assert report.raw_baseline(ds, 5)["knn_accuracy"] == pytest.approx(
        metrics.knn_accuracy(q, ds.test_y, r, ds.train_y, k=5, similarity="neg_euclidean")
    )
