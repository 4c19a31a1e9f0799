"""geojax.losses against naive numpy loops (over anchors, pairs and triplets) written here independently."""

import math
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from geojax import losses
from geojax.similarity import cosine, neg_euclidean

RTOL, ATOL = 1e-5, 1e-6

# ----------------------------------------------------------------------------------------------------------
# naive references (float64, explicit loops). keys j of anchor a: positive = same label and j ≠ self[a];
# negative = different label.


def _keys(labels, key_labels, self_index):
    n = len(labels)
    if key_labels is None:
        return list(labels), list(range(n)) if self_index is None else list(self_index)
    return list(key_labels), [-1] * n if self_index is None else list(self_index)


def _pos_neg(a, labels, key_labels, self_cols):
    pos = [j for j in range(len(key_labels)) if key_labels[j] == labels[a] and j != self_cols[a]]
    neg = [j for j in range(len(key_labels)) if key_labels[j] != labels[a]]
    return pos, neg


def _lse(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _avg(values):
    return sum(values) / len(values) if values else 0.0


def ref_softmax(kind, sim, labels, temperature=0.1, key_labels=None, self_index=None):
    s = np.asarray(sim, np.float64) / temperature
    key_labels, self_cols = _keys(labels, key_labels, self_index)
    per_anchor, pairs = [], []
    for a in range(len(labels)):
        pos, neg = _pos_neg(a, labels, key_labels, self_cols)
        terms = []
        for p in pos:
            if kind == "supcon":
                others = [s[a, k] for k in range(len(key_labels)) if k != self_cols[a]]
                terms.append(-(s[a, p] - _lse(others)))
            else:
                terms.append(-(s[a, p] - _lse([s[a, p]] + [s[a, k] for k in neg])))
        pairs += terms
        if terms:
            per_anchor.append(_avg(terms))
    return _avg(pairs) if kind == "info_nce" else _avg(per_anchor)


def ref_contrastive(sim, labels, pos_margin=1.0, neg_margin=0.0, key_labels=None, self_index=None):
    key_labels, self_cols = _keys(labels, key_labels, self_index)
    pos_terms, neg_terms = [], []
    for a in range(len(labels)):
        pos, neg = _pos_neg(a, labels, key_labels, self_cols)
        pos_terms += [max(pos_margin - sim[a, p], 0.0) for p in pos]
        neg_terms += [max(sim[a, n] - neg_margin, 0.0) for n in neg]
    return _avg([t for t in pos_terms if t > 0]) + _avg([t for t in neg_terms if t > 0])


def ref_triplet(
    sim, labels, margin=0.2, mining="all", reduction="mean_nonzero", key_labels=None, self_index=None
):
    key_labels, self_cols = _keys(labels, key_labels, self_index)
    terms = []
    for a in range(len(labels)):
        pos, neg = _pos_neg(a, labels, key_labels, self_cols)
        if mining == "hard":
            if pos and neg:
                terms.append(max(margin + max(sim[a, n] for n in neg) - min(sim[a, p] for p in pos), 0.0))
            continue
        for p in pos:
            for n in neg:
                if mining == "all" or sim[a, p] - margin < sim[a, n] < sim[a, p]:
                    terms.append(max(margin + sim[a, n] - sim[a, p], 0.0))
    return _avg([t for t in terms if t > 0] if reduction == "mean_nonzero" else terms)


def ref_lifted(sim, labels, pos_margin=0.0, neg_margin=1.0):
    n = len(labels)
    terms = []
    for a in range(n):
        for p in range(n):
            if p == a or labels[p] != labels[a]:
                continue
            negs = [sim[a, k] - neg_margin for k in range(n) if labels[k] != labels[a]]
            negs += [sim[p, k] - neg_margin for k in range(n) if labels[k] != labels[p]]
            if negs:
                terms.append(max(_lse(negs) + pos_margin - sim[a, p], 0.0) ** 2 / 2)
    return _avg(terms)


def ref_lifted_memory(sim, labels, key_labels, pos_margin=0.0, neg_margin=1.0):
    """Lifted structured with keys [the n anchors; further keys without a row]: N(p) of a further key p is
    the anchors with another label, read from p's column."""
    n, keys = len(labels), len(key_labels)
    terms = []
    for a in range(n):
        neg_a = [sim[a, k] - neg_margin for k in range(keys) if key_labels[k] != labels[a]]
        for p in range(keys):
            if p == a or key_labels[p] != labels[a]:
                continue
            if p < n:
                neg_p = [sim[p, k] - neg_margin for k in range(keys) if key_labels[k] != key_labels[p]]
            else:
                neg_p = [sim[k, p] - neg_margin for k in range(n) if labels[k] != key_labels[p]]
            if neg_a + neg_p:
                terms.append(max(_lse(neg_a + neg_p) + pos_margin - sim[a, p], 0.0) ** 2 / 2)
    return _avg(terms)


def ref_simo(emb, labels, eps=1e-6, orthogonality=True, weight=1.0):
    e = np.asarray(emb, np.float64)
    sd = so = dd = do = 0.0
    for i in range(len(e)):
        for j in range(i + 1, len(e)):
            d = float(np.sum((e[i] - e[j]) ** 2))
            o = float(e[i] @ e[j]) ** 2 if orthogonality else 1.0
            if labels[i] == labels[j]:
                sd, so = sd + d, so + o
            else:
                dd, do = dd + d, do + o
    return (sd / (eps + so) if sd else 0.0) + weight * (do / (eps + dd) if do else 0.0)


# Every sim loss: (name, geojax callable, reference callable); hyper-parameters away from the defaults where
# that exercises more of the code (margins that leave some terms at zero).
def _triplet_pair(mining, reduction):
    kw = dict(margin=0.3, mining=mining, reduction=reduction)
    return (
        f"triplet_{mining}_{reduction}",
        lambda s, y, **k: losses.triplet(s, y, **kw, **k),
        lambda s, y, **k: ref_triplet(s, y, **kw, **k),
    )


SIM_LOSSES = [
    ("supcon", losses.supcon, lambda *a, **k: ref_softmax("supcon", *a, **k)),
    ("sincere", losses.sincere, lambda *a, **k: ref_softmax("sincere", *a, **k)),
    ("info_nce", losses.info_nce, lambda *a, **k: ref_softmax("info_nce", *a, **k)),
    (
        "contrastive",
        lambda s, y, **k: losses.contrastive(s, y, pos_margin=0.7, neg_margin=0.1, **k),
        lambda s, y, **k: ref_contrastive(s, y, pos_margin=0.7, neg_margin=0.1, **k),
    ),
] + [_triplet_pair(m, r) for m in losses.MININGS for r in losses.REDUCTIONS]
# lifted_structured needs key p's own row, so its loop reference is square only.
LIFTED = (
    "lifted",
    lambda s, y: losses.lifted_structured(s, y, pos_margin=0.2, neg_margin=0.5),
    lambda s, y: ref_lifted(s, y, 0.2, 0.5),
)
SQUARE_LOSSES = SIM_LOSSES + [LIFTED]


def _data(n, classes, d=6, seed=0):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, d)).astype(np.float32)
    labels = rng.integers(0, classes, n).astype(np.int32)
    return emb, labels


