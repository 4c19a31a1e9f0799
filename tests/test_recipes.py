"""The papers' training recipes as their public code runs them: KoLeo per view, SupContrast's τ/τ_base factor,
the EMA of the weights that the report evaluates, the schedule floor, epochs, and the CIFAR / MNIST presets
(one of each family trains a few steps on synthetic data of the data set's shape, the others build)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import losses, similarity
from geojax.models import Outputs
from train.app import cli, config, loop, optim, report, step

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512)


def _koleo_np(x: np.ndarray, eps: float) -> float:
    """−mean log(‖x̂_i − x̂_nn(i)‖ + ε), a float64 loop (Sablayrolles et al. 2019)."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    total = 0.0
    for i in range(len(u)):
        dots = [u[i] @ u[j] if j != i else -np.inf for j in range(len(u))]
        total += np.log(np.linalg.norm(u[i] - u[int(np.argmax(dots))]) + eps)
    return -total / len(u)


def test_koleo_is_applied_per_view_and_summed():
    rng = np.random.default_rng(0)
    view1 = rng.normal(size=(64, 8))
    view2 = view1 + 1e-3 * rng.normal(size=(64, 8))  # near-duplicate second views
    out = Outputs(jnp.asarray(np.concatenate([view1, view2]), jnp.float32))
    labels = jnp.tile(jnp.arange(64) % 4, 2)
    cfg = config.make(geometry="euclidean", koleo=1.0, koleo_eps=1e-6, views=2)
    _, terms = step.Objective.from_config(cfg)(out, labels, jax.random.key(0), None)
    per_view = _koleo_np(view1, 1e-6) + _koleo_np(view2, 1e-6)
    pooled = _koleo_np(np.concatenate([view1, view2]), 1e-6)  # each point's neighbour: its own other view
    assert float(terms["koleo"]) == pytest.approx(per_view, rel=1e-4)
    assert pooled > per_view + 5  # the pooled form is far off: a wrong implementation cannot pass


def test_supcon_base_temperature_reaches_the_loss():
    rng = np.random.default_rng(1)
    z = jnp.asarray(rng.normal(size=(32, 6)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 4, 32))
    cfg = config.make(geometry="euclidean", koleo=0.0, views=1, temperature=0.1, base_temperature=0.07)
    total, _ = step.Objective.from_config(cfg)(Outputs(z), labels, jax.random.key(0), None)
    plain = losses.supcon(similarity.cosine(z, z), labels, temperature=0.1)
    np.testing.assert_allclose(total, plain * 0.1 / 0.07, rtol=1e-5)
    with pytest.raises(ValueError, match="base_temperature"):
        config.make(loss="triplet", base_temperature=0.07)


def test_ema_update_follows_torch_ema_with_its_warm_up():
    decay = 0.99
    params = [np.float32(v) for v in (1.0, 3.0, -2.0, 5.0)]
    ema, want = jnp.float32(0.0), 0.0
    for count, p in enumerate(params, start=1):
        ema = step.ema_update(ema, jnp.float32(p), decay, jnp.int32(count))
        d = min(decay, (1 + count) / (10 + count))
        want = d * want + (1 - d) * p
    assert float(ema) == pytest.approx(want, rel=1e-6)
    cfg = config.make(batch_size=200, ema=0.3)
    assert step.ema_decay(cfg, 1000) == pytest.approx(0.3 ** (1 / 5))  # five steps per epoch


def test_report_evaluates_the_ema_weights(tmp_path):
    cfg = config.make(workdir=str(tmp_path), **TINY, steps=3, lr=0.05, ema=0.5, devices=1)
    rep = cli.run(cfg)
    result = loop.train(cfg)  # finished: restores the final state without training
    assert "ema" in result.state
    ema_out = report.embed(result.graphdef, result.state, result.dataset.test_x, batch=512)
    raw_state = {k: v for k, v in result.state.items() if k != "ema"}
    raw_out = report.embed(result.graphdef, raw_state, result.dataset.test_x, batch=512)
    with np.load(tmp_path / "embeddings.npz") as z:
        np.testing.assert_allclose(z["query"], ema_out.embedding, rtol=1e-6, atol=1e-6)
        assert np.abs(z["query"] - raw_out.embedding).max() > 1e-4
    assert 0 <= rep["precision_at_1"] <= 1


