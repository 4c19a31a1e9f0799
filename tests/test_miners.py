"""geojax.miners: masks equal to loops over pairs and triplets written here and to the pair sets of
pytorch-metric-learning's miners; the pair losses on those masks equal its losses on its miners' pairs."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import losses, miners

# ----------------------------------------------------------------------------------------------------------
# loops: each miner's rule, anchor by anchor


def _candidates(labels, key_labels=None, self_index=None, key_valid=None):
    n = len(labels)
    keys = labels if key_labels is None else key_labels
    own = list(range(n)) if key_labels is None else ([-1] * n if self_index is None else list(self_index))
    valid = np.ones(len(keys), bool) if key_valid is None else key_valid
    for a in range(n):
        pos = [j for j in range(len(keys)) if valid[j] and keys[j] == labels[a] and j != own[a]]
        neg = [j for j in range(len(keys)) if valid[j] and keys[j] != labels[a]]
        yield a, pos, neg


def _as_masks(pairs_pos, pairs_neg, shape):
    pos, neg = np.zeros(shape, bool), np.zeros(shape, bool)
    for a, j in pairs_pos:
        pos[a, j] = True
    for a, j in pairs_neg:
        neg[a, j] = True
    return pos, neg


def loop_multi_similarity(sim, labels, epsilon, **keys):
    kept_pos, kept_neg = [], []
    for a, pos, neg in _candidates(labels, **keys):
        if pos and neg:
            kept_pos += [(a, p) for p in pos if sim[a, p] - epsilon < max(sim[a, q] for q in neg)]
            kept_neg += [(a, q) for q in neg if sim[a, q] + epsilon > min(sim[a, p] for p in pos)]
    return _as_masks(kept_pos, kept_neg, sim.shape)


def loop_pair_margin(sim, labels, pos_margin, neg_margin, **keys):
    kept_pos, kept_neg = [], []
    for a, pos, neg in _candidates(labels, **keys):
        kept_pos += [(a, p) for p in pos if sim[a, p] < pos_margin]
        kept_neg += [(a, q) for q in neg if sim[a, q] > neg_margin]
    return _as_masks(kept_pos, kept_neg, sim.shape)


def loop_triplet_margin(sim, labels, margin, kind, **keys):
    keep = {
        "all": lambda t: t <= margin,
        "hard": lambda t: t <= margin and t <= 0,
        "semihard": lambda t: 0 < t <= margin,
        "easy": lambda t: t > margin,
    }[kind]
    kept_pos, kept_neg = [], []
    for a, pos, neg in _candidates(labels, **keys):
        for p in pos:
            for q in neg:
                if keep(sim[a, p] - sim[a, q]):
                    kept_pos.append((a, p))
                    kept_neg.append((a, q))
    return _as_masks(kept_pos, kept_neg, sim.shape)


def loop_batch_hard(sim, labels, **keys):
    kept_pos, kept_neg = [], []
    for a, pos, neg in _candidates(labels, **keys):
        if pos and neg:
            kept_pos.append((a, min(pos, key=lambda j: (sim[a, j], j))))
            kept_neg.append((a, min(neg, key=lambda j: (-sim[a, j], j))))
    return _as_masks(kept_pos, kept_neg, sim.shape)


# name: (the miner, its non-default values, its loop taking the same keywords)
VALUES = {
    "multi_similarity": ("multi_similarity", {"epsilon": 0.2}, loop_multi_similarity),
    "pair_margin": ("pair_margin", {"pos_margin": 0.6, "neg_margin": 0.1}, loop_pair_margin),
    **{
        f"triplet_{kind}": ("triplet_margin", {"margin": 0.3, "kind": kind}, loop_triplet_margin)
        for kind in miners.TRIPLET_KINDS
    },
    "batch_hard": ("batch_hard", {}, loop_batch_hard),
}
CASES = {
    name: (partial(getattr(miners, fn), **kw), partial(loop, **kw)) for name, (fn, kw, loop) in VALUES.items()
}


def _data(n=14, classes=4, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.integers(0, classes, n)


@pytest.mark.parametrize("name", CASES)
def test_miners_match_loop(name):
    mine, loop = CASES[name]
    x, labels = _data(seed=len(name))
    sim = x @ x.T
    got = jax.jit(mine)(jnp.asarray(sim, jnp.float32), jnp.asarray(labels))
    want = loop(np.asarray(sim, np.float32).astype(np.float64), labels)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == jnp.bool_ and g.shape == sim.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", CASES)
def test_miners_rectangular_keys_and_empty_slots_match_loop(name):
    mine, loop = CASES[name]
    x, labels = _data(n=6, seed=1)
    extra, extra_labels = _data(n=9, seed=2)
    keys, key_labels = np.concatenate([x, extra]), np.concatenate([labels, extra_labels])
    valid = np.ones(15, bool)
    valid[[7, 12]] = False
    sim = np.asarray(x @ keys.T, np.float32)
    for kw in ({"key_labels": key_labels, "self_index": np.arange(6), "key_valid": valid},
               {"key_labels": key_labels}):  # fmt: skip
        got = mine(jnp.asarray(sim), jnp.asarray(labels), **{k: jnp.asarray(v) for k, v in kw.items()})
        want = loop(sim.astype(np.float64), labels, **kw)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_masks_are_subsets_of_the_label_masks_and_vmap():
    sims, ys = [], []
    for seed in range(3):
        x, labels = _data(n=10, seed=seed)
        sims.append(x @ x.T)
        ys.append(labels)
    sims, ys = jnp.asarray(np.stack(sims), jnp.float32), jnp.asarray(np.stack(ys))
    same = ys[:, :, None] == ys[:, None, :]
    eye = jnp.eye(10, dtype=bool)
    for name, (mine, loop) in CASES.items():
        pos, neg = jax.jit(jax.vmap(mine))(sims, ys)
        assert not jnp.any(pos & ~(same & ~eye)) and not jnp.any(neg & same), name
        np.testing.assert_array_equal(pos[1], loop(np.asarray(sims[1], np.float64), np.asarray(ys[1]))[0])


def test_mining_carries_no_gradient():
    """Mining inside the differentiated function gives the gradient of the loss on fixed masks."""
    x, labels = _data(n=10, seed=4)
    y = jnp.asarray(labels)
    e = jnp.asarray(x, jnp.float32)

    def mined(e):
        sim = e @ e.T
        pos, neg = miners.batch_hard(sim, y)
        return losses.triplet(sim, y, margin=0.3, pos_mask=pos, neg_mask=neg)

    pos, neg = miners.batch_hard(e @ e.T, y)
    want = jax.grad(lambda e: losses.triplet(e @ e.T, y, margin=0.3, pos_mask=pos, neg_mask=neg))(e)
    np.testing.assert_allclose(jax.grad(mined)(e), want, rtol=1e-6)


def test_bad_inputs_raise_value_error_naming_the_argument():
    sim, y = jnp.zeros((4, 4)), jnp.arange(4)
    cases = [
        (lambda: miners.triplet_margin(sim, y, kind="hardest"), "kind"),
        (lambda: miners.multi_similarity(sim, y, epsilon=-0.1), "epsilon"),
        (lambda: miners.pair_margin(jnp.zeros(4), y), "sim"),
        (lambda: miners.batch_hard(sim, y[:3]), "labels"),
        (lambda: miners.batch_hard(jnp.zeros((4, 6)), y), "key_labels"),
        (lambda: miners.pair_margin(sim, y, key_valid=jnp.ones(4)), "key_valid"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


# ----------------------------------------------------------------------------------------------------------
# pytorch-metric-learning (not installed in CI)


def _pml():
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning import distances
    from pytorch_metric_learning import losses as pml_losses
    from pytorch_metric_learning import miners as pml_miners

    return torch, distances.CosineSimilarity(), pml_losses, pml_miners


def _pml_miner(name, cos, pml_miners):
    """PML's miner with the same (non-default) values, on the cosine."""
    if name == "multi_similarity":
        return pml_miners.MultiSimilarityMiner(epsilon=0.2)
    if name == "pair_margin":
        return pml_miners.PairMarginMiner(pos_margin=0.6, neg_margin=0.1, distance=cos)
    if name == "batch_hard":
        return pml_miners.BatchHardMiner(distance=cos)
    return pml_miners.TripletMarginMiner(margin=0.3, type_of_triplets=name.split("_")[1], distance=cos)


