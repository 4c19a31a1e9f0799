"""Training-step throughput: the geojax train step next to the same step in PyTorch, measured in one run.

The geojax side is the train app's own step (train.step): the training images held on the device, each
step's batch drawn and gathered inside the jitted step (the device feed), ``--steps-per-call`` steps per
dispatch (one ``lax.scan``), the state's buffers donated. The PyTorch side holds the same images as a tensor
and draws each batch with ``torch.randperm`` and indexing. Both draw a uniform batch without replacement,
convert uint8 to float, make two views (identical copies: augment=none, so neither side augments), and run
forward, loss, backward and the optimiser update of the same model and objective. Every figure is the
median over ``--repeats`` interleaved rounds (geojax, PyTorch, geojax, ...), so a machine shared with other
work loads both sides alike; CPU seconds per step (all threads) are printed next to the wall clock, and
``--one-thread`` pins the process to one core, so both run on one (an oversubscribed machine stalls OpenMP's
multi-thread barriers). ``--cpu-devices N`` splits the host into N one-thread XLA devices and runs geojax's
step data-parallel over them (each device takes 1/N of the global batch; the losses gather over the
devices), where XLA otherwise runs one device's operations on a shared thread pool.

CPU (default), each against PyTorch eager (``--torch-compile`` adds torch.compile):

- ``mlp``: the digits recipe, MLP 64 → 512 → 512, Stowell 2026's head (512 → 4D → D, D = 64) with the
  torusN projection, SupCon (τ = 0.1) + 0.1 · KoLeo per view, AdamW, global-norm clipping at 100, 256
  images × 2 views per step from the 1,347 digits;
- ``cnn``: the small CNN (32, 64, 128 channels, 3×3, max-pool) on 28×28×1 images (MNIST-sized, 4,096
  synthetic uint8 images), the same head and objective, 128 images × 2 views per step.

``--gpu``: Stowell 2026's CIFAR recipe on one accelerator: ResNet-18 (CIFAR stem, batch norm) on 32×32×3
(50,000 synthetic uint8 images held on the device), torusN head D = 16, SupCon (τ = 0.1, × τ/0.07) + KoLeo
per view, SGD, element-wise clipping at 100, bf16 compute, 512 images × 2 views per step; PyTorch eager and
torch.compile with autocast bf16 and channels_last. Prints images/s, step time and MFU (the step's FLOPs
from XLA's cost analysis over the device's peak bf16 rate), then blocked SupCon fwd+bwd at a global batch of
65,536: time and peak memory. ``--quick`` shrinks every size to seconds (also on a CPU, as a smoke test).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geojax import losses, parallel
from train import config, data, step
from train.tables import markdown_table
from train.timing import measure

# Peak dense bf16 rates (FLOP/s) by device kind, for MFU; --peak-tflops overrides.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12, "L4": 121e12, "TPU v4": 275e12}


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
        width=8 if quick else 64,
        precision="bf16" if jax.default_backend() != "cpu" else "fp32",
    )
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    return Case("resnet18", cfg, images, rng.integers(0, 10, n).astype(np.int32))


def geojax_call(
    case: Case, k: int, devices: int = 1
) -> tuple[Callable[[], Any], Callable[[], float | None], Callable[[], str]]:
    """``(call, flops, hlo)``: one dispatch of ``k`` steps of the app's step (device feed, data-parallel over
    ``devices`` devices, donated state), the FLOPs of one step by XLA's cost analysis (None when
    unavailable), and the compiled HLO text of ``call``."""
    cfg = case.cfg
    if cfg.batch_size % devices:
        raise ValueError(
            f"{case.name}: batch_size {cfg.batch_size} must be divisible by the {devices} devices"
        )
    graphdef, state = step.init_state(cfg, case.images.shape[1:])
    mesh = parallel.make_mesh(devices)
    per_device = step.make_step(cfg, graphdef, step.make_optimizer(cfg))
    batches = step.make_batches(cfg)
    run = step.distribute(step.make_call(per_device, length=k, batches=batches), mesh=mesh)
    tables = step.replicate({"images": case.images, **data.label_tables(case.labels)}, mesh)
    box = [step.replicate(state, mesh)]

    def call():
        box[0], metrics = run(box[0], tables, {})
        return metrics

    def flops():
        # One step, straight-line (XLA counts a scan's body once, whatever its trip count), lowered for the
        # host CPU: on GPUs convolutions become library calls that XLA's cost analysis does not count.
        cpu = jax.make_mesh((1,), mesh.axis_names, devices=jax.devices("cpu")[:1])
        one = step.distribute(step.make_call(per_device, length=1, batches=batches), mesh=cpu)
        on_cpu = jax.sharding.NamedSharding(cpu, jax.sharding.PartitionSpec())

        def spec(x):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on_cpu)

        cost = one.lower(jax.tree.map(spec, box[0]), jax.tree.map(spec, tables), {}).cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return cost["flops"] if cost and cost.get("flops") else None

    def hlo():
        return run.lower(box[0], tables, {}).compile().as_text()

    return call, flops, hlo


def torch_encoder(cfg: config.Config, shape: tuple[int, int, int]) -> tuple[Any, int]:
    """(encoder, features): geojax's MLP, small CNN or ResNet-18 (CIFAR stem, batch norm) in PyTorch."""
    from torch import nn

    h, w, c = shape
    if cfg.encoder == "mlp":
        layers = [nn.Flatten(), nn.Linear(h * w * c, cfg.width), nn.ReLU(), nn.Linear(cfg.width, cfg.width)]
        return nn.Sequential(*layers, nn.ReLU()), cfg.width
    if cfg.encoder == "cnn":
        layers, size, cin = [], min(h, w), c
        for cout in (cfg.width, 2 * cfg.width, 4 * cfg.width):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
            if size > 4:
                layers.append(nn.MaxPool2d(2))
                size //= 2
            cin = cout
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()), cin

    class Block(nn.Module):  # He et al. 2016's basic block, as geojax.models
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.shortcut = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):
            return (self.body(x) + self.shortcut(x)).relu()

    layers, cin = (
        [nn.Conv2d(c, cfg.width, 3, 1, 1, bias=False), nn.BatchNorm2d(cfg.width), nn.ReLU()],
        cfg.width,
    )
    for stage in range(4):
        for i in range(2):
            layers.append(Block(cin, cfg.width * 2**stage, 2 if stage > 0 and i == 0 else 1))
            cin = cfg.width * 2**stage
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()), cin