def test_cosine_schedule_floor_and_epochs():
    cfg = config.make(lr=0.1, lr_min=0.01, warmup=0, steps=100)
    lr = optim.schedule(cfg)
    assert float(lr(0)) == pytest.approx(0.1) and float(lr(100)) == pytest.approx(0.01)
    assert float(lr(50)) == pytest.approx(0.055, rel=1e-5)  # halfway down the cosine
    cfg = config.make(epochs=2.5, batch_size=200)
    assert step.resolve(cfg, 1000).steps == 12  # 2.5 epochs × 5 whole batches, rounded
    assert step.resolve(config.make(steps=7), 1000).steps == 7
    with pytest.raises(ValueError, match="lr_min"):
        config.make(lr=0.1, lr_min=0.2)


def test_stowell_cifar_presets_follow_the_public_code():
    for geometry in ("sphere", "torus_c", "torus_n"):
        for data in ("cifar10", "cifar100"):
            cfg = config.make(preset=f"supcon_{geometry}_{data}")
            assert (cfg.geometry, cfg.dataset, cfg.encoder, cfg.dim) == (geometry, data, "resnet18", 16)
            assert (cfg.optimizer, cfg.lr, cfg.momentum, cfg.lr_min, cfg.epochs) == (
                "sgd",
                0.1,
                0.0,
                0.01,
                100,
            )
            assert (cfg.batch_size, cfg.temperature, cfg.base_temperature) == (200, 0.1, 0.07)
            assert (cfg.clip, cfg.clip_mode, cfg.ema, cfg.precision) == (100.0, "value", 0.3, "bf16")


def test_korman_presets_follow_appendix_a1():
    """Korman 2021 A.1: no gradient clipping, its augmentations without a flip (the probe's 20 epochs are
    geojax's: A.1 gives none)."""
    for preset in ("msimclr", "msimclr_mnist", "mtriplet"):
        assert config.make(preset=preset).clip is None
    for preset in ("msimclr", "msimclr_mnist"):
        cfg = config.make(preset=preset)
        assert (cfg.augment, cfg.probe_epochs, cfg.optimizer, cfg.lr, cfg.batch_size) == (
            "crop_jitter_gray",
            20,
            "adam",
            1e-4,
            128,
        )