def _pairs_of(indices):
    """(positive pairs, negative pairs) as sets, from PML's pair (a1, p, a2, n) or triplet (a, p, n) tuple."""
    if len(indices) == 3:
        a, p, n = (t.tolist() for t in indices)
        return set(zip(a, p, strict=True)), set(zip(a, n, strict=True))
    a1, p, a2, n = (t.tolist() for t in indices)
    return set(zip(a1, p, strict=True)), set(zip(a2, n, strict=True))


def _mask_pairs(mask):
    return set(zip(*(idx.tolist() for idx in np.nonzero(np.asarray(mask))), strict=True))


def _mine_float64(mine, x, labels):
    """The miner on float64 similarities, as PML computes them, so that no comparison rounds differently."""
    with jax.enable_x64(True):
        return tuple(np.asarray(m) for m in mine(jnp.asarray(x @ x.T, jnp.float64), jnp.asarray(labels)))


@pytest.mark.parametrize("name", CASES)
def test_masks_are_the_pairs_of_pytorch_metric_learning_miners(name):
    torch, cos, _, pml_miners = _pml()
    x, labels = _data(n=16, seed=7)
    indices = _pml_miner(name, cos, pml_miners)(torch.tensor(x), torch.tensor(labels))
    want_pos, want_neg = _pairs_of(indices)
    pos, neg = _mine_float64(CASES[name][0], x, labels)
    assert _mask_pairs(pos) == want_pos and _mask_pairs(neg) == want_neg
    assert want_pos and want_neg  # the case mines something


