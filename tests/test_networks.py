"""Every preset and every paper-scale run builds the papers' network: torchvision's ResNet-18 / ResNet-50 with
the 3×3 stride-1 CIFAR stem and no max-pool (Korman 2021's public code; SupContrast's CIFAR ResNets), counted
layer by layer against numbers derived here from the architecture (He et al. 2016), and the heads of the
papers' code.

The derivation names layers as torchvision does (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0): a
k×k convolution from c_in to c_out channels without bias has k·k·c_in·c_out weights; a batch norm over c
channels has 2c parameters (scale, bias) and 2c running statistics, counted apart.
"""

from __future__ import annotations

import math
import shlex

import jax.numpy as jnp
import pytest
from flax import nnx

from geojax import models
from train.app import config, step
from train.app import data as data_lib

SHAPES = ((32, 32, 3), (28, 28, 1))  # CIFAR and (Fashion-)MNIST images


def conv(k: int, cin: int, cout: int) -> int:
    return k * k * cin * cout


def resnet_layers(depth: int, cin: int) -> tuple[dict[str, int], dict[str, int]]:
    """(parameters, running statistics) per layer of torchvision's ResNet-`depth` trunk (no fc) with the CIFAR
    stem conv1 = 3×3, stride 1, 64 channels, and no max-pool."""
    params, stats = {"conv1": conv(3, cin, 64)}, {}

    def bn(name: str, c: int) -> None:
        params[name], stats[name] = 2 * c, 2 * c

    bn("bn1", 64)
    blocks, expansion = ((2, 2, 2, 2), 1) if depth == 18 else ((3, 4, 6, 3), 4)
    c = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for i in range(count):
            p = f"layer{stage + 1}.{i}"
            if expansion == 1:  # basic block: 3×3, 3×3
                params[f"{p}.conv1"], params[f"{p}.conv2"] = conv(3, c, width), conv(3, width, width)
                bn(f"{p}.bn1", width), bn(f"{p}.bn2", width)
            else:  # bottleneck: 1×1, 3×3 (stride), 1×1 to 4 × width
                params[f"{p}.conv1"] = conv(1, c, width)
                params[f"{p}.conv2"] = conv(3, width, width)
                params[f"{p}.conv3"] = conv(1, width, expansion * width)
                bn(f"{p}.bn1", width), bn(f"{p}.bn2", width), bn(f"{p}.bn3", expansion * width)
            if i == 0 and (stage > 0 or c != expansion * width):  # projection shortcut
                params[f"{p}.downsample.0"] = conv(1, c, expansion * width)
                bn(f"{p}.downsample.1", expansion * width)
            c = expansion * width
    return params, stats


def torchvision_name(path: tuple, counts: tuple[int, ...]) -> str:
    """geojax's ResNet variable path → torchvision's layer name (the variable's own name dropped)."""
    if path[0] == "stem":
        return "conv1"
    if path[0] == "stem_norm":
        return "bn1"
    k = path[1]
    stage = next(s for s in range(4) if k < sum(counts[: s + 1]))
    block = f"layer{stage + 1}.{k - sum(counts[:stage])}"
    if path[2] == "shortcut":
        return f"{block}.downsample.{path[4]}"
    return f"{block}.{path[2].replace('norm', 'bn')}"