def _sim(emb, keys=None):
    return np.asarray(cosine(jnp.asarray(emb), jnp.asarray(emb if keys is None else keys)))


SHAPES = [(7, 3), (16, 2)]


class SquareTest(chex.TestCase):
    def _shapes(self):
        """Every shape under jit; the (slow, op-by-op) eager variant checks the first."""
        return SHAPES if self.variant.type == chex.ChexVariantType.WITH_JIT else SHAPES[:1]

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*SQUARE_LOSSES)
    def test_matches_loop(self, fn, ref):
        for n, classes in self._shapes():
            emb, labels = _data(n, classes, seed=n)
            sim = _sim(emb)
            got = self.variant(fn)(jnp.asarray(sim), jnp.asarray(labels))
            np.testing.assert_allclose(got, ref(sim, labels), rtol=RTOL, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_simo(self):
        for n, classes in self._shapes():
            emb, labels = _data(n, classes, seed=n)
            got = self.variant(partial(losses.simo, eps=1e-3))(jnp.asarray(emb), jnp.asarray(labels))
            np.testing.assert_allclose(got, ref_simo(emb, labels, eps=1e-3), rtol=RTOL, atol=ATOL)
            ablation = self.variant(partial(losses.simo, eps=1e-3, orthogonality=False))
            np.testing.assert_allclose(
                ablation(jnp.asarray(emb), jnp.asarray(labels)),
                ref_simo(emb, labels, eps=1e-3, orthogonality=False),
                rtol=RTOL,
                atol=ATOL,
            )


def test_temperature_and_hyperparameters_reach_the_loss():
    emb, labels = _data(10, 3)
    sim = _sim(emb)
    for kind in ("supcon", "sincere", "info_nce"):
        got = jax.jit(partial(getattr(losses, kind), temperature=0.5))(jnp.asarray(sim), jnp.asarray(labels))
        np.testing.assert_allclose(got, ref_softmax(kind, sim, labels, 0.5), rtol=RTOL, atol=ATOL)


def supcontrast_loss(features, labels, temperature, base_temperature):
    """SupContrast's loss from Khosla et al. (2020, eq. 2) as a loop, with its code's τ/τ_base factor:
    L = (τ/τ_base) · mean_i −1/|P(i)| Σ_{p∈P(i)} log(exp(z_i·z_p/τ) / Σ_{a∈A(i)} exp(z_i·z_a/τ)),
    A(i) = every other sample, P(i) = the others with i's label; z L2-normalised."""
    z = np.asarray(features, np.float64)
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    per_anchor = []
    for i in range(len(z)):
        others = [a for a in range(len(z)) if a != i]
        log_den = math.log(sum(math.exp(z[i] @ z[a] / temperature) for a in others))
        positives = [p for p in others if labels[p] == labels[i]]
        per_anchor.append(-sum(z[i] @ z[p] / temperature - log_den for p in positives) / len(positives))
    return temperature / base_temperature * float(np.mean(per_anchor))


def test_supcon_base_temperature_is_supcontrast():
    """base_temperature=0.07 multiplies by τ/τ_base (SupContrast); None is pytorch-metric-learning's form."""
    emb, _ = _data(12, 3, seed=4)
    labels = np.repeat(np.arange(6), 2)  # two views of six items: every anchor has a positive
    sim, y = jnp.asarray(_sim(emb)), jnp.asarray(labels)
    got = jax.jit(partial(losses.supcon, temperature=0.1, base_temperature=0.07))(sim, y)
    np.testing.assert_allclose(got, supcontrast_loss(emb, labels, 0.1, 0.07), rtol=RTOL, atol=ATOL)
    plain = jax.jit(partial(losses.supcon, temperature=0.1))(sim, y)
    np.testing.assert_allclose(plain, supcontrast_loss(emb, labels, 0.1, 0.1), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="base_temperature"):
        losses.supcon(sim, y, base_temperature=0.0)


@pytest.mark.parametrize("name,fn,ref", SIM_LOSSES, ids=[s[0] for s in SIM_LOSSES])
def test_rectangular_keys_match_loop(name, fn, ref):
    """Anchors vs a larger key set: with self columns, and with key_labels only (no column excluded)."""
    emb, labels = _data(5, 3, seed=1)
    keys, key_labels = _data(14, 3, seed=2)
    self_index = np.array([3, 0, 11, 7, 9], np.int32)
    keys[self_index] = emb  # each anchor's own key is present in the key set
    key_labels[self_index] = labels
    sim = _sim(emb, keys)
    for si in (self_index, None):
        ki = None if si is None else jnp.asarray(si)
        got = jax.jit(fn)(
            jnp.asarray(sim), jnp.asarray(labels), key_labels=jnp.asarray(key_labels), self_index=ki
        )
        want = ref(sim, labels, key_labels=key_labels, self_index=si)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_square_call_equals_explicit_rectangular_form():
    emb, labels = _data(9, 3)
    sim, y = jnp.asarray(_sim(emb)), jnp.asarray(labels)
    extra = dict(key_labels=y, self_index=jnp.arange(9))
    for fn in (losses.supcon, losses.lifted_structured):
        np.testing.assert_allclose(jax.jit(fn)(sim, y), jax.jit(fn)(sim, y, **extra), rtol=1e-6)
    e = jnp.asarray(emb)
    simo = jax.jit(losses.simo)
    np.testing.assert_allclose(simo(e, y), simo(e, y, key_embeddings=e, **extra), rtol=1e-6)


def test_vmap_over_batches_of_matrices():
    batch = [_data(9, 3, seed=s) for s in range(3)]
    sims = jnp.stack([jnp.asarray(_sim(e)) for e, _ in batch])
    ys = jnp.stack([jnp.asarray(y) for _, y in batch])
    embs = jnp.stack([jnp.asarray(e) for e, _ in batch])
    for _, fn, ref in [SQUARE_LOSSES[i] for i in (0, 2, 3, 4, 6, 8, -1)]:
        got = jax.jit(jax.vmap(fn))(sims, ys)
        want = [ref(np.asarray(s), np.asarray(y)) for s, y in zip(sims, ys, strict=True)]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    got = jax.jit(jax.vmap(losses.simo))(embs, ys)
    np.testing.assert_allclose(got, [ref_simo(e, y) for e, y in batch], rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------------------
# gradients of the custom-VJP triplet sums against autodiff of the dense [n, M, M] triplet tensor


def _dense_triplet(sim, labels, margin, mining, reduction):
    """All triplets materialised: mask[a, p, n] and relu(m + s_an − s_ap) (a test-only reference)."""
    n = sim.shape[0]
    same = labels[:, None] == labels[None, :]
    pos = same & ~jnp.eye(n, dtype=bool)
    neg = ~same
    viol = margin + sim[:, None, :] - sim[:, :, None]  # [a, p, n]
    mask = pos[:, :, None] & neg[:, None, :]
    if mining == "semihard":
        mask = mask & (sim[:, None, :] < sim[:, :, None]) & (viol > 0)
    terms = jnp.where(mask, jax.nn.relu(viol), 0.0)
    count = jnp.sum(mask & (terms > 0)) if reduction == "mean_nonzero" else jnp.sum(mask)
    return jnp.sum(terms) / count


@pytest.mark.parametrize("mining", ["all", "semihard"])
@pytest.mark.parametrize("reduction", losses.REDUCTIONS)
def test_triplet_gradient_matches_dense_autodiff(mining, reduction):
    emb, labels = _data(12, 3, seed=5)
    y = jnp.asarray(labels)

    def ours(e):
        return losses.triplet(cosine(e, e), y, margin=0.3, mining=mining, reduction=reduction)

    def dense(e):
        return _dense_triplet(cosine(e, e), y, 0.3, mining, reduction)

    e = jnp.asarray(emb)
    (v1, g1), (v2, g2) = (jax.jit(jax.value_and_grad(f))(e) for f in (ours, dense))
    np.testing.assert_allclose(v1, v2, rtol=RTOL)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# edge cases


EDGE_CASES = ["single_class", "no_positive_anchor", "all_negative", "identical", "zero_vectors"]


def _edge_batch(case, classes=2):
    emb, labels = _data(6, classes, seed=3)
    if case == "single_class":
        labels[:] = 1
    elif case == "no_positive_anchor":
        labels[:] = [0, 0, 0, 1, 1, 2]
    elif case == "all_negative":
        labels[:] = np.arange(6)
    elif case == "identical":
        emb[:] = emb[0]
    elif case == "zero_vectors":
        emb[:] = 0.0
    elif case == "one_item":
        emb, labels = emb[:1], labels[:1]
    return emb, labels


def test_edges_have_finite_gradients_and_match_loop():
    """neg_euclidean similarities (a sqrt at 0 for identical points) on degenerate batches; every loss in
    one function, its Jacobian in one compilation."""

    def all_losses(e, y):
        return jnp.stack([fn(neg_euclidean(e, e), y) for _, fn, _ in SQUARE_LOSSES])

    step = jax.jit(lambda e, y: (all_losses(e, y), jax.jacrev(all_losses)(e, y)))
    for case in EDGE_CASES:
        emb, labels = _edge_batch(case)
        values, jac = step(jnp.asarray(emb), jnp.asarray(labels))
        sim = np.asarray(neg_euclidean(jnp.asarray(emb), jnp.asarray(emb)))
        for (name, _, ref), value, grad in zip(SQUARE_LOSSES, values, jac, strict=True):
            assert np.all(np.isfinite(grad)), (case, name)
            np.testing.assert_allclose(
                value, ref(sim, labels), rtol=RTOL, atol=ATOL, err_msg=f"{case} {name}"
            )


def test_one_item_batch():
    """n = 1: no pair exists, every loss is 0 with a zero gradient."""
    for _, fn, _ in [SQUARE_LOSSES[i] for i in (0, 3, 4, 6, 8, -1)]:
        value, grad = jax.jit(jax.value_and_grad(lambda e, fn=fn: fn(cosine(e, e), jnp.zeros(1, jnp.int32))))(
            jnp.ones((1, 3))
        )
        assert float(value) == 0.0 and not np.any(grad)


def test_simo_orthogonality_weight_scales_the_dissimilar_pairs_term_and_is_eq_1_at_one():
    rng = np.random.default_rng(3)
    emb, labels = rng.normal(size=(12, 5)).astype(np.float32), jnp.asarray(rng.integers(0, 3, 12))
    step = jax.jit(jax.value_and_grad(losses.simo))
    weighted = jax.jit(jax.value_and_grad(partial(losses.simo, orthogonality_weight=1.0)))
    for a, b in zip(step(jnp.asarray(emb), labels), weighted(jnp.asarray(emb), labels), strict=True):
        np.testing.assert_array_equal(a, b)  # 1.0 is today's loss bit for bit, value and gradient
    for w in (0.0, 0.25, 3.0):
        got = jax.jit(partial(losses.simo, orthogonality_weight=w))(jnp.asarray(emb), labels)
        np.testing.assert_allclose(got, ref_simo(emb, np.asarray(labels), weight=w), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="orthogonality_weight"):
        losses.simo(jnp.asarray(emb), labels, orthogonality_weight=-1.0)


def test_simo_edges_finite_and_match_loop():
    step = jax.jit(jax.value_and_grad(losses.simo))
    for case in [*EDGE_CASES, "one_item"]:
        emb, labels = _edge_batch(case)
        value, grad = step(jnp.asarray(emb), jnp.asarray(labels))
        assert np.isfinite(value) and np.all(np.isfinite(grad)), case
        np.testing.assert_allclose(value, ref_simo(emb, labels), rtol=RTOL, atol=ATOL, err_msg=case)


def test_pinned_values():
    # One class, identical points: every s = 1, so SupCon = −(1/τ − log((n−1) e^{1/τ})) = log(n − 1).
    sim, y = jnp.ones((4, 4)), jnp.zeros(4, jnp.int32)
    np.testing.assert_allclose(jax.jit(losses.supcon)(sim, y), math.log(3), rtol=1e-6)
    # No negatives: SINCERE and InfoNCE are −log(e^{s}/e^{s}) = 0 for every positive pair.
    assert float(jax.jit(losses.sincere)(sim, y)) == 0.0 and float(jax.jit(losses.info_nce)(sim, y)) == 0.0
    # All labels distinct: no positives, no anchors → 0 and zero gradients.
    distinct = jnp.arange(4)
    for fn in (losses.supcon, losses.lifted_structured):
        value, grad = jax.jit(jax.value_and_grad(fn))(jnp.eye(4), distinct)
        assert float(value) == 0.0 and not np.any(grad)
    # Two pairs, orthogonal classes: s_ap = 1, s_an = 0, margin 0.2 → no triplet violates: 0 either way.
    e = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    y2 = jnp.array([0, 0, 1, 1])
    assert float(jax.jit(losses.triplet)(jax.jit(cosine)(e, e), y2)) == 0.0
    # SimO on that batch: Σ_same d = 0 and Σ_diff o = 0 → 0. Labels [0, 1, 0, 1]: same pairs (0,2), (1,3)
    # have d = 2, o = 0; different pairs (0,1), (2,3) have d = 0, o = 1 and (0,3), (1,2) d = 2, o = 0.
    simo = jax.jit(partial(losses.simo, eps=1.0))
    assert float(simo(e, y2)) == 0.0
    np.testing.assert_allclose(simo(e, jnp.array([0, 1, 0, 1])), 4 / 1 + 2 / 5, rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# validation


def test_bad_inputs_raise_value_error_naming_the_argument():
    sim, y = jnp.zeros((4, 4)), jnp.arange(4)
    cases = [
        (lambda: losses.supcon(jnp.zeros((2, 2, 2)), y), "sim"),
        (lambda: losses.supcon(sim, jnp.arange(3)), "labels"),
        (lambda: losses.supcon(sim, jnp.zeros(4)), "labels"),
        (lambda: losses.supcon(sim.astype(jnp.int32), y), "sim"),
        (lambda: losses.supcon(jnp.zeros((4, 6)), y), "key_labels"),
        (lambda: losses.supcon(jnp.zeros((4, 6)), y, key_labels=jnp.arange(5)), "key_labels"),
        (lambda: losses.supcon(sim, y, self_index=jnp.array([0, 1, 2, 4])), "self_index"),
        (lambda: losses.supcon(sim, y, self_index=jnp.array([0, 1, 2])), "self_index"),
        (lambda: losses.supcon(sim, y, self_index=jnp.zeros(4)), "self_index"),
        (lambda: losses.supcon(sim, y, temperature=0.0), "temperature"),
        (lambda: losses.info_nce(sim, y, temperature=-1.0), "temperature"),
        (lambda: losses.triplet(sim, y, mining="easy"), "mining"),
        (lambda: losses.triplet(sim, y, reduction="sum"), "reduction"),
        (lambda: losses.contrastive(sim, y[:, None]), "labels"),
        (lambda: losses.lifted_structured(jnp.zeros((4, 3)), y, key_labels=jnp.arange(3)), "sim"),
        (lambda: losses.supcon(sim, y, key_valid=jnp.ones(3, bool)), "key_valid"),
        (lambda: losses.triplet(sim, y, key_valid=jnp.ones(4)), "key_valid"),
        (lambda: losses.simo(jnp.zeros((4, 3)), y, key_valid=jnp.ones((4, 1), bool)), "key_valid"),
        (lambda: losses.supcon_blocked(jnp.zeros((4, 3)), y, key_valid=jnp.ones(5, bool)), "key_valid"),
        (lambda: losses.simo(jnp.zeros(4), y), "embeddings"),
        (lambda: losses.simo(jnp.zeros((4, 3)), y, eps=-1.0), "eps"),
        (lambda: losses.simo(jnp.zeros((4, 3)), y, key_embeddings=jnp.zeros((4, 2))), "key_embeddings"),
        (lambda: losses.supcon_blocked(jnp.zeros((4, 3)), y, block_size=0), "block_size"),
        (lambda: losses.sincere_blocked(jnp.zeros((4, 3)), jnp.arange(5)), "labels"),
        (lambda: losses.info_nce_blocked(jnp.zeros((4, 3)), y, similarity="bogus"), "similarity"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


def _memory_case(seed=5):
    """Anchors [n, D] whose keys are [the anchors; 7 memory rows], memory rows 2 and 5 empty (masked)."""
    emb, labels = _data(6, 3, seed=seed)
    mem, mem_labels = _data(7, 3, seed=seed + 1)
    keys, key_labels = np.concatenate([emb, mem]), np.concatenate([labels, mem_labels])
    valid = np.ones(len(keys), bool)
    valid[[6 + 2, 6 + 5]] = False
    return emb, labels, keys, key_labels, valid


@pytest.mark.parametrize("name,fn,ref", SIM_LOSSES, ids=[s[0] for s in SIM_LOSSES])
def test_key_valid_equals_dropping_the_columns(name, fn, ref):
    """key_valid=False columns (a memory's empty slots) count as absent: the loop on the kept columns."""
    emb, labels, keys, key_labels, valid = _memory_case()
    sim = _sim(emb, keys)
    got = jax.jit(fn)(
        jnp.asarray(sim),
        jnp.asarray(labels),
        key_labels=jnp.asarray(key_labels),
        self_index=jnp.arange(6),
        key_valid=jnp.asarray(valid),
    )
    want = ref(sim[:, valid], labels, key_labels=key_labels[valid], self_index=np.arange(6))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_lifted_with_memory_columns_matches_loop():
    emb, labels, keys, key_labels, valid = _memory_case(seed=8)
    sim = _sim(emb, keys)
    fn = jax.jit(partial(losses.lifted_structured, pos_margin=0.2, neg_margin=0.5))
    kw = dict(key_labels=jnp.asarray(key_labels), self_index=jnp.arange(6))
    got = fn(jnp.asarray(sim), jnp.asarray(labels), key_valid=jnp.asarray(valid), **kw)
    want = ref_lifted_memory(sim[:, valid], labels, key_labels[valid], 0.2, 0.5)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # without memory columns it is the square loss
    square = fn(
        jnp.asarray(sim[:, :6]),
        jnp.asarray(labels),
        key_labels=jnp.asarray(labels),
        self_index=kw["self_index"],
    )
    np.testing.assert_allclose(square, ref_lifted(sim[:, :6], labels, 0.2, 0.5), rtol=RTOL, atol=ATOL)


def test_key_valid_in_simo_and_blocked_forms():
    emb, labels, keys, key_labels, valid = _memory_case(seed=11)
    e, y = jnp.asarray(emb), jnp.asarray(labels)
    kw = dict(key_labels=jnp.asarray(key_labels), self_index=jnp.arange(6))
    kept = dict(key_labels=jnp.asarray(key_labels[valid]), self_index=jnp.arange(6))
    got = losses.simo(e, y, key_embeddings=jnp.asarray(keys), key_valid=jnp.asarray(valid), **kw)
    want = losses.simo(e, y, key_embeddings=jnp.asarray(keys[valid]), **kept)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for blocked, plain in ((losses.supcon_blocked, "supcon"), (losses.info_nce_blocked, "info_nce")):
        got = blocked(
            e, y, block_size=4, key_embeddings=jnp.asarray(keys), key_valid=jnp.asarray(valid), **kw
        )
        want = ref_softmax(
            plain, _sim(emb, keys[valid]), labels, key_labels=key_labels[valid], self_index=range(6)
        )
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
