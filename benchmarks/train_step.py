"""Training-step throughput: the geojax jitted data-parallel step vs an equivalent PyTorch step, same run.

Default: the digits recipe — MLP 64 → 512 → 512, seed 000 head (512 → 4D → D, D = 64) with the torusN
projection, SupCon (τ = 0.1) + 0.1 · KoLeo, AdamW, global-norm clipping at 100, 256 images × 2 views per
step. Both steps take the same pre-made views (augment=none on the geojax side, so neither side augments)
and do forward, loss, backward and the optimiser update. Prints steps/s for each and the ratio.

``--resnet18-gpu``: images/s of the geojax step for ResNet-18 (CIFAR stem, batch norm) on 32×32×3 at 512
images per step (256 × 2 views), SupCon on the sphere, bf16 compute on accelerators (geojax only: no
torchvision peer here). ``--quick`` shrinks everything to a few seconds.
"""

from __future__ import annotations

import argparse
import math

import jax
import numpy as np

from geojax import parallel
from train import config, step
from train.tables import markdown_table
from train.timing import measure


def steps_per_s(one, steps: int, block=jax.block_until_ready) -> float:
    """Throughput of ``one()``: ``steps`` back-to-back calls after two warm-up calls, then one wait."""
    return 1 / measure(one, repeats=1, warmup=2, number=steps, block=block).median


def geojax_steps_per_s(cfg: config.Config, images: np.ndarray, labels: np.ndarray, steps: int) -> float:
    """The train app's own step (train.step.make_step under parallel.data_parallel on one device)."""
    graphdef, state = step.init_state(cfg, images.shape[1:])
    run = parallel.data_parallel(
        step.make_step(cfg, graphdef, step.make_optimizer(cfg)),
        mode=cfg.parallel,
        mesh=parallel.make_mesh(1),
        donate_state=True,
    )
    batch = {"x": images, "y": labels, "pos": np.arange(len(labels), dtype=np.int32)}
    box = [state]

    def one():
        box[0], _ = run(box[0], batch)
        return box[0]

    return steps_per_s(one, steps)


def torch_steps_per_s(
    cfg: config.Config, images: np.ndarray, labels: np.ndarray, steps: int, device: str
) -> float:
    """The same step in PyTorch: MLP + seed 000 head + torusN, SupCon + KoLeo, AdamW, clip_grad_norm_."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    d = cfg.dim
    enc = nn.Sequential(
        nn.Flatten(),
        nn.Linear(int(np.prod(images.shape[1:])), cfg.width),
        nn.ReLU(),
        nn.Linear(cfg.width, cfg.width),
        nn.ReLU(),
    )
    feats = cfg.width
    head = nn.Sequential(nn.Linear(feats, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
    model = nn.Sequential(enc, head).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    x = torch.as_tensor(images, device=device)
    x = torch.cat([x, x])  # two views
    y = torch.as_tensor(np.tile(labels, 2), device=device)
    n = len(y)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    pos = (y[:, None] == y[None, :]) & ~eye

    def project(raw):  # torusN: each adjacent pair L2-normalised, scale √(2/D) (seed 000 eq. 3)
        return F.normalize(raw.view(n, d // 2, 2), dim=2).view(n, d) * math.sqrt(2 / d)

    def supcon(z):
        zn = F.normalize(z, dim=1)
        logits = (zn @ zn.T / cfg.temperature).masked_fill(eye, -1e9)
        logits = logits - logits.max(dim=1, keepdim=True).values.detach()
        log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        per_anchor = (log_prob * pos).sum(1) / pos.sum(1).clamp(min=1)
        return -per_anchor[pos.any(1)].mean()

    def koleo(z):
        u = F.normalize(z, dim=1)
        dots = (u @ u.T).masked_fill(eye, -2.0)
        nn_idx = dots.argmax(dim=1)
        return -torch.log((u - u[nn_idx]).norm(dim=1) + 1e-8).mean()

    def one():
        opt.zero_grad(set_to_none=True)
        z = project(model(x))
        loss = supcon(z) + cfg.koleo * koleo(z)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()

    def block(_):
        if device != "cpu":
            torch.cuda.synchronize()

    return steps_per_s(one, steps, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default 200, quick 20)")
    ap.add_argument("--resnet18-gpu", action="store_true", help="ResNet-18, 32×32×3, 512 images per step")
    args = ap.parse_args()
    dev = jax.devices()[0]
    print(
        f"device: jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {jax.device_count()} device(s)"
    )
    rng = np.random.default_rng(0)
    header = ["train step", "steps/s", "images/s"]
    if args.resnet18_gpu:
        per_step = 16 if args.quick else 256
        cfg = config.make(
            preset="supcon_sphere",
            encoder="resnet18",
            width=8 if args.quick else 64,
            dim=128,
            batch_size=per_step,
            augment="none",
            koleo=0.0,
            precision="bf16" if dev.platform != "cpu" else "fp32",
        )
        images = rng.uniform(size=(per_step, 32, 32, 3)).astype(np.float32)
        labels = rng.integers(0, 10, per_step).astype(np.int32)
        steps = args.steps or (3 if args.quick else 50)
        sps = geojax_steps_per_s(cfg, images, labels, steps)
        print(f"ResNet-18 32×32×3, {2 * per_step} images/step ({cfg.precision}), {steps} timed steps:")
        print(markdown_table(header, [["geojax", f"{sps:.2f}", f"{sps * 2 * per_step:.0f}"]], align="lrr"))
        return
    per_step = 64 if args.quick else 256
    cfg = config.make(batch_size=per_step, augment="none", width=128 if args.quick else 512)
    images = rng.uniform(size=(per_step, 8, 8, 1)).astype(np.float32)
    labels = rng.integers(0, 10, per_step).astype(np.int32)
    steps = args.steps or (20 if args.quick else 200)
    ours = geojax_steps_per_s(cfg, images, labels, steps)
    try:
        import torch

        torch_device = "cuda" if torch.cuda.is_available() else "cpu"
        print(f"torch {torch.__version__} on {torch_device}, {torch.get_num_threads()} threads")
        peer = torch_steps_per_s(cfg, images, labels, steps, torch_device)
    except ImportError:
        print("torch not installed: no peer")
        peer = None
    print(
        f"train step, MLP {cfg.width} + torusN D={cfg.dim} + SupCon + KoLeo, {2 * per_step} embeddings/step, "
        f"{steps} timed steps:"
    )
    cells = [
        [name, None if sps is None else f"{sps:.1f}", None if sps is None else f"{sps * 2 * per_step:.0f}"]
        for name, sps in (("geojax", ours), ("torch", peer))
    ]
    print(markdown_table(header, cells, align="lrr"))
    print(f"ratio geojax/torch: {'–' if peer is None else f'{ours / peer:.2f}×'} (target 1.5×)")


if __name__ == "__main__":
    main()