def per_layer(module: nnx.Module, kind: type, counts: tuple[int, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for path, value in nnx.to_flat_state(nnx.state(module, kind)):
        name = torchvision_name(path, counts)
        out[name] = out.get(name, 0) + math.prod(value.shape)
    return out


def check_trunk(encoder: nnx.Module, depth: int, cin: int) -> None:
    counts = (2, 2, 2, 2) if depth == 18 else (3, 4, 6, 3)
    want_params, want_stats = resnet_layers(depth, cin)
    assert per_layer(encoder, nnx.Param, counts) == want_params
    assert per_layer(encoder, nnx.BatchStat, counts) == want_stats
    assert encoder.features == (512 if depth == 18 else 2048)


@pytest.mark.parametrize("depth", [18, 50])
def test_derivation_gives_torchvisions_published_totals(depth):
    """The derivation against torchvision's published totals (11,689,512 and 25,557,032 parameters with the
    ImageNet stem, a 7×7 conv of 3 × 64, and the 1000-class fc) less that stem and fc, plus the CIFAR stem."""
    published, fc_in = {18: (11_689_512, 512), 50: (25_557_032, 2048)}[depth]
    cifar = published - conv(7, 3, 64) - (fc_in * 1000 + 1000) + conv(3, 3, 64)
    assert sum(resnet_layers(depth, 3)[0].values()) == cifar
    assert cifar == {18: 11_168_832, 50: 23_500_352}[depth]  # the issue's ≈ 11.17M and ≈ 23.5M


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnet_default_width_is_torchvisions(name, shape):
    enc = nnx.eval_shape(lambda: models.encoder(name, input_shape=shape, rngs=nnx.Rngs(0)))
    check_trunk(enc, int(name[6:]), shape[2])


def test_resnet_cifar_stem_strides_and_no_max_pool():
    """3×3 stride-1 stem padded by one, each stage's first block at stride 2 (conv2 in a bottleneck), no
    max-pool: a 32×32 image reaches the last stage at 4×4 (the ImageNet stem would leave 1×1)."""
    enc = models.encoder("resnet18", input_shape=(32, 32, 3), rngs=nnx.Rngs(0))
    assert enc.stem.kernel_size == (3, 3) and enc.stem.strides in (1, (1, 1)) and enc.stem.padding == 1
    first = {0, 2, 4, 6}
    assert [b.conv1.strides for b in enc.blocks] == [2 if i in first - {0} else 1 for i in range(8)]
    h = nnx.relu(enc.stem_norm(enc.stem(jnp.zeros((1, 32, 32, 3)))))
    sizes = []
    for block in enc.blocks:
        h = block(h)
        sizes.append(h.shape[1])
    assert sizes == [32, 32, 16, 16, 8, 8, 4, 4] and h.shape[-1] == 512


def test_own_widths_of_the_small_encoders():
    mlp = nnx.eval_shape(lambda: models.encoder("mlp", input_shape=(28, 28, 1), rngs=nnx.Rngs(0)))
    assert [layer.kernel.shape for layer in mlp.layers] == [(784, 512), (512, 512)]
    cnn = nnx.eval_shape(lambda: models.encoder("cnn", input_shape=(28, 28, 1), rngs=nnx.Rngs(0)))
    assert [c.kernel.shape for c in cnn.convs] == [(3, 3, 1, 32), (3, 3, 32, 64)]
    assert cnn.dense.kernel.shape == (7 * 7 * 64, 256) and cnn.features == 256  # 28 → 14 → 7, then 8w
    with pytest.raises(ValueError, match="width"):
        models.encoder("cnn", input_shape=(28, 28, 1), width=0, rngs=nnx.Rngs(0))


def linear(fin: int, fout: int, bias: bool = True) -> int:
    return fin * fout + (fout if bias else 0)


def head_params(cfg: config.Config, features: int) -> dict[str, int]:
    """The heads' parameters, derived from the sources the presets cite: Stowell 2026's public code (Linear(F,
    4D) → ReLU → Linear(4D, D)); SupContrast's (Linear(F, F) → ReLU → Linear(F, D)); Korman 2021's (one
    Linear(F, n·d) for the charts and Linear(F, n) for the membership; per chart, and for plain SimCLR,
    Linear(d, d) → ReLU → Linear(d, P) without biases, the SimCLR head of Chen et al. 2020 with its hidden
    layer as wide as its input)."""
    d = cfg.dim
    out = {}
    if cfg.geometry == "atlas":
        out["head"] = linear(features, cfg.charts * d) + linear(features, cfg.charts)
    else:
        hidden = {"stowell": 4 * d, "supcontrast": features, "linear": 0}[cfg.head]
        out["head"] = linear(features, hidden) + linear(hidden, d) if hidden else linear(features, d)
    if cfg.projection != "none":
        width = models.embedding_width(cfg.geometry, d) if cfg.geometry != "atlas" else d
        per_head = linear(width, width, False) + linear(width, cfg.projection_dim, False)
        out["projection"] = per_head * (cfg.charts if cfg.projection == "mixed" else 1)
    return out


@pytest.mark.parametrize("head", ["stowell", "supcontrast", "linear"])
def test_geometry_heads(head):
    """Each geometry head's layers: Stowell 2026's, SupContrast's and Korman 2021's code's."""
    check_network(config.make(encoder="resnet18", geometry="sphere", dim=16, head=head), (32, 32, 3))


def check_network(cfg: config.Config, shape: tuple[int, int, int]) -> None:
    net = nnx.eval_shape(lambda: step.build_model(cfg, shape, axis_name=None))
    if cfg.encoder.startswith("resnet"):
        check_trunk(net.encoder, int(cfg.encoder[6:]), shape[2])
    got = {
        part: sum(math.prod(v.shape) for _, v in nnx.to_flat_state(nnx.state(getattr(net, part), nnx.Param)))
        for part in ("head", "projection")
        if getattr(net, part) is not None
    }
    assert got == head_params(cfg, net.encoder.features), (cfg.preset, shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("preset", list(config.PRESETS))
def test_every_preset_builds_the_papers_network(preset, shape):
    cfg = config.make(preset=preset)
    if cfg.encoder == "mlp":
        assert cfg.width is None  # the MLP's own 512
    check_network(cfg, shape)


def paper_scale_configs() -> list[config.Config]:
    """The config of every run of ``python -m train.reproduce all --scale paper``: its ``--print`` lines,
    which are the sweep's runs (tests/test_reproduce_print.py), read back as configs (nothing trained)."""
    from train.reproduce import common
    from train.reproduce.__main__ import RUNNERS, list_runs

    lines = [
        line
        for key in RUNNERS
        for line in list_runs(key, scale=common.SCALES["paper"], data_spec="digits", out="docs")
    ]
    return [config.from_args(shlex.split(line)[3:]) for line in lines]


@pytest.mark.slow
def test_every_paper_scale_run_builds_the_papers_network():
    configs = paper_scale_configs()
    assert len(configs) > 10 and {c.width for c in configs} == {None}
    # Each recipe's own network: the papers' ResNet-18 (Stowell 2026; Korman 2021 A.1 for MNIST and
    # Fashion-MNIST; Bouhsine et al. 2024's preset), the ResNet-50 of Feeney & Hughes's SupContrast fork.
    by_preset = {c.preset: c.encoder for c in configs}
    resnet50 = {"supcon_cifar10", "sincere_cifar10"}
    assert {p for p, e in by_preset.items() if e == "resnet50"} == resnet50
    assert set(by_preset.values()) == {"resnet18", "resnet50"}
    # Korman 2021's MTriplet fine-tunes an ImageNet GoogLeNet (its §3.2.1), which geojax does not build: its
    # preset's encoder is the MLP, and the paper scale stands a ResNet-18 in for it (from scratch).
    other = {c.preset for c in configs if config.make(preset=c.preset).encoder != c.encoder}
    assert other == {"mtriplet"} and by_preset["mtriplet"] == "resnet18"
    shape = data_lib.load("digits").image_shape
    distinct = {
        (c.encoder, c.geometry, c.head, c.dim, c.charts, c.projection, c.projection_dim): c for c in configs
    }
    for cfg in distinct.values():
        for s in (*SHAPES, shape):
            check_network(cfg, s)
