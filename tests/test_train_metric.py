"""The metric-learning losses in the training application: each ``loss=X`` trains, resumes exactly with its
proxies (or learned sigmoid scale and bias) in the state, keeps a proxy learning-rate factor of its own,
takes a miner's pairs, and compares proxies with the run's own similarity on every geometry."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tiers import default_tier

from geojax import geometries, losses, miners, models
from geojax import similarity as similarity_lib
from train.app import cli, config, loop, objective, optim, step
from train.app.errors import UsageError

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512, geometry="sphere")
PROXY_LOSSES = ("proxy_anchor", "proxy_nca", "normalized_softmax", "arcface", "cosface")
NEW_LOSSES = (*PROXY_LOSSES, "multi_similarity", "circle", "sigmoid")


def _leaves_close(a, b, **tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol)


@pytest.mark.parametrize(
    "extra",
    default_tier(
        [{"loss": loss} for loss in NEW_LOSSES]
        + [{"loss": "sigmoid", "sigmoid_learn": True}, {"loss": "arcface", "sub_centers": 3}],
        keep=(
            {"loss": "proxy_nca"},
            {"loss": "multi_similarity"},
            {"loss": "sigmoid", "sigmoid_learn": True},
            {"loss": "arcface", "sub_centers": 3},
        ),
    ),
    ids=lambda e: "-".join(str(v) for v in e.values()),
)
def test_each_new_loss_resumes_exactly_with_its_own_parameters(extra, tmp_path):
    kw = dict(TINY, steps=6, checkpoint_every=2, log_every=1, lr=1e-2, **extra)
    ref = loop.train(config.make(workdir=str(tmp_path / "a"), **kw)).state
    cfg = config.make(workdir=str(tmp_path / "b"), **kw)
    assert int(loop.train(cfg, stop_at=3).state["step"]) == 3  # killed after step 3; checkpoint of step 2
    resumed = loop.train(cfg).state
    _leaves_close(resumed["params"], ref["params"], rtol=1e-6, atol=1e-7)
    _leaves_close(resumed["opt_state"], ref["opt_state"], rtol=1e-6, atol=1e-7)
    params = resumed["params"]
    if extra["loss"] in PROXY_LOSSES:  # 10 digit classes (× sub-centres) of the head's raw width
        assert params["loss_params"]["proxies"][...].shape == (10 * extra.get("sub_centers", 1), 4)
    elif extra.get("sigmoid_learn"):  # the learned scale and bias moved from their start
        own = params["loss_params"]
        assert float(own["log_scale"][...]) != pytest.approx(np.log(10.0)) or float(own["bias"][...]) != -10.0
    else:
        assert "loss_params" not in params


def test_state_without_loss_parameters_is_unchanged_for_the_other_losses():
    _, state = step.init_state(config.make(**TINY), (8, 8, 1), classes=10)
    assert "loss_params" not in state["params"]


def test_proxies_train_with_their_own_learning_rate_factor():
    cfg = config.make(**TINY, loss="proxy_anchor", optimizer="sgd", lr=0.1, warmup=0, schedule="constant")
    assert optim.proxy_lr_scale(cfg) == 100.0  # Kim et al. 2020's code: proxies at 100× the rate
    assert optim.proxy_lr_scale(dataclasses.replace(cfg, proxy_lr_scale=3.0)) == 3.0
    assert optim.proxy_lr_scale(config.make(**TINY, loss="arcface")) == 1.0
    _, state = step.init_state(cfg, (8, 8, 1), classes=10)
    grads = jax.tree.map(jnp.ones_like, state["params"])
    tx = optim.make_optimizer(cfg)  # clip at 100 leaves a gradient of ones' norm (~√(#params)) clipped
    plain = optim.make_optimizer(dataclasses.replace(cfg, proxy_lr_scale=1.0))
    updates = tx.update(grads, tx.init(state["params"]), state["params"])[0]
    base = plain.update(grads, plain.init(state["params"]), state["params"])[0]
    ratio = jax.tree.map(lambda u, b: np.asarray(u) / np.asarray(b), updates, base)
    np.testing.assert_allclose(ratio["loss_params"]["proxies"][...], 100.0, rtol=1e-6)
    others = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(ratio) if "proxies" not in str(path)]
    np.testing.assert_allclose(np.concatenate([np.ravel(x) for x in others]), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "geometry,similarity,dim",
    [
        ("sphere", "cosine", 4),
        ("torus_c", "torus", 2),
        ("torus_n", "cosine", 4),
        ("euclidean", "neg_sq_euclidean", 3),
    ],
)
def test_proxies_live_on_the_geometry_and_meet_the_runs_similarity(geometry, similarity, dim):
    cfg = config.make(**{**TINY, "geometry": geometry, "dim": dim}, similarity=similarity, loss="proxy_nca")
    model = step.build_model(cfg, (8, 8, 1), axis_name=None)
    objective.attach_loss_params(model, cfg, classes=5)
    raw = model.loss_params.proxies[...]
    obj = objective.Objective.from_config(cfg)
    rows = obj.proxy_rows(raw)
    record = geometries.get(geometry)
    if similarity == "torus":  # torus_c proxies are angles in turns, compared by the flat-torus distance
        assert rows.shape == (5, dim) and float(jnp.min(raw)) >= 0 and float(jnp.max(raw)) < 1
        np.testing.assert_allclose(rows, raw % 1.0, atol=1e-5)
    else:
        np.testing.assert_allclose(rows, record.project(raw), atol=1e-6)
    x = jnp.linspace(-1.0, 1.0, 4 * 8 * 8).reshape(4, 8, 8, 1)
    out = model(x)
    labels = jnp.array([0, 1, 4, 1])
    total, terms = obj(out, labels, jax.random.key(0), None, loss_params=model.loss_params)
    sim = similarity_lib.get(similarity)(obj.key_rows(out), rows)
    np.testing.assert_allclose(terms["proxy_nca"], losses.proxy_nca(sim, labels), rtol=1e-6)


def test_atlas_proxies_are_chart_points_compared_by_the_manifold_distance():
    atlas = {**TINY, "geometry": "atlas", "dim": 2}
    cfg = config.make(**atlas, similarity="manifold", charts=3, loss="proxy_anchor")
    model = step.build_model(cfg, (8, 8, 1), axis_name=None)
    objective.attach_loss_params(model, cfg, classes=4)
    assert model.loss_params.proxies[...].shape == (4, 3 * (2 + 1))
    rows = objective.Objective.from_config(cfg).proxy_rows(model.loss_params.proxies[...])
    np.testing.assert_allclose(np.sum(rows["q"], axis=1), 1.0, rtol=1e-6)  # memberships of each proxy
    assert rows["coords"].shape == (4, 3, 2)


def test_a_miner_hands_its_pairs_to_the_pair_loss():
    cfg = config.make(**TINY, loss="multi_similarity", miner="batch_hard")
    obj = objective.Objective.from_config(cfg)
    model = step.build_model(cfg, (8, 8, 1), axis_name=None)
    out = model(jnp.linspace(-1.0, 1.0, 8 * 8 * 8).reshape(8, 8, 8, 1))
    labels = jnp.array([0, 0, 1, 1, 2, 2, 0, 1])
    _, terms = obj(out, labels, jax.random.key(0), None)
    sim = similarity_lib.cosine(out.embedding, out.embedding)
    pos, neg = miners.batch_hard(sim, labels)  # one positive and one negative per anchor
    want = losses.multi_similarity(sim, labels, pos_mask=pos, neg_mask=neg)
    np.testing.assert_allclose(terms["multi_similarity"], want, rtol=1e-6)
    assert not np.isclose(float(want), float(losses.multi_similarity(sim, labels)))  # the miner kept fewer


@pytest.mark.parametrize(
    "args,match",
    [
        (["loss=arcface", "similarity=neg_euclidean"], "similarity='cosine'"),
        (["loss=proxy_anchor", "labels=instance", "views=2"], "labels='class'"),
        (["loss=supcon", "miner=batch_hard"], "miner"),
        (["loss=triplet", "miner=nope"], "miner must be one of"),
        (["loss=triplet", "miner_epsilon=0.2"], "miner_epsilon"),
        (["loss=supcon", "proxy_lr_scale=10"], "proxy_lr_scale"),
        (["loss=arcface", "sub_centers=0"], "sub_centers must be a positive"),
    ],
)
def test_bad_metric_learning_configs_raise_naming_the_key(args, match):
    with pytest.raises(UsageError, match=match):
        config.from_args(["geometry=sphere", *args])


def test_a_learned_sigmoid_starts_at_its_scale_and_bias():
    cfg = config.make(**TINY, loss="sigmoid", sigmoid_learn=True, loss_scale=5.0, sigmoid_bias=-3.0)
    model = step.build_model(cfg, (8, 8, 1), axis_name=None)
    objective.attach_loss_params(model, cfg, classes=None)
    np.testing.assert_allclose(np.exp(model.loss_params.log_scale[...]), 5.0, rtol=1e-6)
    np.testing.assert_allclose(model.loss_params.bias[...], -3.0)
    assert isinstance(model.loss_params.bias, nnx.Param)


@pytest.mark.slow
@pytest.mark.parametrize("loss", NEW_LOSSES)
def test_python_m_train_with_each_new_loss_beats_the_raw_pixels_on_the_digits(loss, tmp_path):
    rep = cli.run(
        config.from_args([f"loss={loss}", "geometry=sphere", f"workdir={tmp_path}", "progress=false"])
    )
    assert rep["precision_at_1"] > rep["baseline_raw_1nn"]["precision_at_1"], rep["precision_at_1"]


def test_models_outputs_of_proxy_rows_match_the_heads_projection():
    # the same raw vector through the head's own projection and through proxy_rows: the same embedding
    raw = jax.random.normal(jax.random.key(1), (6, 4))
    for geometry in ("sphere", "torus_n"):
        cfg = config.make(**{**TINY, "geometry": geometry}, loss="normalized_softmax")
        np.testing.assert_allclose(
            objective.Objective.from_config(cfg).proxy_rows(raw), models.project(raw, geometry), atol=1e-6
        )


def test_the_optimiser_of_a_loss_without_proxies_keeps_its_state_structure():
    cfg = config.make(**TINY)
    tx = optim.make_optimizer(cfg)
    parts = [
        optax.clip_by_global_norm(cfg.clip),
        optax.adamw(optim.schedule(cfg), weight_decay=cfg.weight_decay),
    ]
    params = {"w": jnp.ones(3)}
    assert jax.tree.structure(tx.init(params)) == jax.tree.structure(optax.chain(*parts).init(params))
