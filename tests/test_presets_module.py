"""The papers' presets live in train/app/presets.py: train.app.config re-exports them (the same objects, so a
test's ``monkeypatch.setitem(config.PRESETS, ...)`` reaches the presets a run reads), every preset parses, and
train.app.presets does not import train.app.config (config imports it)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.app import config, presets

ROOT = Path(__file__).resolve().parents[1]
# The recipe blocks (one or more per paper) that code outside train/ reads as config.X.
BLOCKS = (
    "STOWELL_2026",
    "STOWELL_2026_DIGITS",
    "KORMAN_2021_MSIMCLR",
    "KORMAN_2021_MTRIPLET",
    "FEENEY_HUGHES_2024",
    "SINCERE_CIFAR10",
    "SUPCON_CIFAR10",
    "BOUHSINE_2024",
    "CPU_SMALL_IMAGES",
)


def test_config_re_exports_the_presets_themselves():
    assert config.PRESETS is presets.PRESETS
    for name in BLOCKS:
        assert getattr(config, name) is getattr(presets, name), name


def test_a_preset_added_through_config_is_one_a_run_finds(monkeypatch):
    monkeypatch.setitem(config.PRESETS, "added", {"geometry": "sphere"})
    assert presets.PRESETS["added"] == {"geometry": "sphere"}
    assert config.make(preset="added").geometry == "sphere"


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_preset_parses(name):
    """``preset=NAME`` builds a config holding the preset's values (building needs no data: the data set a
    preset names is read only when a run starts)."""
    cfg = config.from_args([f"preset={name}"])
    assert cfg == config.make(preset=name)
    assert cfg.preset == name
    for key, value in presets.PRESETS[name].items():
        assert getattr(cfg, key) == value, (name, key)


def test_presets_imports_nothing_from_train():
    """Its imports (parsed): the standard library and geojax only, so it cannot reach train.app.config."""
    tree = ast.parse((ROOT / "train" / "app" / "presets.py").read_text(encoding="utf-8"))
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules.append("." * node.level + (node.module or ""))
    assert modules, "train/app/presets.py imports nothing: the check below would prove nothing"
    for module in modules:
        assert not module.startswith(".") and module.split(".")[0] != "train", module


def test_importing_presets_leaves_train_config_unimported():
    code = "import sys, train.app.presets; print('train.app.config' in sys.modules)"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
