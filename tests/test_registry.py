"""Registrations (train.app.registry): a loss registered by a user's own code, in this file alone, is a key of
the command line like the shipped ones, and the tables derived from the registrations behave as declared."""

import inspect
import json
import os

import jax.numpy as jnp
import pytest

from geojax import losses, parallel
from train.app import cli, config, registry
from train.app.errors import UsageError
from train.app.registry import POSITIVE, Key, Range

SCALE = Key("toy_scale", 1.0, "weight of the toy loss", float, "objective", POSITIVE, arg="scale")


def toy_gap(similarity, labels, *, key_labels, self_index, axis_name, scale):
    """scale · (mean negative similarity − mean positive similarity), the anchor's own column left out."""
    same = labels[:, None] == key_labels[None, :]
    not_self = jnp.arange(key_labels.shape[0])[None, :] != self_index[:, None]
    positive = same & not_self
    pos = jnp.where(positive, similarity, 0.0).sum() / jnp.maximum(positive.sum(), 1)
    neg = jnp.where(~same, similarity, 0.0).sum() / jnp.maximum((~same).sum(), 1)
    return parallel.pmean(scale * (neg - pos), axis_name)


@pytest.fixture
def toy_loss():
    before = config.Config
    registry.register("loss", "toy_gap", keys=(SCALE,), calls=toy_gap)
    yield
    registry.unregister("loss", "toy_gap")
    assert config.Config is before  # unregistering gives back the class of the shipped keys
    assert "toy_scale" not in config.FIELDS


