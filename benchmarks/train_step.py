"""Training-step throughput: the geojax train step next to the same step in PyTorch, measured in one run.

The geojax side is the train app's own step (train.app.step): the training images held on the device, each
step's batch drawn and gathered inside the jitted step (the device feed), ``--steps-per-call`` steps per
dispatch (one ``lax.scan``; a comma list times each), the state's buffers donated. The PyTorch side is the
same step as a good PyTorch engineer writes it (:func:`torch_step`): the images held as a device tensor,
each batch drawn with ``torch.randperm`` and gathered and converted on the device, no host synchronisation
anywhere in the step (the SupCon mean over anchors with a positive is a masked sum over a count),
``cudnn.benchmark`` on a GPU, and under ``--torch-modes`` eager or ``torch.compile`` in its ``default``,
``max-autotune`` and ``reduce-overhead`` (CUDA graphs) modes with the whole step compiled: the batch, the
forward and the loss as one graph (its backward by AOTAutograd), the clipping and the optimiser update as
another. Its modules mirror geojax.models' (the same padding, batch norm momentum, head and torusN
projection), and tests/test_train_step_parity.py checks that from the same weights and batch both sides
give the same loss, gradients and updated weights. Both draw a uniform batch without replacement, convert
uint8 to float, make two views (identical copies: augment=none, so neither side augments), and run forward,
loss, backward and the optimiser update.

Every figure is the median over ``--repeats`` interleaved rounds (each runner in turn), so a machine shared
with other work loads all sides alike. Per runner: steps/s, distinct images/s and view-images/s (× views),
ms/step, CPU seconds per step (all threads), MFU on a GPU (the step's FLOPs counted once, by XLA's cost
analysis of geojax's step, for every row, over the dense bf16 peak of the device's exact model,
:data:`PEAK_BF16`), and each PyTorch row's time over the best geojax row's. ``--one-thread`` pins the
process to one core, so both run on one (an oversubscribed machine stalls OpenMP's multi-thread
barriers). ``--cpu-devices N`` splits the host into N one-thread XLA devices and runs geojax's step
data-parallel over them (each device takes 1/N of the global batch; the losses gather over the devices),
where XLA otherwise runs one device's operations on a shared thread pool. ``--replicas 1,3,8`` also times
the several-seeds step (that many seeds stacked in one program, each drawing its own batches) against as
many single-seed runs.

CPU (default: geojax 10 steps per call against PyTorch eager):

- ``mlp``: the digits recipe, MLP 64 → 512 → 512, Stowell 2026's head (512 → 4D → D, D = 64) with the
  torusN projection, SupCon (τ = 0.1) + 0.1 · KoLeo per view, AdamW, global-norm clipping at 100, 256
  images × 2 views per step from the 1,347 digits;
- ``cnn``: the small CNN (32 and 64 channels, 3×3, max-pool, 256 dense) on 28×28×1 images (MNIST-sized, 4,096
  synthetic uint8 images), the same head and objective, 128 images × 2 views per step.

``--gpu`` (default: geojax at 1 and 10 steps per call, each with flax's batch norm and with
``geojax.models.FusedBatchNorm``'s one-pass training step (``--norms``), every PyTorch mode, replicas 1, 3
and 8): Stowell
2026's CIFAR recipe on one accelerator: ResNet-18 (CIFAR stem, batch norm) on 32×32×3 (50,000 synthetic
uint8 images held on the device), torusN head D = 16, SupCon (τ = 0.1, × τ/0.07) + KoLeo per view, SGD,
element-wise clipping at 100, bf16 compute (PyTorch: autocast bf16 and channels_last), 512 images × 2 views
per step; first, blocked SupCon fwd+bwd at a global batch of 65,536: time and peak memory; after the
comparison, where the device time of the best geojax and the best PyTorch step goes (their kernels by
``jax.profiler`` and ``torch.profiler``: products against the rest, the device's busy time against the
step's, the top kernels; ``--trace`` keeps geojax's trace); the several-seeds step on Korman 2021's MSimCLR
recipe (ResNet-18 on 28×28×1, batch 128, its augmentations), the recipe whose seeds the paper scale runs in
one program. ``--quick`` shrinks every size to seconds (also on a CPU, as a smoke test).

A full run writes every table (rows, ratios, sizes, rounds) with the machine to
``benchmarks/results/train_step.json``, its name carrying the run's variant (``train_step_gpu``,
``train_step_cpu_devices_2``, ``train_step_one_thread``); ``--quick`` writes only with ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geojax import losses, parallel
from train.app import config, data, optim, program, step
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, interleaved, measure

# Dense bf16 peaks (FLOP/s) from NVIDIA's data sheets (half the sparsity figure), for MFU, by the device's
# model name, the first entry found in it (the PCIe and NVL H100s and the H200 NVL run lower clocks and
# power than the SXM parts: "NVIDIA H100 80GB HBM3" is an SXM5 H100). --peak-tflops overrides.
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
)


def peak_bf16(device_kind: str) -> float | None:
    """The dense bf16 peak of the device called ``device_kind`` (:data:`PEAK_BF16`), None if unknown."""
    return next((peak for name, peak in PEAK_BF16 if name in device_kind), None)


@dataclasses.dataclass(frozen=True)
class Case:
    """One model to compare: its config, training images (uint8) and labels."""

    name: str
    cfg: config.Config
    images: np.ndarray
    labels: np.ndarray


def cpu_cases(quick: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    digits = data.load("digits")
    digit_images = np.round(digits.train_x * 255).astype(np.uint8)  # the same shapes, held as uint8
    mnist = rng.integers(0, 256, (1024 if quick else 4096, 28, 28, 1), dtype=np.uint8)
    common = dict(augment="none", feed="device")
    return [
        Case(
            "mlp",
            config.make(batch_size=64 if quick else 256, width=128 if quick else 512, **common),
            digit_images,
            digits.train_y,
        ),
        Case(
            "cnn",
            config.make(encoder="cnn", batch_size=32 if quick else 128, width=8 if quick else 32, **common),
            mnist,
            rng.integers(0, 10, len(mnist)).astype(np.int32),
        ),
    ]


def gpu_case(quick: bool) -> Case:
    rng = np.random.default_rng(0)
    n = 2048 if quick else 50_000
    cfg = config.make(
        preset="supcon_torus_n_cifar10",
        dataset="digits",  # not loaded: synthetic images of CIFAR's shape below
        epochs=None,
        steps=10**6,
        ema=None,
        augment="none",
        feed="device",
        batch_size=16 if quick else 512,
        width=8 if quick else None,  # None: the preset's own network (ResNet-18, base width 64)
        precision="bf16" if jax.default_backend() != "cpu" else "fp32",
    )
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    return Case("resnet18", cfg, images, rng.integers(0, 10, n).astype(np.int32))


def msimclr_case(quick: bool) -> Case:
    """Korman 2021's MSimCLR as the paper scale runs it on Fashion-MNIST (``preset=msimclr_mnist``):
    ResNet-18 (CIFAR stem) on 28×28×1, 16 charts at d = 2, 128 images × 2 views per step, its own
    augmentations drawn on the device; 60,000 synthetic uint8 images."""
    rng = np.random.default_rng(1)
    n = 2048 if quick else 60_000
    sizes = {"batch_size": 16, "width": 8} if quick else {}
    cfg = config.make(
        preset="msimclr_mnist", dataset="digits", epochs=None, steps=10**6, feed="device", **sizes
    )
    images = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
    return Case("msimclr", cfg, images, rng.integers(0, 10, n).astype(np.int32))


def geojax_call(
    case: Case, k: int, devices: int = 1, replicas: int = 1
) -> tuple[Callable[[], Any], Callable[[], float | None], Callable[[], str]]:
    """``(call, flops, hlo)``: one dispatch of ``k`` steps of the app's step (device feed, data-parallel over
    ``devices`` devices, donated state; with ``replicas`` > 1 the several-seeds step of that many seeds in
    one program), the FLOPs of one step by XLA's cost analysis (None when unavailable), and the compiled HLO
    text of ``call``."""
    cfg = dataclasses.replace(case.cfg, seeds=replicas)
    if cfg.batch_size % devices:
        raise ValueError(
            f"{case.name}: batch_size {cfg.batch_size} must be divisible by the {devices} devices"
        )
    init = step.init_replicas if replicas > 1 else step.init_state
    graphdef, state = init(cfg, case.images.shape[1:])
    mesh = parallel.make_mesh(devices)
    per_device = step.make_step(cfg, graphdef, optim.make_optimizer(cfg))
    batches = data.Batches.of(cfg)
    several = replicas > 1

    def make_run(length: int, on: jax.sharding.Mesh) -> Callable:
        call = program.make_call(per_device, length=length, batches=batches, replicas=several)
        return program.distribute(call, mesh=on)

    run = make_run(k, mesh)
    tables = step.replicate({"images": case.images, **data.label_tables(case.labels)}, mesh)
    box = [step.replicate(state, mesh)]

    def call():
        box[0], metrics = run(box[0], tables, {})
        return metrics

    def flops():
        # One step, straight-line (XLA counts a scan's body once, whatever its trip count), lowered for the
        # host CPU: on GPUs convolutions become library calls that XLA's cost analysis does not count.
        cpu = jax.make_mesh((1,), mesh.axis_names, devices=jax.devices("cpu")[:1])
        one = make_run(1, cpu)
        on_cpu = jax.sharding.NamedSharding(cpu, jax.sharding.PartitionSpec())

        def spec(x):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on_cpu)

        cost = one.lower(jax.tree.map(spec, box[0]), jax.tree.map(spec, tables), {}).cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return cost["flops"] if cost and cost.get("flops") else None

    def hlo():
        return run.lower(box[0], tables, {}).compile().as_text()

    return call, flops, hlo


def torch_encoder(cfg: config.Config, shape: tuple[int, int, int]) -> Any:
    """geojax's MLP, small CNN or ResNet-18 (CIFAR stem, batch norm) in PyTorch, its modules named as
    geojax.models' (so :func:`load_params` maps one onto the other); ``.features`` is its output width.
    Takes NCHW float images."""
    import torch
    from torch import nn

    h, w, c = shape
    if cfg.encoder == "mlp":

        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                width = cfg.width or 256
                self.layers = nn.ModuleList([nn.Linear(h * w * c, width), nn.Linear(width, width)])
                self.features = width

            def forward(self, x):
                x = x.permute(0, 2, 3, 1).flatten(1)  # flattened in geojax's (H, W, C) order
                for layer in self.layers:
                    x = layer(x).relu()
                return x

        return MLP()
    if cfg.encoder == "cnn":
        norm = cfg.norm or "none"
        if norm not in ("none", "batch"):
            raise ValueError(f"the PyTorch small CNN has no {norm!r} normalisation (none or batch)")

        class SmallCNN(nn.Module):
            def __init__(self):
                super().__init__()
                width = cfg.width or 32
                widths = (c, width, 2 * width)
                pairs = list(zip(widths[:-1], widths[1:], strict=True))
                self.convs = nn.ModuleList(
                    nn.Conv2d(a, b, 3, padding=1, bias=norm == "none") for a, b in pairs
                )
                # flax's BatchNorm momentum 0.9 is PyTorch's 0.1 (the same running average)
                self.norms = nn.ModuleList(
                    nn.BatchNorm2d(b, momentum=0.1) if norm == "batch" else nn.Identity() for _, b in pairs
                )
                size, self.pools = min(h, w), []
                for _ in range(2):
                    self.pools.append(size > 4)
                    size = size // 2 if size > 4 else size
                self.dense = nn.Linear(size * size * widths[-1], 8 * width)
                self.features = 8 * width

            def forward(self, x):
                for conv, norm, pool in zip(self.convs, self.norms, self.pools, strict=True):
                    x = norm(conv(x))
                    x = (nn.functional.max_pool2d(x, 2) if pool else x).relu()
                return self.dense(x.permute(0, 2, 3, 1).flatten(1)).relu()  # geojax's (H, W, C) order

        return SmallCNN()
    if cfg.encoder != "resnet18" or (cfg.norm or "batch") != "batch":
        raise ValueError(f"no PyTorch twin of encoder={cfg.encoder!r} norm={cfg.norm!r}")

    class Sequential(nn.Module):  # as nnx.Sequential: the layers under .layers
        def __init__(self, *layers: nn.Module):
            super().__init__()
            self.layers = nn.ModuleList(layers)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    def bn(features: int) -> nn.BatchNorm2d:
        return nn.BatchNorm2d(features, momentum=0.1)  # flax momentum 0.9: the same running average

    class Block(nn.Module):  # He et al. 2016's basic block
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1, self.norm1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), bn(cout)
            self.conv2, self.norm2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), bn(cout)
            self.shortcut = (
                Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))
                if stride != 1 or cin != cout
                else None
            )

        def forward(self, x):
            y = self.norm2(self.conv2(self.norm1(self.conv1(x)).relu()))
            return (y + (x if self.shortcut is None else self.shortcut(x))).relu()

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            width = cfg.width or 64
            self.stem, self.stem_norm = nn.Conv2d(c, width, 3, 1, 1, bias=False), bn(width)
            blocks, cin = [], width
            for stage in range(4):
                for i in range(2):
                    blocks.append(Block(cin, width * 2**stage, 2 if stage > 0 and i == 0 else 1))
                    cin = width * 2**stage
            self.blocks, self.features = nn.ModuleList(blocks), cin

        def forward(self, x):
            x = self.stem_norm(self.stem(x)).relu()
            for block in self.blocks:
                x = block(x)
            return torch.mean(x, dim=(2, 3))

    return ResNet()


def torch_model(cfg: config.Config, shape: tuple[int, int, int]) -> Any:
    """Encoder + Stowell 2026's head (Linear(F, 4D) → ReLU → Linear(4D, D)) + the torusN projection (eq. 3,
    each pair on a circle of radius √(2/D)) or the sphere's L2 normalisation, modules named as
    geojax.models.EmbeddingModel's: NCHW float images → [B, D] float32."""
    import torch.nn.functional as F
    from torch import nn

    if cfg.geometry not in ("torus_n", "sphere") or cfg.projection != "none" or cfg.qat_bits is not None:
        raise ValueError(
            "the PyTorch twin is torus_n or sphere without projection or QAT, got "
            f"geometry={cfg.geometry!r} projection={cfg.projection!r} qat_bits={cfg.qat_bits}"
        )
    d = cfg.dim

    class Head(nn.Module):
        def __init__(self, features: int):
            super().__init__()
            self.hidden, self.out = nn.Linear(features, 4 * d), nn.Linear(4 * d, d)

        def forward(self, h):
            raw = self.out(self.hidden(h).relu()).float()
            if cfg.geometry == "sphere":
                return F.normalize(raw, dim=1)
            return F.normalize(raw.view(-1, d // 2, 2), dim=2).view(-1, d) * math.sqrt(2 / d)

    class EmbeddingModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch_encoder(cfg, shape)
            self.head = Head(self.encoder.features)

        def forward(self, x):
            return self.head(self.encoder(x))

    return EmbeddingModel()


def load_params(model: Any, params: Any) -> None:
    """Copy geojax parameters (the train state's ``params``) into :func:`torch_model`'s ``model``: kernels
    [kh, kw, in, out] → weight [out, in, kh, kw], [in, out] → [out, in]; batch norm's scale → weight. Every
    parameter of each side must find its twin."""
    import torch

    mine = dict(model.named_parameters())
    seen = set()
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        keys = [str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey)]
        if keys[-1] in ("kernel", "scale"):
            keys[-1] = "weight"
        name = ".".join(keys)
        if name not in mine:
            raise KeyError(f"geojax parameter {jax.tree_util.keystr(path)} has no PyTorch twin {name!r}")
        value = np.asarray(leaf, np.float32)
        value = value.transpose(3, 2, 0, 1) if value.ndim == 4 else value.T if value.ndim == 2 else value
        if tuple(mine[name].shape) != value.shape:
            raise ValueError(f"{name}: PyTorch shape {tuple(mine[name].shape)}, geojax's gives {value.shape}")
        with torch.no_grad():
            mine[name].copy_(torch.from_numpy(value.copy()))
        seen.add(name)
    if missing := sorted(set(mine) - seen):
        raise KeyError(f"PyTorch parameters without a geojax twin: {missing}")


def torch_objective(
    cfg: config.Config, n: int, device: str, *, contrastive: Callable[[Any, Any], Any] | None = None
) -> Callable[[Any, Any], Any]:
    """``loss(z, y)``: SupCon on the cosine similarity (× τ/τ_base, SupContrast's form) + koleo · KoLeo of
    each view's rows (Sablayrolles et al. 2019), for ``cfg.views`` view-major blocks of ``n`` rows. No
    host synchronisation: the mean over anchors with a positive is a masked sum over a count.
    ``contrastive(z, y)`` replaces the SupCon term before the factor (pytorch-metric-learning's SupConLoss,
    or its CrossBatchMemory around it)."""
    import torch
    import torch.nn.functional as F

    rows = cfg.views * n
    eye = torch.eye(rows, dtype=torch.bool, device=device)
    scale = cfg.temperature / (cfg.base_temperature or cfg.temperature)
    eps = 1e-8 if cfg.koleo_eps is None else cfg.koleo_eps

    def supcon(zn, y):
        logits = (zn @ zn.T / cfg.temperature).masked_fill(eye, -1e9)
        log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        pos = (y[:, None] == y[None, :]) & ~eye
        count = pos.sum(1)
        per_anchor = (log_prob * pos).sum(1) / count.clamp(min=1)
        has = (count > 0).to(per_anchor.dtype)
        return -(per_anchor * has).sum() / has.sum().clamp(min=1)

    def loss(z, y):
        zn = F.normalize(z, dim=1)
        total = scale * (supcon(zn, y) if contrastive is None else contrastive(z, y))
        if cfg.koleo:
            u = zn.view(cfg.views, n, -1)
            nearest = (u @ u.transpose(1, 2)).masked_fill(eye[:n, :n], -2.0).argmax(dim=2)
            gap = u - torch.take_along_dim(u, nearest[..., None], dim=1)
            total = total - cfg.koleo * torch.log(gap.norm(dim=2) + eps).mean(dim=1).sum()
        return total

    return loss


TORCH_MODES = ("eager", "default", "max-autotune", "reduce-overhead")


@dataclasses.dataclass
class TorchStep:
    """One PyTorch training step of a :class:`Case`: ``step(idx)`` trains on the images at ``idx`` (a
    device tensor); calling it draws a batch of ``cfg.batch_size`` uniformly without replacement first."""

    model: Any
    optimizer: Any
    images: Any  # [N, C, H, W] uint8 on the device
    batch: int
    batch_loss: Callable[[Any], Any]
    update: Callable[[], None]

    def step(self, idx: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.batch_loss(idx)
        loss.backward()
        self.update()
        return loss

    def __call__(self) -> Any:
        import torch

        return self.step(torch.randperm(len(self.images), device=self.images.device)[: self.batch])


def torch_step(
    case: Case,
    device: str,
    *,
    mode: str = "eager",
    params: Any = None,
    contrastive: Callable[[Any, Any], Any] | None = None,
) -> TorchStep:
    """The same step in PyTorch (:func:`torch_model`, :func:`torch_objective`, the config's optimiser and
    clipping), as a good PyTorch engineer writes it: the batch gathered and converted on the device, no host
    synchronisation, autocast bf16 and channels_last for convolutions in bf16, ``cudnn.benchmark`` on a GPU.
    ``mode``: 'eager', or a ``torch.compile`` mode under which the whole step is compiled: the batch's
    gather, forward and loss as one graph (its backward by AOTAutograd) and the clipping with the optimiser
    update as another (PyTorch's recipe for compiling an optimiser). ``params``: geojax parameters to start
    from (:func:`load_params`), else PyTorch's own initialisation. ``contrastive``: the SupCon term's
    replacement (:func:`torch_objective`)."""
    import torch

    if mode not in TORCH_MODES:
        raise ValueError(f"mode must be one of {TORCH_MODES}, got {mode!r}")
    cfg = case.cfg
    torch.manual_seed(0)
    if device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
    model = torch_model(cfg, case.images.shape[1:])
    if params is not None:
        load_params(model, params)
    model = model.to(device)
    bf16 = cfg.precision == "bf16"
    channels_last = bf16 and cfg.encoder != "mlp"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    weights = list(model.parameters())
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(weights, lr=cfg.lr, weight_decay=cfg.weight_decay)
    elif cfg.optimizer == "sgd":
        opt = torch.optim.SGD(weights, lr=cfg.lr, momentum=cfg.momentum)  # as optax.sgd: no weight decay
    else:
        raise ValueError(f"no PyTorch twin of optimizer={cfg.optimizer!r}")
    images = torch.as_tensor(case.images, device=device).permute(0, 3, 1, 2).contiguous()  # NCHW uint8
    labels = torch.as_tensor(case.labels, device=device, dtype=torch.int64)
    objective = torch_objective(cfg, cfg.batch_size, device, contrastive=contrastive)

    def batch_loss(idx):
        x = images[idx].float().mul_(1 / 255).repeat(cfg.views, 1, 1, 1)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            z = model(x)
        return objective(z.float(), labels[idx].repeat(cfg.views))

    def update():
        if cfg.clip_mode == "value":
            torch.nn.utils.clip_grad_value_(weights, cfg.clip)
        else:
            torch.nn.utils.clip_grad_norm_(weights, cfg.clip, foreach=True)
        opt.step()

    if mode != "eager":
        batch_loss, update = (torch.compile(fn, mode=mode) for fn in (batch_loss, update))
    return TorchStep(model, opt, images, cfg.batch_size, batch_loss, update)


def step_times(runners: dict[str, tuple[Callable[[], Any], int, Callable]], rounds: int, steps: int) -> dict:
    """Seconds per step (wall, CPU) of each runner, medians of ``rounds`` :func:`interleaved` rounds of about
    ``steps`` steps each (after two warm-up calls); ``runners``: name → (call, steps per call, block)."""
    times = interleaved(
        {name: Call(call, (), max(1, steps // k), block) for name, (call, k, block) in runners.items()},
        rounds=rounds,
        warmup=2,
    )
    return {name: (times[name].median / k, times[name].cpu_median / k) for name, (_, k, _) in runners.items()}


def torch_block(device: str) -> Callable[[Any], Any]:
    import torch

    return (lambda _: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda out: out.item())


def geojax_name(k: int, devices: int, norm: str | None = None) -> str:
    split = f", {devices} CPU devices" if devices > 1 else ""
    fused = f", norm={norm}" if norm not in (None, "batch") else ""
    return f"geojax (device feed, {k} step{'s' if k > 1 else ''}/call{split}{fused})"


def norm_variants(case: Case, norms: list[str]) -> list[Case]:
    """``case`` with each batch norm of ``norms`` (``batch``, ``fused_batch``) where its encoder uses batch
    norm; ``case`` alone otherwise."""
    own = case.cfg.norm or ("batch" if case.cfg.encoder.startswith("resnet") else "none")
    if own != "batch":
        return [case]
    return [dataclasses.replace(case, cfg=dataclasses.replace(case.cfg, norm=norm)) for norm in norms]


def compare(
    cases: list[Case], args: argparse.Namespace, *, device: str, peak: float | None
) -> tuple[list[dict], dict[str, dict[str, tuple[Callable[[], Any], int, Callable]]]]:
    """Print, per case, the interleaved medians of geojax at each ``--steps-per-call`` and of PyTorch in
    each ``--torch-modes`` mode, and the ratio of the best of each; return them, one dict per case, and per
    case the best geojax and best PyTorch runners (name → (call, steps per call, block))."""
    results, calls = [], {}
    header = ["model", "step", "steps/s", "images/s", "view-images/s", "ms/step", "CPU s/step", "MFU"]
    header.append("best geojax ×")
    for case in cases:
        cfg = case.cfg
        runners = {}
        for variant in norm_variants(case, args.norms):
            for k in args.steps_per_call:
                call, flops_of, _ = geojax_call(variant, k, args.cpu_devices)
                runners[geojax_name(k, args.cpu_devices, variant.cfg.norm)] = (call, k, jax.block_until_ready)
        failed = {}
        for mode in args.torch_modes if args.torch is not None else ():
            try:
                one = torch_step(case, device, mode=mode)
                torch_block(device)(one())  # the first call compiles: a mode that fails is reported
            except Exception as err:  # noqa: BLE001 (any failure of a peer's compiler: its row says which)
                failed[f"PyTorch {mode}"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
                continue
            runners[f"PyTorch {mode}"] = (one, 1, torch_block(device))
        times = step_times(runners, args.repeats, args.steps)
        flops = flops_of() if peak else None
        ours = min((wall, name) for name, (wall, _) in times.items() if name.startswith("geojax"))
        theirs = min(
            ((wall, name) for name, (wall, _) in times.items() if name.startswith("PyTorch")), default=None
        )
        rows, figures = [], []
        for name, (wall, cpu) in times.items():
            images = cfg.batch_size / wall
            figures.append(
                {
                    "step": name,
                    "steps_per_s": 1 / wall,
                    "images_per_s": images,
                    "view_images_per_s": images * cfg.views,
                    "ms_per_step": 1e3 * wall,
                    "cpu_s_per_step": cpu,
                    "mfu_percent": flops and 100 * flops / wall / peak,
                    "over_best_geojax": None if name.startswith("geojax") else wall / ours[0],
                }
            )
            rows.append(
                [case.name, name, f"{1 / wall:.1f}", f"{images:.0f}", f"{images * cfg.views:.0f}"]
                + [f"{1e3 * wall:.2f}", f"{cpu:.4f}", flops and f"{100 * flops / wall / peak:.1f} %"]
                + [None if name.startswith("geojax") else f"{wall / ours[0]:.2f}×"]
            )
        rows += [[case.name, name, why] + [None] * 6 for name, why in failed.items()]
        if args.torch is None:
            rows.append([case.name, "PyTorch eager", "torch not installed"] + [None] * 6)
        print(
            f"\n{case.name}: {cfg.encoder} width {cfg.width}, D={cfg.dim} {cfg.geometry}, {cfg.batch_size} "
            f"images × {cfg.views} views per step, {cfg.precision}; medians of {args.repeats} interleaved "
            f"rounds of ~{args.steps} steps"
            + (f"; {flops / 1e12:.3f} TFLOP per step (XLA's count, the same for every row)" if flops else "")
        )
        print(markdown_table(header, rows, align="llrrrrrrr"))
        ratio = "–" if theirs is None else f"{theirs[0] / ours[0]:.2f}×"
        versus = "" if theirs is None else f" ({ours[1]} vs {theirs[1]})"
        print(f"ratio best geojax / best PyTorch ({case.name}): {ratio}{versus} (target {args.target}×)")
        results.append(
            {
                "model": case.name,
                "encoder": cfg.encoder,
                "width": cfg.width,
                "dim": cfg.dim,
                "batch": cfg.batch_size,
                "views": cfg.views,
                "precision": cfg.precision,
                "tflop_per_step": flops and flops / 1e12,
                "rows": figures,
                "failed": failed,
                "best_geojax": ours[1],
                "best_torch": None if theirs is None else theirs[1],
                "best_torch_over_best_geojax": None if theirs is None else theirs[0] / ours[0],
            }
        )
        calls[case.name] = {name: runners[name] for name in (ours[1], theirs and theirs[1]) if name}
    return results, calls


# What a GPU kernel does, by its name (first match): cuDNN's convolutions (fprop, dgrad, wgrad) and Triton's
# convolution templates; matrix products (cuBLAS, cuBLASLt's nvjet, CUTLASS, XLA's and Triton's GEMMs);
# reductions (XLA's reduce fusions, Inductor's reduction kernels); element-wise work (XLA's loop fusions,
# Inductor's pointwise kernels); copies. Inductor names a fused kernel after the operations it fuses, so a
# pointwise kernel of a convolution's backward says "convolution_backward" and is no product: its prefix
# decides first.
KERNEL_KINDS = (
    ("convolution", re.compile(r"^triton_convolution|fprop|dgrad|wgrad|cudnn.*conv", re.IGNORECASE)),
    ("reduction", re.compile(r"^triton_(red|per)_|^input_reduce|reduce|reduction", re.IGNORECASE)),
    ("element-wise", re.compile(r"^triton_poi_|^loop_|^wrapped_|elementwise", re.IGNORECASE)),
    ("matrix product", re.compile(r"^triton_b?mm|^triton_tem|gemm|nvjet|cutlass|wgmma|matmul|cublas", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy|transpose", re.IGNORECASE)),
)
PRODUCT_KINDS = ("convolution", "matrix product")


def kernel_kind(name: str) -> str:
    """The first of :data:`KERNEL_KINDS` whose pattern the kernel ``name`` matches, else ``"other"``."""
    return next((kind for kind, pattern in KERNEL_KINDS if pattern.search(name)), "other")


def kernel_summary(kernels: list[tuple[str, float, float]], steps: int, top: int = 12) -> dict:
    """Where ``steps`` steps' device time goes, from their kernels ``(name, start µs, duration µs)``, as ms
    per step: by :func:`kernel_kind`, products (:data:`PRODUCT_KINDS`) against the rest, the device's busy
    time (the union of the kernels) and the window from the first kernel's start to the last one's end, and
    the ``top`` kernels by time."""
    by_name: collections.Counter = collections.Counter()
    by_kind: collections.Counter = collections.Counter()
    for name, _, dur in kernels:
        by_name[name] += dur
        by_kind[kernel_kind(name)] += dur
    spans = [(start, start + dur) for _, start, dur in kernels]
    products = sum(by_kind[kind] for kind in PRODUCT_KINDS)
    return {
        "steps": steps,
        "kernels_per_step": len(kernels) / steps,
        "products_ms": products / 1e3 / steps,
        "rest_ms": (sum(by_kind.values()) - products) / 1e3 / steps,
        "kinds_ms": {kind: t / 1e3 / steps for kind, t in by_kind.most_common()},
        "busy_ms": busy_time(spans) / 1e3 / steps,
        "window_ms": (max(end for _, end in spans) - min(start for start, _ in spans)) / 1e3 / steps,
        "top": [
            {"kernel": name[:160], "ms_per_step": t / 1e3 / steps, "kind": kernel_kind(name)}
            for name, t in by_name.most_common(top)
        ],
    }


def trace_events(call: Callable[[], Any], calls: int, keep: str | None, *, warmup: int = 1) -> list[dict]:
    """The perfetto trace events of ``calls`` calls of ``call`` (after ``warmup`` untraced calls) under
    ``jax.profiler``; the compressed trace is copied to ``keep`` when given."""
    for _ in range(warmup):
        jax.block_until_ready(call())
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(call())
        (path,) = glob.glob(f"{folder}/**/perfetto_trace.json.gz", recursive=True)
        if keep:
            shutil.copy(path, keep)
        with gzip.open(path) as f:
            trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def busy_time(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def kernel_split(events: list[dict], steps: int, top: int = 12) -> dict | None:
    """:func:`kernel_summary` of a ``jax.profiler`` perfetto trace's device kernels: the complete events
    (durations in µs) on the GPU process's stream threads (all its threads where none is named a stream).
    None when the trace holds no device process (a CPU run) or no kernel."""
    process = {e["pid"]: e["args"].get("name", "") for e in events if e.get("name") == "process_name"}
    devices = {pid for pid, name in process.items() if re.search(r"GPU|/device:", name)}
    threads = {
        (e["pid"], e["tid"]): e["args"].get("name", "") for e in events if e.get("name") == "thread_name"
    }
    streams = {key for key, name in threads.items() if key[0] in devices and name.startswith("Stream")}
    kernels = [
        (e["name"], e["ts"], e["dur"])
        for e in events
        if e.get("ph") == "X" and e.get("pid") in devices and (not streams or (e["pid"], e["tid"]) in streams)
    ]
    return kernel_summary(kernels, steps, top) if kernels else None


def torch_kernels(one: Callable[[], Any], steps: int, top: int = 12) -> dict:
    """:func:`kernel_summary` of ``steps`` PyTorch steps (after two unprofiled ones) from ``torch.profiler``'s
    device kernel events (not its operators, whose device time is the same kernels')."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        one()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            one()
        torch.cuda.synchronize()
    kernels = [
        (e.name, e.time_range.start, e.time_range.elapsed_us())
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    ]
    return kernel_summary(kernels, steps, top)


def profile_step(
    case: Case, runners: dict[str, tuple[Callable[[], Any], int, Callable]], args: argparse.Namespace
) -> dict:
    """Where the best geojax step's and the best PyTorch step's device time goes (:func:`kernel_split`,
    :func:`torch_kernels`), printed and returned; the geojax trace is kept at ``--trace`` when given."""
    out: dict[str, Any] = {"model": case.name}
    header = ["step", "products ms", "rest ms", "busy ms", "window ms", "kernels/step", "by kind, ms"]
    rows = []
    for name, (call, per_call, _) in runners.items():
        split = None
        if name.startswith("geojax"):
            calls = max(1, 20 // per_call)
            split = kernel_split(trace_events(call, calls, args.trace), calls * per_call)
            out["geojax"] = {"step": name, **(split or {})}
        elif args.torch is not None:
            split = torch_kernels(call, 20)
            out["torch"] = {"step": name, **split}
        if split:
            keys = ("products_ms", "rest_ms", "busy_ms", "window_ms", "kernels_per_step")
            kinds = ", ".join(f"{kind} {t:.2f}" for kind, t in split["kinds_ms"].items())
            rows.append([name, *(f"{split[k]:.2f}" for k in keys), kinds])
    print(f"\nwhere the device time goes ({case.name}, ms per step):")
    print(markdown_table(header, rows, align="lrrrrrl"))
    for side in ("geojax", "torch"):
        for row in out.get(side, {}).get("top", []):
            print(f"  {side} {row['ms_per_step']:8.3f} ms  {row['kind']:<14} {row['kernel']}")
    return out


def replica_rates(case: Case, counts: list[int], k: int, args: argparse.Namespace) -> dict:
    """Steps/s of the several-seeds step (``counts`` seeds in one program, each drawing its own batches)
    against as many single-seed runs one after another; printed and returned."""
    cfg = case.cfg
    runners = {
        r: (geojax_call(case, k, args.cpu_devices, replicas=r)[0], k, jax.block_until_ready) for r in counts
    }
    times = step_times(runners, args.repeats, args.steps)
    one = times[1][0] if 1 in times else None
    rows, figures = [], []
    for r, (wall, cpu) in times.items():
        figures.append(
            {
                "replicas": r,
                "steps_per_s": 1 / wall,
                "replica_steps_per_s": r / wall,
                "images_per_s": r * cfg.batch_size / wall,
                "cpu_s_per_step": cpu,
                "vs_one_seed_at_a_time": one and r * one / wall,
            }
        )
        rows.append(
            [str(r), f"{1 / wall:.1f}", f"{r / wall:.1f}", f"{r * cfg.batch_size / wall:.0f}", f"{cpu:.4f}"]
            + [one and f"{r * one / wall:.2f}×"]
        )
    print(
        f"\nseveral seeds in one program ({case.name}, {k} steps/call; medians of {args.repeats} interleaved "
        f"rounds of ~{args.steps} steps):"
    )
    header = ["replicas", "steps/s", "replica-steps/s", "images/s", "CPU s/step", "vs one seed at a time"]
    print(markdown_table(header, rows, align="rrrrrr"))
    return {"model": case.name, "steps_per_call": k, "rows": figures}


def blocked_supcon(n: int, dim: int, block: int) -> dict:
    """Blocked SupCon fwd+bwd at global batch ``n``: time, compiled temporary memory, device peak (printed
    and returned)."""
    key = jax.random.key(0)
    e = jax.random.normal(key, (n, dim), jnp.float32)
    y = jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, 10)
    fn = jax.jit(jax.value_and_grad(lambda e: losses.supcon_blocked(e, y, temperature=0.1, block_size=block)))
    stats = fn.lower(e).compile().memory_analysis()
    t = measure(fn, e, repeats=3, warmup=1)
    peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")  # the process's so far
    print(f"\nblocked SupCon fwd+bwd, N={n:,}, D={dim}, block {block}:")
    header = ["ms", "compiled temporary MiB", "device peak MiB", "one [N, N] fp32 MiB"]
    temp = None if stats is None else f"{stats.temp_size_in_bytes / 2**20:,.1f}"
    cells = [f"{1e3 * t.median:.1f}", temp, peak and f"{peak / 2**20:,.1f}", f"{n * n * 4 / 2**20:,.0f}"]
    print(markdown_table(header, [cells], align="rrrr"))
    return {
        "N": n,
        "D": dim,
        "block": block,
        "ms": 1e3 * t.median,
        "temporary_mib": None if stats is None else stats.temp_size_in_bytes / 2**20,
        "device_peak_mib": peak and peak / 2**20,
        "nn_matrix_mib": n * n * 4 / 2**20,
    }


def _counts(text: str, name: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{name} must list positive integers, got {text!r}")
    return values


def result_name(args: argparse.Namespace) -> str:
    """The results file's stem for this run's variant: ``train_step`` with ``_gpu``, ``_cpu_devices_N`` or
    ``_one_thread`` appended as given."""
    name = "train_step_gpu" if args.gpu else "train_step"
    if args.cpu_devices > 1:
        name += f"_cpu_devices_{args.cpu_devices}"
    return name + ("_one_thread" if args.one_thread else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    ap.add_argument("--gpu", action="store_true", help="ResNet-18 recipe on one accelerator (see above)")
    ap.add_argument("--models", default="mlp,cnn", help="CPU models to compare (mlp, cnn)")
    ap.add_argument("--repeats", type=int, default=0, help="interleaved rounds (default 5, quick 2)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round (default 100, quick 10)")
    ap.add_argument(
        "--steps-per-call",
        default="",
        help="geojax steps per dispatch, a comma list (default 10; --gpu 1,10)",
    )
    ap.add_argument(
        "--torch-modes",
        default="",
        help=f"PyTorch steps to time, a comma list of {', '.join(TORCH_MODES)} (default eager; --gpu all)",
    )
    ap.add_argument(
        "--replicas", default="", help="also time the several-seeds step at these seed counts (--gpu: 1,3,8)"
    )
    ap.add_argument(
        "--norms",
        default="",
        help="batch norms to time geojax's ResNet with, a comma list of batch, fused_batch (default batch; "
        "--gpu both)",
    )
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="device peak for MFU (default: by model)")
    ap.add_argument(
        "--one-thread",
        action="store_true",
        help="CPU: the process pinned to one core (XLA's pools and torch)",
    )
    ap.add_argument(
        "--cpu-devices",
        type=int,
        default=1,
        help="CPU: split the host into this many one-thread XLA devices, geojax's step data-parallel",
    )
    ap.add_argument("--trace", default=None, help="--gpu: keep geojax's profiled trace (.json.gz) here")
    add_out_argument(ap)
    args = ap.parse_args()
    if args.cpu_devices < 1:
        ap.error(f"--cpu-devices must be at least 1, got {args.cpu_devices}")
    try:
        args.steps_per_call = _counts(
            args.steps_per_call or ("1,10" if args.gpu else "10"), "--steps-per-call"
        )
        args.replicas = (
            _counts(args.replicas, "--replicas") if args.replicas else [1, 3, 8] if args.gpu else []
        )
    except argparse.ArgumentTypeError as err:
        ap.error(str(err))
    args.norms = (args.norms or ("batch,fused_batch" if args.gpu else "batch")).split(",")
    if unknown := sorted(set(args.norms) - {"batch", "fused_batch"}):
        ap.error(f"--norms: unknown {unknown}; choose from batch, fused_batch")
    args.torch_modes = (args.torch_modes or ("eager" if not args.gpu else ",".join(TORCH_MODES))).split(",")
    if unknown := sorted(set(args.torch_modes) - set(TORCH_MODES)):
        ap.error(f"--torch-modes: unknown {unknown}; choose from {', '.join(TORCH_MODES)}")
    args.target = 1.2 if args.gpu else 1.5
    mfu_target = 30.0 if args.gpu else None  # percent of the device's dense bf16 peak
    flags = []  # XLA's, set before JAX starts its CPU backend
    if args.cpu_devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={args.cpu_devices}")
    if args.one_thread:  # YNNPACK's thread pool ignores Eigen's flag: the affinity holds it to one core
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if args.one_thread or args.cpu_devices > 1:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    if flags:
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()
    machine = machine_info()  # after the affinity and XLA's flags, before any work
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.steps = args.steps or (10 if args.quick else 100)
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {jax.device_count()} device(s)")
    if args.gpu and dev.platform == "cpu":
        print("--gpu: JAX sees no accelerator here: the accelerator's recipe runs on the CPU (a dry run)")
    try:
        import torch
    except ImportError:
        args.torch = None
        print("torch not installed: no peer")
        device = "cpu"
    else:
        args.torch = torch.__version__
        device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 products, as XLA's default on GPUs
        if args.one_thread:
            torch.set_num_threads(1)
        name = torch.cuda.get_device_name() if device == "cuda" else f"{torch.get_num_threads()} threads"
        print(f"torch {torch.__version__} on {device} ({name})")
    if args.gpu:
        peak = args.peak_tflops * 1e12 or peak_bf16(dev.device_kind)
        print(
            f"MFU against {peak / 1e12:.0f} TFLOP/s dense bf16"
            if peak
            else "MFU: peak unknown (--peak-tflops)"
        )
        blocked = blocked_supcon(4096 if args.quick else 65_536, 16, 512 if args.quick else 4096)  # its peak
        cases = [gpu_case(args.quick)]
    else:
        peak, blocked = None, None
        cases = [c for c in cpu_cases(args.quick) if c.name in args.models.split(",")]
    figures = {
        "rounds": args.repeats,
        "steps": args.steps,
        "torch_threads": None if args.torch is None else torch.get_num_threads(),
        "target": args.target,
        "mfu_target_percent": mfu_target,
        "peak_tflops": peak and peak / 1e12,
        "blocked_supcon": blocked,
    }
    folder = destination(args.out, quick=args.quick)

    def save() -> None:  # after each part, so that a run stopped part-way keeps what it measured
        if folder is not None:
            path = write_result(
                result_name(args),
                figures,
                argv=invocation("benchmarks.train_step"),
                machine=machine,
                folder=folder,
            )
            print(f"wrote {path}")

    figures["cases"], best = compare(cases, args, device=device, peak=peak)
    save()
    if args.gpu and device == "cuda" and jax.default_backend() == "gpu":
        try:
            figures["profiles"] = [profile_step(case, best[case.name], args) for case in cases]
        except Exception as err:  # noqa: BLE001 (a profiler the machine lacks: the timings still stand)
            figures["profiles"] = f"failed: {type(err).__name__}: {err}"
            print(f"profile {figures['profiles']}")
        save()
    if args.replicas:
        # On a GPU the several-seeds step is timed on the recipe that runs seeds in one program at the
        # paper scale: Korman 2021's MSimCLR.
        timed = [msimclr_case(args.quick)] if args.gpu else cases
        figures["replicas"] = [replica_rates(c, args.replicas, max(args.steps_per_call), args) for c in timed]
        save()


if __name__ == "__main__":
    main()