# (miner, PML loss, geojax loss): pair losses on pair miners' masks, the triplet loss on batch hard's, and
# the matrix-based pair losses (they set a mask from the pairs, so repeated pairs count once) on triplets'.
# name: (the miner, PML's loss with its values (on the cosine), the same values for geojax's loss)
MS = {"alpha": 3.0, "beta": 20.0, "base": 0.3}
LOSS_CASES = {
    "multi_similarity+multi_similarity": ("multi_similarity", "MultiSimilarityLoss", MS, MS),
    "contrastive+pair_margin": (
        "pair_margin",
        "ContrastiveLoss",
        {"pos_margin": 0.8, "neg_margin": 0.2},
        None,
    ),
    "circle+pair_margin": (
        "pair_margin",
        "CircleLoss",
        {"m": 0.3, "gamma": 30.0},
        {"margin": 0.3, "gamma": 30.0},
    ),
    "lifted_structured+pair_margin": (
        "pair_margin",
        "LiftedStructureLoss",
        {"neg_margin": 0.5, "pos_margin": 0.9},
        None,
    ),
    "triplet+batch_hard": ("batch_hard", "TripletMarginLoss", {"margin": 0.3}, None),
    "multi_similarity+triplet_semihard": ("triplet_semihard", "MultiSimilarityLoss", MS, MS),
}


@pytest.mark.parametrize("name", LOSS_CASES)
def test_losses_on_masks_equal_pytorch_metric_learning_on_its_miners(name):
    torch, cos, pml_losses, pml_miners = _pml()
    miner, cls, pml_values, values = LOSS_CASES[name]
    loss = partial(getattr(losses, name.split("+")[0]), **(pml_values if values is None else values))
    distance = (
        {} if cls in ("MultiSimilarityLoss", "CircleLoss") else {"distance": cos}
    )  # their default: cosine
    x, labels = _data(n=16, seed=9)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.tensor(labels)
    want = getattr(pml_losses, cls)(**pml_values, **distance)(
        xt, yt, _pml_miner(miner, cos, pml_miners)(xt, yt)
    )
    want.backward()
    pos, neg = _mine_float64(CASES[miner][0], x, labels)
    if name.startswith("lifted"):  # geojax leaves out a positive pair without negatives; PML counts it
        assert all(neg[a].any() or neg[p].any() for a, p in zip(*np.nonzero(pos), strict=True))
    masks = {"pos_mask": jnp.asarray(pos), "neg_mask": jnp.asarray(neg)}
    y = jnp.asarray(labels)

    def ours(e):
        e = e / jnp.linalg.norm(e, axis=1, keepdims=True)
        return loss(e @ e.T, y, **masks)

    value, grad = jax.value_and_grad(ours)(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(value, float(want.detach()), rtol=1e-5)
    want_grad = xt.grad.numpy()
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-4 * np.abs(want_grad).max())