def _first_loss(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return json.loads(f.readline())["toy_gap"]


def test_a_loss_registered_here_trains_from_the_command_line_with_its_key(toy_loss, tmp_path, capsys):
    args = ["preset=supcon", "loss=toy_gap", "steps=2", "log_every=1", "progress=false", "batch_size=64"]
    assert cli.main([*args, "toy_scale=1", f"workdir={tmp_path / 'one'}"]) == 0
    assert cli.main([*args, "toy_scale=3", f"workdir={tmp_path / 'three'}"]) == 0
    capsys.readouterr()
    # the key reaches the loss: same seed, same first batch, three times the value
    assert _first_loss(tmp_path / "three") == pytest.approx(3 * _first_loss(tmp_path / "one"), rel=1e-5)
    saved = json.load(open(tmp_path / "three" / "config.json"))
    assert saved["loss"] == "toy_gap" and saved["toy_scale"] == 3.0
    assert config.from_saved(saved).toy_scale == 3.0


def test_help_lists_the_registered_key_under_its_loss(toy_loss, capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "\n  when loss=toy_gap:\n    toy_scale          1.0              weight of the toy loss\n" in text
    assert "toy_gap" in text.split("\n  loss ")[1].split("\n  similarity ")[0]  # one of the loss's values


def test_the_registered_key_is_refused_with_another_loss_and_checked_by_its_range(toy_loss):
    with pytest.raises(UsageError, match="toy_scale applies to loss=toy_gap, not loss='supcon'"):
        config.from_args(["loss=supcon", "toy_scale=2"])
    with pytest.raises(UsageError, match="toy_scale must be positive, got -1.0"):
        config.from_args(["loss=toy_gap", "toy_scale=-1"])
    # a preset's keys the toy loss does not use (SupCon's temperature) are dropped, not refused
    cfg = config.from_args(["preset=supcon_torus_n", "loss=toy_gap"])
    assert cfg.base_temperature is None and cfg.toy_scale == 1.0


def test_a_key_declared_twice_differently_and_a_value_registered_twice_are_refused():
    fresh = Key("other_scale", 1.0, "a new key", float, "objective")
    with pytest.raises(ValueError, match="key 'temperature' is declared twice"):
        registry.register("loss", "other", keys=(fresh, Key("temperature", 0.5, "τ", float, "objective")))
    assert "other" not in registry.OPTIONS["loss"]
    # a refused registration records none of its keys: other_scale may still be declared otherwise
    registry.register("loss", "other", keys=(Key("other_scale", 2.0, "another", float, "objective"),))
    registry.unregister("loss", "other")
    with pytest.raises(ValueError, match="loss='supcon' is registered already"):
        registry.register("loss", "supcon", calls=losses.supcon)


def test_every_library_loss_is_registered_and_each_key_is_a_keyword_of_what_its_choice_calls():
    assert set(registry.OPTIONS["loss"]) == set(losses.LOSSES)
    for opt in registry.OPTIONS["loss"].values():
        assert opt.calls is getattr(losses, opt.value)
    callees = [(opt.calls, opt.keys) for options in registry.OPTIONS.values() for opt in options.values()]
    callees += [(reg.calls, reg.keys) for reg in registry.REGULARIZERS.values()]
    for calls, keys in callees:
        if calls is not None:
            params = inspect.signature(calls).parameters
            assert all(k.arg in params for k in keys if k.arg), (calls, keys)


@pytest.mark.parametrize(
    "rng, good, bad, text",
    [
        (Range(), 1e-9, 0.0, "positive"),
        (Range(closed=True), 0.0, -1e-9, "non-negative"),
        (Range(integer=True), 1, 0, "a positive integer"),
        (Range(high=1.0), 0.5, 1.0, "in (0, 1)"),
        (Range(high=0.5), 0.25, 0.5, "in (0, 0.5)"),
    ],
)
def test_ranges_accept_and_refuse_at_their_edges(rng, good, bad, text):
    assert rng.ok(good) and not rng.ok(bad) and rng.ok(None)
    assert str(rng) == text


@pytest.mark.parametrize("name", ["msimclr_cefa01a.json", "simo_batch_norm.json"])
def test_config_json_written_before_the_registrations_still_loads_to_the_same_run(name, tmp_path):
    """Run directories' config.json as the flat dataclass wrote them (a Korman 2021 MSimCLR run and a
    Bouhsine 2024 SimO run of the cpu reproduction): every key read back, nothing the run used changed."""
    with open(os.path.join(os.path.dirname(__file__), "stored_configs", name)) as f:
        saved = json.load(f)
    assert saved["dataset"].startswith("idx:")
    saved["dataset"] = f"idx:{tmp_path}"  # the folder it was trained from is checked to exist
    cfg = config.from_saved(saved)
    assert {k: getattr(cfg, k) for k in config.used(saved)} == config.used(saved)
    rebuilt = config.make(
        **{k: v for k, v in config.used(saved).items() if k != "preset"}, preset=saved["preset"]
    )
    assert rebuilt == cfg


PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "training.md")


def _readme_choice_table(text: str) -> str:
    """The page's Markdown table that starts with the ``| choice | its keys |`` header, to its last row."""
    lines = text.split("\n")
    start = lines.index("| choice | its keys |")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def test_the_pages_choice_table_is_the_registrations():
    """docs/training.md's "choice | its keys" table is exactly the one the registrations give."""
    with open(PAGE, encoding="utf-8") as f:
        written = _readme_choice_table(f.read())
    made = config.choice_table()
    assert written == made, (
        f"docs/training.md's choice table differs from the registrations; it should read:\n{made}"
    )


def test_the_choice_table_follows_a_registration(toy_loss):
    """A registration changes the table (so the page's copy no longer matches it): its key under its loss."""
    table = config.choice_table().split("\n")
    assert "| `loss=toy_gap` | `toy_scale` |" in table
    with open(PAGE, encoding="utf-8") as f:
        assert _readme_choice_table(f.read()) != "\n".join(table)


def test_the_choice_table_lists_every_key_of_each_choice():
    """Each row holds every key the choice owns: sgd|rmsprop's coupled L2 and momentum both."""
    rows = dict(row.split(" | ", 1) for row in config.choice_table().split("\n")[2:])
    assert rows["| `optimizer=sgd\\|rmsprop`"] == "`l2`, `momentum` |"
    assert rows["| `geometry=atlas`"] == "`charts`, `mmd`, `prior_samples`, `membership` |"
    owned = {n for n, k in config.KEYS.items() if k.when is not None}
    listed = {n.strip("`, |") for row in rows.values() for n in row.split(", ")}
    assert listed == owned
