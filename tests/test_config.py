"""The run configuration: every key a run is given is used by it (a user's unused key is refused, a preset's
is dropped with a log line), presets are consistent, the grouped --help, and what reads the config."""

import dataclasses
import inspect
import logging
import re
import shlex
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import losses, models, regularizers
from train.app import cli, config, optim, registry, step
from train.app.errors import UsageError

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize(
    "args,message",
    [
        (["loss=supcon", "margin=0.5"], "margin applies to loss=triplet, not loss='supcon'"),
        (
            ["optimizer=adamw", "momentum=0.5"],
            "momentum applies to optimizer=sgd|rmsprop, not optimizer='adamw'",
        ),
        (["geometry=sphere", "charts=4"], "charts applies to geometry=atlas, not geometry='sphere'"),
        (
            ["loss=triplet", "temperature=0.3"],
            "temperature applies to loss=supcon|sincere|info_nce|normalized_softmax, not loss='triplet'",
        ),
        (["mining=hard"], "mining applies to loss=triplet, not loss='supcon'"),
        (["loss=contrastive", "margin=0.1"], "margin applies to loss=triplet"),
        (["pos_margin=0.5"], "pos_margin applies to loss=contrastive|lifted_structured"),
        (["simo_eps=0.1"], "simo_eps applies to loss=simo"),
        (["simo_orthogonality_weight=2"], "simo_orthogonality_weight applies to loss=simo"),
        (["optimizer=adam", "weight_decay=0.1"], "weight_decay applies to optimizer=adamw"),
        (["schedule=constant", "lr_min=0.1"], "lr_min applies to schedule=cosine"),
        (["projection_dim=32"], "projection_dim applies to projection=mlp|mixed"),
        (["norm=batch"], "norm applies to encoder=cnn|resnet18|resnet50, not encoder='mlp'"),
        (["geometry=sphere", "qat_bits=8"], "qat_bits applies to geometry=torus_c|torus_n"),
        (["qat_noise=true"], "qat_noise applies to qat_bits=1|2|4|8, not qat_bits=None"),
        (["m_per_class=8"], "m_per_class applies to sampler=m_per_class, not sampler='random'"),
        (["class_fraction=0.3"], "class_fraction applies to sampler=class_subsampled"),
        (["probe_epochs=3"], "probe_epochs applies to probe=linear|piecewise, not probe=None"),
        (["mmd=1"], "mmd applies to geometry=atlas, not geometry='torus_n'"),
        (["prior_samples=64"], "prior_samples applies to geometry=atlas"),
        (["preset=mtriplet", "koleo=0.1"], "koleo applies to geometry=euclidean|sphere|torus_c|torus_n"),
        (["dataset=cifar10", "test_fraction=0.2"], "test_fraction applies to dataset=digits|npz:PATH"),
        (["data_dir=/tmp"], "data_dir applies to dataset=mnist|fashion_mnist|cifar10|cifar100|tfds:NAME"),
        (["steps=5", "epochs=3"], "steps and epochs both given"),
    ],
)
def test_a_key_the_run_does_not_use_is_refused_naming_the_choice(args, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        config.from_args(args)


def test_a_preset_key_the_users_choices_make_unused_is_dropped_with_a_log_line(caplog):
    with caplog.at_level(logging.WARNING, logger="train.app.config"):
        cfg = config.make(loss="triplet")  # the default preset sets base_temperature and KoLeo's ε
    assert cfg.loss == "triplet" and cfg.base_temperature is None
    assert "base_temperature=0.07 dropped" in caplog.text and "loss='triplet'" in caplog.text
    assert step.Objective.from_config(cfg).loss_kwargs == (("margin", 0.2), ("mining", "all"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="train.app.config"):
        cfg = config.make(geometry="atlas", similarity="manifold")
    assert (cfg.koleo, cfg.koleo_eps) == (0.0, None)  # the preset's KoLeo cannot reach an atlas
    assert "koleo=0.1 dropped" in caplog.text and "koleo_eps=1e-06 dropped" in caplog.text


def test_a_dropped_choice_drops_the_keys_that_belong_to_it(monkeypatch, caplog):
    monkeypatch.setitem(config.PRESETS, "qat_recipe", {"qat_bits": 4, "qat_noise": True})
    with caplog.at_level(logging.WARNING, logger="train.app.config"):
        cfg = config.make(preset="qat_recipe", geometry="sphere")
    assert (cfg.qat_bits, cfg.qat_noise) == (None, False)
    assert "qat_bits=4 dropped" in caplog.text and "qat_noise=True dropped" in caplog.text


def test_the_users_length_replaces_the_presets_other_length_key(monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="train.app.config"):
        cfg = config.make(preset="supcon_torus_n_cifar10", steps=100)
    assert (cfg.steps, cfg.epochs) == (100, None)
    assert "steps=100 replaces preset supcon_torus_n_cifar10's epochs=100" in caplog.text
    assert step.resolve(cfg, 50_000).steps == 100  # 100 steps, not 100 epochs
    monkeypatch.setitem(config.PRESETS, "fixed_steps", {"steps": 10})
    cfg = config.make(preset="fixed_steps", epochs=2)
    assert (cfg.steps, cfg.epochs) == (config.DEFAULTS["steps"], 2)
    assert config.make(preset="supcon_torus_n_cifar10").epochs == 100


def test_every_preset_uses_every_key_it_sets(caplog):
    with caplog.at_level(logging.WARNING, logger="train.app.config"):
        for name in config.PRESETS:
            assert config.preset_unused(name) == [], name
            cfg = config.make(preset=name)
            for key, value in config.PRESETS[name].items():
                assert getattr(cfg, key) == value, (name, key)
    assert caplog.text == ""  # no preset drops a key of its own


def test_the_preset_check_catches_a_preset_that_sets_an_unused_key(monkeypatch):
    monkeypatch.setitem(config.PRESETS, "broken", {"geometry": "sphere", "charts": 4, "mining": "hard"})
    assert config.preset_unused("broken") == ["charts", "mining"]


LOSS_KWARGS = {
    "supcon": {"temperature": 0.1, "base_temperature": 0.07},  # the default preset's SupContrast factor
    "sincere": {"temperature": 0.1, "base_temperature": 0.07},
    "info_nce": {"temperature": 0.1, "base_temperature": 0.07},
    "contrastive": {},  # both margins none: the loss's own
    "lifted_structured": {},
    "triplet": {"margin": 0.2, "mining": "all"},
    "simo": {"eps": 1e-6, "orthogonality": True, "orthogonality_weight": 1.0},
    # the metric-learning losses: every key none (the loss's own) but the softmax temperature
    **{loss: {} for loss in ("multi_similarity", "circle", "sigmoid", "proxy_anchor", "proxy_nca")},
    **{loss: {} for loss in ("arcface", "cosface")},
    "normalized_softmax": {"temperature": 0.1},
}


@pytest.mark.parametrize("loss", losses.LOSSES)
def test_the_loss_gets_exactly_its_own_keys_under_its_own_names(loss):
    cfg = config.make(loss=loss, **({"geometry": "euclidean"} if loss == "simo" else {}))
    kwargs = registry.option_kwargs(cfg, "loss")
    assert kwargs == LOSS_KWARGS[loss]
    assert set(kwargs) <= set(inspect.signature(getattr(losses, loss)).parameters)
    margins = registry.option_kwargs(config.make(loss="contrastive", pos_margin=0.9, neg_margin=0.1), "loss")
    assert margins == {"pos_margin": 0.9, "neg_margin": 0.1}


def test_rmsprop_receives_momentum():
    g = {"w": jnp.asarray([0.3, -0.2])}
    params = {"w": jnp.zeros(2)}
    lr, m, decay, eps = 1e-2, 0.5, 0.9, 1e-8  # optax.rmsprop's decay and ε (inside the root)

    def two_updates(momentum):
        cfg = config.make(optimizer="rmsprop", momentum=momentum, lr=lr, warmup=0, schedule="constant")
        tx = optim.make_optimizer(cfg)
        state = tx.init(params)
        _, state = tx.update(g, state, params)
        return np.asarray(tx.update(g, state, params)[0]["w"])

    w = np.asarray(g["w"], np.float64)
    s1 = w / np.sqrt((1 - decay) * w**2 + eps)
    s2 = w / np.sqrt((1 - decay**2) * w**2 + eps)
    np.testing.assert_allclose(two_updates(m), -lr * (s2 + m * s1), rtol=1e-5)
    np.testing.assert_allclose(two_updates(0.0), -lr * s2, rtol=1e-5)


def test_a_saved_config_reads_back_with_unused_keys_at_their_defaults():
    cfg = config.make(preset="mtriplet", charts=4, steps=20)
    assert config.from_saved(dataclasses.asdict(cfg)) == cfg
    old = {**dataclasses.asdict(config.make()), "momentum": 0.9, "margin": 0.5}  # unused by adamw / supcon
    back = config.from_saved(old)
    assert (back.momentum, back.margin) == (config.DEFAULTS["momentum"], config.DEFAULTS["margin"])
    with pytest.raises(UsageError, match="unknown key"):
        config.from_saved({**old, "not_a_key": 1})
    assert set(config.used(old)) == set(
        config.used(dataclasses.asdict(config.make()))
    ) and "momentum" not in (config.used(old))


def test_the_command_lines_in_readme_and_the_training_page_parse():
    pages = (README, README.parent / "docs" / "training.md")
    text = "\n".join(page.read_text() for page in pages)
    lines = [ln.split("#")[0] for ln in text.splitlines() if ln.startswith("python -m train ")]
    assert len(lines) >= 5
    for line in lines:
        args = shlex.split(line)[3:]
        if args and args[0] != "--help":
            config.from_args(args)


def test_usage_errors_exit_2_in_one_line_and_bugs_keep_their_traceback(monkeypatch, capsys):
    assert cli.main(["loss=triplet", "temperature=0.3"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "temperature applies to" in err

    def broken(cfg, **kwargs):
        raise ValueError("an internal bug")

    monkeypatch.setattr(cli, "run", broken)
    with pytest.raises(ValueError, match="an internal bug"):
        cli.main(["steps=2"])


def test_koleo_eps_none_is_the_librarys_own():
    z = jax.random.normal(jax.random.key(0), (16, 4))
    labels = jnp.arange(16) % 4
    for eps, want in ((None, regularizers.koleo(z)), (0.5, regularizers.koleo(z, eps=0.5))):
        cfg = config.make(geometry="euclidean", koleo=1.0, koleo_eps=eps, views=1)
        _, terms = step.Objective.from_config(cfg)(models.Outputs(z), labels, jax.random.key(0), None)
        assert float(terms["koleo"]) == pytest.approx(float(want), rel=1e-6)
    assert float(regularizers.koleo(z)) != pytest.approx(float(regularizers.koleo(z, eps=0.5)), rel=1e-3)


def test_simo_orthogonality_weight_reaches_the_loss_as_its_keyword():
    """SimO's orthogonality learning factor (Bouhsine et al. 2024) is registered with the loss beside its ε,
    and the objective passes it as geojax.losses.simo's ``orthogonality_weight`` (1.0: eq. 1 as written)."""
    from train.app.objective import Objective

    kwargs = dict(
        Objective.from_config(config.from_args(["loss=simo", "simo_orthogonality_weight=0.5"])).loss_kwargs
    )
    assert kwargs["orthogonality_weight"] == 0.5
    assert (
        dict(Objective.from_config(config.from_args(["loss=simo"])).loss_kwargs)["orthogonality_weight"]
        == 1.0
    )
    with pytest.raises(UsageError, match="simo_orthogonality_weight"):
        config.from_args(["loss=simo", "simo_orthogonality_weight=-1"])