def test_feeney_hughes_presets_follow_the_authors_cifar10_runs():
    """tufts-ml/SupContrast, config_supcon/cifar10_{sincere,supcon}.py and main_supcon.py's defaults."""
    for preset, lr, tau in (("sincere_cifar10", 0.65, 0.1), ("supcon_cifar10", 0.35, 0.05)):
        cfg = config.make(preset=preset)
        assert (cfg.encoder, cfg.dim, cfg.head, cfg.batch_size, cfg.epochs) == (
            "resnet50",
            128,
            "supcontrast",
            512,
            800,
        )
        assert (cfg.optimizer, cfg.momentum, cfg.l2, cfg.clip, cfg.base_temperature) == (
            "sgd",
            0.9,
            1e-4,
            None,
            None,
        )
        assert (cfg.lr, cfg.temperature) == (lr, tau)
        assert cfg.lr_min == pytest.approx(lr * 0.1**3)  # SupContrast: eta_min = lr · lr_decay_rate³
        assert cfg.warmup == 10 * (50_000 // 512)  # ten epochs of CIFAR-10


NEW_PRESETS = {
    # preset: (image shape, classes)
    **{
        f"supcon_{g}_{d}": ((32, 32, 3), 10 if d == "cifar10" else 100)
        for g in ("sphere", "torus_c", "torus_n")
        for d in ("cifar10", "cifar100")
    },
    "supcon_cifar10": ((32, 32, 3), 10),
    "sincere_cifar10": ((32, 32, 3), 10),
    "simo_cifar10": ((32, 32, 3), 10),
    "msimclr_mnist": ((28, 28), 10),
}
# One preset of each family trains end to end (ResNet-18, SimCLR views, its input shape, loss, sampler and
# probe); every other preset is its family's trained one with only the keys below changed, each of whose
# values trains on digits in tests/test_train.py (geometry, loss) or here (the data set's class count).
TRAINED = ("supcon_torus_n_cifar100", "sincere_cifar10", "simo_cifar10", "msimclr_mnist")
SIBLING = {
    **{
        f"supcon_{g}_{d}": "supcon_torus_n_cifar100"
        for g in ("sphere", "torus_c")
        for d in ("cifar10", "cifar100")
    },
    "supcon_torus_n_cifar10": "supcon_torus_n_cifar100",
    "supcon_cifar10": "sincere_cifar10",
}
# … and the numbers of a schedule and a loss (SupCon's lr and τ beside SINCERE's, Feeney & Hughes 2024).
SIBLING_MAY_DIFFER = {"dataset", "geometry", "loss", "lr", "lr_min", "temperature"}


def _tiny(preset: str, **kw) -> config.Config:
    # one device (a quarter less compiling): every loss on 4 devices equals one device
    # (test_losses_parallel), as do whole training steps (test_parallel)
    small = dict(width=4, batch_size=40 if preset != "msimclr_mnist" else 16, steps=2, devices=1)
    if config.make(preset=preset).probe is not None:
        small["probe_epochs"] = 1
    return config.make(preset=preset, **small, eval_batch=64, progress=False, **kw)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """npz files of random uint8 images shaped as CIFAR and MNIST, every class present."""
    root = tmp_path_factory.mktemp("synthetic")
    paths = {}
    rng = np.random.default_rng(0)
    for preset in TRAINED:
        shape, classes = NEW_PRESETS[preset]
        n = max(2 * classes, 120)
        path = root / f"{'x'.join(map(str, shape))}-{classes}.npz"
        labels = np.arange(n) % classes
        np.savez(path, images=rng.integers(0, 256, (n, *shape), dtype=np.uint8), labels=labels)
        paths[preset] = str(path)
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("preset", TRAINED)
def test_each_preset_family_trains_a_few_steps_on_data_of_its_shape(preset, synthetic, tmp_path):
    cfg = _tiny(preset, dataset=f"npz:{synthetic[preset]}", test_fraction=0.5, workdir=str(tmp_path))
    rep = cli.run(cfg)
    assert 0 <= rep["precision_at_1"] <= 1
    with open(tmp_path / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [2]
    with np.load(tmp_path / "embeddings.npz") as z:
        assert np.isfinite(z["query"]).all() and np.isfinite(z["reference"]).all()


@pytest.mark.parametrize("preset", sorted(SIBLING))
def test_every_other_preset_is_a_trained_one_with_trained_keys_changed(preset):
    """Its config resolves, differs from its family's trained preset only in keys whose values train
    elsewhere, and its model builds for its data set's image shape and embeds into its geometry's ``dim``
    (abstractly: shapes only, nothing compiled or run)."""
    cfg, trained = _tiny(preset), _tiny(SIBLING[preset])
    assert SIBLING[preset] in TRAINED
    changed = {f for f in config.FIELDS if getattr(cfg, f) != getattr(trained, f)} - {"preset"}
    assert changed <= SIBLING_MAY_DIFFER, changed - SIBLING_MAY_DIFFER
    shape, _ = NEW_PRESETS[preset]
    assert NEW_PRESETS[SIBLING[preset]][0] == shape
    image_shape = (*shape, 1) if len(shape) == 2 else shape
    graphdefs = []

    def init():
        graphdef, state = step.init_state(cfg, image_shape, axis_name=None)
        graphdefs.append(graphdef)
        return state

    state = jax.eval_shape(init)

    def forward(state, x):
        model = nnx.merge(graphdefs[0], state["params"], state["rest"])
        model.eval()
        return model(x)

    x = jax.ShapeDtypeStruct((8, *image_shape), jnp.float32)
    out = jax.eval_shape(forward, state, x)
    width = 2 * cfg.dim if cfg.geometry == "torus_c" else cfg.dim  # torus_c: cos and sin of each angle
    assert out.embedding.shape == (8, width)