def torch_step(case: Case, device: str, *, compile_: bool) -> Callable[[], Any]:
    """The same step in PyTorch: encoder + Stowell 2026 head + torusN, SupCon (× τ/τ_base) + KoLeo per view,
    the config's optimiser and clipping; autocast bf16 and channels_last for convolutions in bf16."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    cfg = case.cfg
    torch.manual_seed(0)
    encoder, features = torch_encoder(cfg, case.images.shape[1:])
    d = cfg.dim
    model = nn.Sequential(encoder, nn.Linear(features, 4 * d), nn.ReLU(), nn.Linear(4 * d, d)).to(device)
    bf16 = cfg.precision == "bf16"
    channels_last = bf16 and cfg.encoder != "mlp"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = list(model.parameters())
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)  # as optax.sgd: no weight decay
    images = torch.as_tensor(case.images, device=device).permute(0, 3, 1, 2).contiguous()  # NCHW uint8
    labels = torch.as_tensor(case.labels, device=device, dtype=torch.int64)
    n, views, scale = cfg.batch_size, cfg.views, cfg.temperature / (cfg.base_temperature or cfg.temperature)
    eye = torch.eye(views * n, dtype=torch.bool, device=device)

    def loss_of(x, y):
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            raw = model(x)
        raw = raw.float().view(-1, d // 2, 2)  # torusN: each pair on a circle of radius √(2/D) (eq. 3)
        z = F.normalize(raw, dim=2).view(-1, d) * math.sqrt(2 / d)
        zn = F.normalize(z, dim=1)
        logits = (zn @ zn.T / cfg.temperature).masked_fill(eye, -1e9)
        log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        pos = (y[:, None] == y[None, :]) & ~eye
        per_anchor = (log_prob * pos).sum(1) / pos.sum(1).clamp(min=1)
        supcon = -scale * per_anchor[pos.any(1)].mean()
        koleo = 0.0
        for v in range(views):  # KoLeo of each view's rows (Sablayrolles et al. 2019), summed
            u = zn[v * n : (v + 1) * n]
            nearest = (u @ u.T).masked_fill(eye[:n, :n], -2.0).argmax(dim=1)
            koleo = koleo - torch.log((u - u[nearest]).norm(dim=1) + cfg.koleo_eps).mean()
        return supcon + cfg.koleo * koleo

    if compile_:
        loss_of = torch.compile(loss_of)

    def one():
        idx = torch.randperm(len(images), device=device)[:n]
        x = images[idx].float().mul_(1 / 255).repeat(views, 1, 1, 1)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, labels[idx].repeat(views))
        loss.backward()
        if cfg.clip_mode == "value":
            torch.nn.utils.clip_grad_value_(params, cfg.clip)
        else:
            torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        return loss

    return one


def interleaved(runners: dict[str, tuple[Callable[[], Any], int, Callable]], rounds: int, steps: int) -> dict:
    """Seconds per step (wall, CPU) of each runner, median over ``rounds`` rounds that visit every runner in
    turn; ``runners``: name → (call, steps per call, block)."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    for r in range(rounds):
        for name, (call, per_call, block) in runners.items():
            number = max(1, steps // per_call)
            t = measure(call, repeats=1, warmup=2 if r == 0 else 0, number=number, block=block)
            samples[name].append((t.median / per_call, t.cpu_median / per_call))
    return {
        name: (statistics.median(s for s, _ in got), statistics.median(c for _, c in got))
        for name, got in samples.items()
    }


def torch_block(device: str) -> Callable[[Any], Any]:
    import torch

    return (lambda _: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda out: out.item())


def compare(cases: list[Case], args: argparse.Namespace, *, device: str, peak: float | None) -> None:
    """Print, per case, the interleaved medians of geojax and the PyTorch steps, and the ratio."""
    header = ["model", "step", "steps/s", "images/s", "ms/step", "CPU s/step", "MFU", "geojax ×"]
    split = f", {args.cpu_devices} CPU devices" if args.cpu_devices > 1 else ""
    ours = f"geojax (device feed, {args.steps_per_call} steps/call{split})"
    for case in cases:
        cfg, k = case.cfg, args.steps_per_call
        call, flops_of, _ = geojax_call(case, k, args.cpu_devices)
        runners = {ours: (call, k, jax.block_until_ready)}
        if args.torch is not None:
            runners["PyTorch eager"] = (torch_step(case, device, compile_=False), 1, torch_block(device))
        if args.torch is not None and args.torch_compile:
            runners["PyTorch torch.compile"] = (
                torch_step(case, device, compile_=True),
                1,
                torch_block(device),
            )
        times = interleaved(runners, args.repeats, args.steps)
        flops = flops_of() if peak else None
        rows = [
            [
                case.name,
                name,
                f"{1 / wall:.1f}",
                f"{cfg.batch_size * cfg.views / wall:.0f}",
                f"{1e3 * wall:.2f}",
            ]
            + [f"{cpu:.4f}", flops and f"{100 * flops / wall / peak:.1f} %"]
            + [None if name == ours else f"{wall / times[ours][0]:.2f}×"]
            for name, (wall, cpu) in times.items()
        ]
        if args.torch is None:
            rows.append([case.name, "PyTorch eager"] + [None] * 6)
        print(
            f"\n{case.name}: {cfg.encoder} width {cfg.width}, D={cfg.dim} {cfg.geometry}, {cfg.batch_size} "
            f"images × {cfg.views} views per step, {cfg.precision}; medians of {args.repeats} interleaved "
            f"rounds of ~{args.steps} steps"
        )
        print(markdown_table(header, rows, align="llrrrrrr"))
        ratio = "–" if args.torch is None else f"{times['PyTorch eager'][0] / times[ours][0]:.2f}×"
        print(f"ratio geojax/torch ({case.name}): {ratio} (target 1.5×)")


def blocked_supcon(n: int, dim: int, block: int) -> None:
    """Blocked SupCon fwd+bwd at global batch ``n``: time, compiled temporary memory, device peak."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    ap.add_argument("--gpu", action="store_true", help="ResNet-18 recipe on one accelerator (see above)")
    ap.add_argument("--models", default="mlp,cnn", help="CPU models to compare (mlp, cnn)")
    ap.add_argument("--repeats", type=int, default=0, help="interleaved rounds (default 5, quick 2)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round (default 100, quick 10)")
    ap.add_argument("--steps-per-call", type=int, default=10, help="geojax steps per dispatch")
    ap.add_argument(
        "--torch-compile", action="store_true", help="also time torch.compile (always with --gpu)"
    )
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="device peak for MFU (default: by kind)")
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
    args = ap.parse_args()
    if args.cpu_devices < 1:
        ap.error(f"--cpu-devices must be at least 1, got {args.cpu_devices}")
    flags = []  # XLA's, set before JAX starts its CPU backend
    if args.cpu_devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={args.cpu_devices}")
    if args.one_thread:  # YNNPACK's thread pool ignores Eigen's flag: the affinity holds it to one core
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if args.one_thread or args.cpu_devices > 1:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    if flags:
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.steps = args.steps or (10 if args.quick else 100)
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {jax.device_count()} device(s)")
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
        print(f"torch {torch.__version__} on {device}, {torch.get_num_threads()} threads")
    if args.gpu:
        args.torch_compile = True
        peak = args.peak_tflops * 1e12 or next(
            (v for k, v in PEAK_BF16.items() if k in dev.device_kind), None
        )
        blocked_supcon(4096 if args.quick else 65_536, 16, 512 if args.quick else 4096)  # first: its peak
        compare([gpu_case(args.quick)], args, device=device, peak=peak)
        return
    wanted = args.models.split(",")
    compare([c for c in cpu_cases(args.quick) if c.name in wanted], args, device=device, peak=None)


if __name__ == "__main__":
    main()
