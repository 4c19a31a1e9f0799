"""The metric-learning losses (proxy, margin-softmax, pair-weighting, sigmoid), miners' masks on the pair
losses and multi-hot labels on the softmax losses, against float64 loops written here, their gradients
against central differences of those loops, and against pytorch-metric-learning where it is installed."""

import inspect
import math
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import losses
from geojax._numerics import safe_normalize
from geojax.similarity import cosine, neg_euclidean, neg_sq_euclidean

RTOL, ATOL = 1e-5, 1e-6
GRAD_RTOL = 1e-4


def _rng(seed):
    return np.random.default_rng(seed)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _logsumexp(values):
    values = list(values)
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _log1p_sum_exp(values):
    """log(1 + Σ e^v), 0 for no values."""
    return _logsumexp([0.0, *values])


def _softplus(x):
    return float(np.logaddexp(0.0, x))


def _central_differences(f, x, h=1e-6):
    """∂f/∂x by central differences of a float64 function of a float64 array."""
    x = np.asarray(x, np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (f(up) - f(down)) / (2 * h)
    return grad


def _close_grad(got, want, rtol=GRAD_RTOL):
    """Gradients agree to rtol of their largest entry (fp32 against float64)."""
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-6))


# ----------------------------------------------------------------------------------------------------------
# float64 loops: proxy and margin-softmax losses (sim [n, C], labels in [0, C))


def ref_proxy_anchor(sim, labels, margin, alpha):
    n, classes = sim.shape
    pos_terms, neg_total = [], 0.0
    for c in range(classes):
        members = [i for i in range(n) if labels[i] == c]
        others = [i for i in range(n) if labels[i] != c]
        if members:
            pos_terms.append(_log1p_sum_exp(-alpha * (sim[i, c] - margin) for i in members))
        neg_total += _log1p_sum_exp(alpha * (sim[i, c] + margin) for i in others)
    return (sum(pos_terms) / len(pos_terms) if pos_terms else 0.0) + neg_total / classes


def _ref_softmax_ce(logits, labels, own_logit):
    """Mean over rows of −log softmax, each row's own-class logit replaced by own_logit(row)."""
    total = 0.0
    for i, row in enumerate(logits):
        row = [own_logit(i) if c == labels[i] else v for c, v in enumerate(row)]
        total += _logsumexp(row) - own_logit(i)
    return total / len(logits)


def ref_proxy_nca(sim, labels, scale):
    return _ref_softmax_ce(scale * sim, labels, lambda i: scale * sim[i, labels[i]])


def ref_normalized_softmax(sim, labels, temperature):
    return _ref_softmax_ce(sim / temperature, labels, lambda i: sim[i, labels[i]] / temperature)


def ref_arcface(sim, labels, margin, scale, sub_centers=1):
    n = sim.shape[0]
    cos = np.array(
        [
            [
                max(sim[i, c * sub_centers + k] for k in range(sub_centers))
                for c in range(sim.shape[1] // sub_centers)
            ]
            for i in range(n)
        ]
    )

    def own(i):
        theta = math.acos(min(max(cos[i, labels[i]], -1.0), 1.0))
        if theta <= math.pi - margin:
            return scale * math.cos(theta + margin)
        return scale * (math.cos(theta) - margin * math.sin(margin))

    return _ref_softmax_ce(scale * cos, labels, own)


def ref_cosface(sim, labels, margin, scale):
    return _ref_softmax_ce(scale * sim, labels, lambda i: scale * (sim[i, labels[i]] - margin))


# name: the non-default values of the loss and of its loop (the same keywords)
PROXY_VALUES = {
    "proxy_anchor": ({"margin": 0.2, "alpha": 16.0}, ref_proxy_anchor),
    "proxy_nca": ({"scale": 3.0}, ref_proxy_nca),
    "normalized_softmax": ({"temperature": 0.2}, ref_normalized_softmax),
    "arcface": ({"margin": 0.4, "scale": 10.0}, ref_arcface),
    "cosface": ({"margin": 0.3, "scale": 12.0}, ref_cosface),
}
PROXY_CASES = {
    name: (partial(getattr(losses, name), **kw), partial(ref, **kw))
    for name, (kw, ref) in PROXY_VALUES.items()
}


def _proxy_data(n=9, classes=4, d=5, seed=0, sub_centers=1):
    rng = _rng(seed)
    x = rng.normal(size=(n, d))
    proxies = rng.normal(size=(classes * sub_centers, d))
    labels = rng.integers(0, classes, n)
    labels[: classes - 1] = np.arange(classes - 1)  # one class (the last) may have no member
    return x, proxies, labels


@pytest.mark.parametrize("name", PROXY_CASES)
def test_proxy_losses_match_loop_value_and_gradient(name):
    fn, ref = PROXY_CASES[name]
    x, proxies, labels = _proxy_data(seed=len(name))
    sim = _unit(x) @ _unit(proxies).T
    if name == "proxy_nca":
        sim = 2 * sim - 2  # −‖x̂ − p̂‖²
    y = jnp.asarray(labels, jnp.int32)
    value, grad = jax.jit(jax.value_and_grad(lambda s: fn(s, y)))(jnp.asarray(sim, jnp.float32))
    np.testing.assert_allclose(value, ref(sim, labels), rtol=RTOL, atol=ATOL)
    _close_grad(grad, _central_differences(lambda s: ref(s, labels), sim))


def test_sub_center_arcface_matches_loop():
    x, proxies, labels = _proxy_data(classes=3, sub_centers=3, seed=4)
    sim = _unit(x) @ _unit(proxies).T  # [n, 3·3], class-major
    y = jnp.asarray(labels, jnp.int32)
    fn = partial(losses.arcface, margin=0.3, scale=8.0, sub_centers=3)
    value, grad = jax.jit(jax.value_and_grad(lambda s: fn(s, y)))(jnp.asarray(sim, jnp.float32))
    ref = partial(ref_arcface, margin=0.3, scale=8.0, sub_centers=3)
    np.testing.assert_allclose(value, ref(sim, labels), rtol=RTOL, atol=ATOL)
    _close_grad(grad, _central_differences(lambda s: ref(s, labels), sim))
    # K = 1 sub-centre is plain ArcFace; K copies of each proxy change nothing
    tiled = np.repeat(sim[:, ::3], 3, axis=1)
    np.testing.assert_allclose(
        fn(jnp.asarray(tiled, jnp.float32), y),
        losses.arcface(jnp.asarray(sim[:, ::3], jnp.float32), y, margin=0.3, scale=8.0),
        rtol=1e-6,
    )


def test_arcface_large_angles_take_the_fallback_and_gradients_stay_finite_at_plus_minus_one():
    # θ_y > π − m for row 0 (cos = −0.95 with m = 0.5): the logit is cos θ − m·sin m, as the loop says.
    sim = np.array([[-0.95, 0.2, 0.1], [1.0, 0.3, -1.0], [-1.0, 1.0, 0.0], [0.5, -0.2, 1.0]])
    labels = np.array([0, 0, 0, 2])
    y = jnp.asarray(labels)
    value, grad = jax.jit(jax.value_and_grad(lambda s: losses.arcface(s, y)))(jnp.asarray(sim, jnp.float32))
    np.testing.assert_allclose(value, ref_arcface(sim, labels, 0.5, 64.0), rtol=RTOL)
    assert np.all(np.isfinite(grad))
    # through the cosine of unit vectors: identical and opposite embedding–proxy pairs
    e = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    w = jnp.array([[1.0, 0.0], [0.0, -1.0]])
    value, grads = jax.value_and_grad(
        lambda e, w: losses.arcface(cosine(e, w), jnp.array([0, 1, 0])), (0, 1)
    )(e, w)
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in grads)


def test_proxy_anchor_classes_without_members():
    """Only the proxies with a positive in the batch enter the positive mean; every proxy the negative one."""
    sim = np.array([[0.9, 0.1, -0.2, 0.4], [0.7, 0.3, 0.0, -0.1], [0.2, 0.8, 0.1, 0.3]])
    labels = np.array([0, 0, 1])
    got = losses.proxy_anchor(jnp.asarray(sim, jnp.float32), jnp.asarray(labels), alpha=4.0)
    pos = (_log1p_sum_exp([-4 * (0.9 - 0.1), -4 * (0.7 - 0.1)]) + _log1p_sum_exp([-4 * (0.8 - 0.1)])) / 2
    neg = sum(_log1p_sum_exp(4 * (sim[i, c] + 0.1) for i in range(3) if labels[i] != c) for c in range(4)) / 4
    np.testing.assert_allclose(got, pos + neg, rtol=RTOL)


def test_proxy_nca_keeps_the_positive_proxy_in_the_denominator():
    """pytorch-metric-learning's form: log-softmax over all proxies (the paper's leaves the positive out)."""
    sim = jnp.array([[-0.1, -1.5, -3.2], [-2.0, -0.4, -1.1]])
    got = losses.proxy_nca(sim, jnp.array([0, 1]), scale=2.0)
    want = -np.mean([jax.nn.log_softmax(2.0 * sim[0])[0], jax.nn.log_softmax(2.0 * sim[1])[1]])
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# float64 loops: pair losses (sim [n, M]), with a miner's masks


def _pair_lists(labels, key_labels=None, self_index=None, pos_mask=None, neg_mask=None):
    """{anchor: positive columns}, {anchor: negative columns}, after the label rule and the masks."""
    n = len(labels)
    keys = labels if key_labels is None else key_labels
    own = list(range(n)) if key_labels is None else ([-1] * n if self_index is None else list(self_index))
    pos, neg = {}, {}
    for a in range(n):
        pos[a] = [j for j in range(len(keys)) if keys[j] == labels[a] and j != own[a]]
        neg[a] = [j for j in range(len(keys)) if keys[j] != labels[a]]
        if pos_mask is not None:
            pos[a] = [j for j in pos[a] if pos_mask[a, j]]
        if neg_mask is not None:
            neg[a] = [j for j in neg[a] if neg_mask[a, j]]
    return pos, neg


def ref_multi_similarity(sim, labels, alpha, beta, base, **keys):
    pos, neg = _pair_lists(labels, **keys)
    per_anchor = [
        _log1p_sum_exp(-alpha * (sim[a, p] - base) for p in pos[a]) / alpha
        + _log1p_sum_exp(beta * (sim[a, q] - base) for q in neg[a]) / beta
        for a in pos
    ]
    return sum(per_anchor) / len(per_anchor)


def ref_circle(sim, labels, margin, gamma, weights_of=None, **keys):
    """``weights_of``: the similarities the self-paced weights α_p, α_n are read from (the gradient holds
    them constant); ``sim`` itself by default."""
    w = sim if weights_of is None else weights_of
    pos, neg = _pair_lists(labels, **keys)
    terms = []
    for a in pos:
        if not pos[a] or not neg[a]:
            continue
        lp = _logsumexp(-gamma * max(1 + margin - w[a, p], 0) * (sim[a, p] - 1 + margin) for p in pos[a])
        ln = _logsumexp(gamma * max(w[a, q] + margin, 0) * (sim[a, q] - margin) for q in neg[a])
        terms.append(_softplus(lp + ln))
    kept = [t for t in terms if t > 0]
    return sum(kept) / len(kept) if kept else 0.0


def ref_sigmoid(sim, labels, scale, bias, **keys):
    pos, neg = _pair_lists(labels, **keys)
    total = 0.0
    for a in pos:
        total += sum(_softplus(-(scale * sim[a, p] + bias)) for p in pos[a])
        total += sum(_softplus(scale * sim[a, q] + bias) for q in neg[a])
    return total / len(labels)


def ref_contrastive(sim, labels, pos_margin, neg_margin, **keys):
    pos, neg = _pair_lists(labels, **keys)
    pos_terms = [max(pos_margin - sim[a, p], 0.0) for a in pos for p in pos[a]]
    neg_terms = [max(sim[a, q] - neg_margin, 0.0) for a in neg for q in neg[a]]
    return sum(pos_terms) / max(sum(t > 0 for t in pos_terms), 1) + sum(neg_terms) / max(
        sum(t > 0 for t in neg_terms), 1
    )


def ref_triplet(sim, labels, margin, mining, **keys):
    pos, neg = _pair_lists(labels, **keys)
    terms = []
    for a in pos:
        if mining == "hard" and pos[a] and neg[a]:
            hardest = min(sim[a, p] for p in pos[a]), max(sim[a, q] for q in neg[a])
            terms.append(max(margin + hardest[1] - hardest[0], 0.0))
        elif mining != "hard":
            for p in pos[a]:
                terms += [
                    margin + sim[a, q] - sim[a, p]
                    for q in neg[a]
                    if mining == "all" or sim[a, p] - margin < sim[a, q] < sim[a, p]
                ]
    terms = [max(t, 0.0) for t in terms]
    return sum(terms) / max(sum(t > 0 for t in terms), 1)


def ref_lifted(sim, labels, pos_margin, neg_margin, **keys):
    """Square batches: N(p) is the negatives of key p's own row."""
    pos, neg = _pair_lists(labels, **keys)
    terms = []
    for a in pos:
        for p in pos[a]:
            union = [sim[a, q] - neg_margin for q in neg[a]] + [sim[p, q] - neg_margin for q in neg[p]]
            if union:
                terms.append(max(_logsumexp(union) + pos_margin - sim[a, p], 0.0) ** 2 / 2)
    return sum(terms) / len(terms) if terms else 0.0


# name: (the loss, its non-default values, its loop taking the same keywords)
PAIR_VALUES = {
    "multi_similarity": ("multi_similarity", {"alpha": 3.0, "beta": 20.0, "base": 0.3}, ref_multi_similarity),
    "circle": ("circle", {"margin": 0.3, "gamma": 30.0}, ref_circle),
    "sigmoid": ("sigmoid", {"scale": 4.0, "bias": -1.5}, ref_sigmoid),
}
MARGIN_VALUES = {
    "contrastive": ("contrastive", {"pos_margin": 0.7, "neg_margin": 0.1}, ref_contrastive),
    **{
        f"triplet_{mining}": ("triplet", {"margin": 0.3, "mining": mining}, ref_triplet)
        for mining in ("all", "hard", "semihard")
    },
    "lifted_structured": ("lifted_structured", {"pos_margin": 0.2, "neg_margin": 0.5}, ref_lifted),
}
PAIR_CASES, MARGIN_CASES = (
    {name: (partial(getattr(losses, fn), **kw), partial(ref, **kw)) for name, (fn, kw, ref) in values.items()}
    for values in (PAIR_VALUES, MARGIN_VALUES)
)


def _pair_data(n=10, classes=3, d=5, seed=0):
    rng = _rng(seed)
    x = rng.normal(size=(n, d))
    labels = rng.integers(0, classes, n)
    return x, labels, _unit(x) @ _unit(x).T


def _masks(shape, seed, keep=0.6):
    rng = _rng(seed)
    return rng.uniform(size=shape) < keep, rng.uniform(size=shape) < keep


def _reference_gradient(name, ref, sim, labels, **keys):
    if name == "circle":  # the self-paced weights are constants of the backward pass
        return _central_differences(lambda s: ref(s, labels, weights_of=sim, **keys), sim)
    return _central_differences(lambda s: ref(s, labels, **keys), sim)


@pytest.mark.parametrize("masked", [False, True], ids=["all_pairs", "masked"])
@pytest.mark.parametrize("name", PAIR_CASES)
def test_pair_losses_match_loop_value_and_gradient(name, masked):
    fn, ref = PAIR_CASES[name]
    _, labels, sim = _pair_data(seed=len(name))
    pos_mask, neg_mask = _masks(sim.shape, seed=3) if masked else (None, None)
    kw = {} if not masked else {"pos_mask": jnp.asarray(pos_mask), "neg_mask": jnp.asarray(neg_mask)}
    y = jnp.asarray(labels, jnp.int32)
    value, grad = jax.jit(jax.value_and_grad(lambda s: fn(s, y, **kw)))(jnp.asarray(sim, jnp.float32))
    keys = {"pos_mask": pos_mask, "neg_mask": neg_mask}
    np.testing.assert_allclose(value, ref(sim, labels, **keys), rtol=RTOL, atol=ATOL)
    _close_grad(grad, _reference_gradient(name, ref, sim, labels, **keys))


@pytest.mark.parametrize("name", PAIR_CASES)
def test_pair_losses_rectangular_keys_match_loop(name):
    """Anchors against a larger key set: with self columns, and with key labels only (no column excluded)."""
    fn, ref = PAIR_CASES[name]
    rng = _rng(11)
    anchors, labels = rng.normal(size=(5, 4)), rng.integers(0, 3, 5)
    keys, key_labels = rng.normal(size=(12, 4)), rng.integers(0, 3, 12)
    self_index = np.array([2, 7, 0, 11, 5])
    keys[self_index], key_labels[self_index] = anchors, labels
    sim = _unit(anchors) @ _unit(keys).T
    for si in (self_index, None):
        kw = {"key_labels": key_labels, "self_index": si}
        got = fn(
            jnp.asarray(sim, jnp.float32),
            jnp.asarray(labels),
            **{k: None if v is None else jnp.asarray(v) for k, v in kw.items()},
        )
        np.testing.assert_allclose(got, ref(sim, labels, **kw), rtol=RTOL, atol=ATOL)


def test_pair_losses_key_valid_equals_dropping_the_columns():
    """Keys [the anchors; 7 memory rows], memory rows 2 and 5 empty slots: as if those columns were absent."""
    rng = _rng(5)
    x, labels = rng.normal(size=(6, 4)), rng.integers(0, 3, 6)
    memory, memory_labels = rng.normal(size=(7, 4)), rng.integers(0, 3, 7)
    keys, key_labels = np.concatenate([x, memory]), np.concatenate([labels, memory_labels])
    valid = np.ones(13, bool)
    valid[[6 + 2, 6 + 5]] = False
    sim = _unit(x) @ _unit(keys).T
    for name, (fn, ref) in PAIR_CASES.items():
        got = fn(
            jnp.asarray(sim, jnp.float32),
            jnp.asarray(labels),
            key_labels=jnp.asarray(key_labels),
            self_index=jnp.arange(6),
            key_valid=jnp.asarray(valid),
        )
        want = ref(sim[:, valid], labels, key_labels=key_labels[valid], self_index=np.arange(6))
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("name", MARGIN_CASES)
def test_masks_on_the_margin_losses_match_loop(name):
    fn, ref = MARGIN_CASES[name]
    _, labels, sim = _pair_data(n=9, seed=7)
    pos_mask, neg_mask = _masks(sim.shape, seed=len(name))
    y = jnp.asarray(labels)
    got = jax.jit(fn)(
        jnp.asarray(sim, jnp.float32), y, pos_mask=jnp.asarray(pos_mask), neg_mask=jnp.asarray(neg_mask)
    )
    np.testing.assert_allclose(
        got, ref(sim, labels, pos_mask=pos_mask, neg_mask=neg_mask), rtol=RTOL, atol=ATOL
    )
    # all-True masks are no masks
    everything = jnp.ones(sim.shape, bool)
    s = jnp.asarray(sim, jnp.float32)
    np.testing.assert_allclose(fn(s, y, pos_mask=everything, neg_mask=everything), fn(s, y), rtol=1e-6)


@pytest.mark.parametrize("name", [*PAIR_CASES, *MARGIN_CASES])
def test_empty_masks_give_zero_loss_and_zero_gradient(name):
    fn = {**PAIR_CASES, **MARGIN_CASES}[name][0]
    _, labels, sim = _pair_data(n=6, seed=2)
    none = jnp.zeros(sim.shape, bool)
    value, grad = jax.value_and_grad(lambda s: fn(s, jnp.asarray(labels), pos_mask=none, neg_mask=none))(
        jnp.asarray(sim, jnp.float32)
    )
    assert float(value) == 0.0 and not np.any(grad)


def test_sigmoid_learns_scale_and_bias():
    """Traced scale and bias (SigLIP's t = exp(t'), b) get the gradients of the float64 loop's."""
    _, labels, sim = _pair_data(n=8, seed=9)
    y = jnp.asarray(labels)

    def loss(params, s):
        return losses.sigmoid(s, y, scale=jnp.exp(params[0]), bias=params[1])

    params = np.array([math.log(10.0), -10.0])
    value, grad = jax.jit(jax.value_and_grad(loss))(
        jnp.asarray(params, jnp.float32), jnp.asarray(sim, jnp.float32)
    )

    def ref(p):
        return ref_sigmoid(sim, labels, math.exp(p[0]), p[1])

    np.testing.assert_allclose(value, ref(params), rtol=RTOL)
    _close_grad(grad, _central_differences(ref, params))


def test_sigmoid_image_text_form():
    """key_labels without self_index: no column left out, SigLIP's matching pairs on the diagonal."""
    rng = _rng(3)
    images, texts = _unit(rng.normal(size=(6, 4))), _unit(rng.normal(size=(6, 4)))
    sim = images @ texts.T
    ids = np.arange(6)
    got = losses.sigmoid(jnp.asarray(sim, jnp.float32), jnp.asarray(ids), key_labels=jnp.asarray(ids))
    z = 2 * np.eye(6) - 1
    want = np.sum(np.logaddexp(0.0, -z * (10.0 * sim - 10.0))) / 6
    np.testing.assert_allclose(got, want, rtol=RTOL)


# ----------------------------------------------------------------------------------------------------------
# multi-hot labels on the softmax losses


def ref_multilabel_softmax(kind, sim, labels, temperature, weighting, key_labels=None, self_index=None):
    """Multi-hot labels: positive = a label shared, negative = none shared; 'jaccard' weighs each positive
    pair by |∩| / |∪| in the (weighted) mean over positives."""
    x = np.asarray(sim, np.float64) / temperature
    keys = labels if key_labels is None else key_labels
    n, m = x.shape
    own = list(range(n)) if key_labels is None else ([-1] * n if self_index is None else list(self_index))
    anchor_terms, pair_sum, pair_weight = [], 0.0, 0.0
    for a in range(n):
        shared = [int(np.sum(labels[a] & keys[j])) for j in range(m)]
        pos = [j for j in range(m) if shared[j] > 0 and j != own[a]]
        neg = [j for j in range(m) if shared[j] == 0]
        num = den = 0.0
        for p in pos:
            w = shared[p] / int(np.sum(labels[a] | keys[p])) if weighting == "jaccard" else 1.0
            if kind == "supcon":
                term = _logsumexp(x[a, k] for k in range(m) if k != own[a]) - x[a, p]
            else:
                term = _logsumexp([x[a, p]] + [x[a, q] for q in neg]) - x[a, p]
            num, den = num + w * term, den + w
        if pos:
            anchor_terms.append(num / den)
        pair_sum, pair_weight = pair_sum + num, pair_weight + den
    if kind == "info_nce":
        return pair_sum / pair_weight if pair_weight else 0.0
    return sum(anchor_terms) / len(anchor_terms) if anchor_terms else 0.0


def _multi_hot(n, width, seed, density=0.35):
    rng = _rng(seed)
    labels = rng.uniform(size=(n, width)) < density
    labels[n - 1] = False  # an anchor with no label: a negative of every key, an anchor without positives
    return labels


@pytest.mark.parametrize("weighting", losses.MULTILABELS)
@pytest.mark.parametrize("kind", ["supcon", "sincere", "info_nce"])
def test_multi_hot_softmax_losses_match_loop(kind, weighting):
    rng = _rng(5)
    x = rng.normal(size=(9, 4))
    labels = _multi_hot(9, 4, seed=6)
    sim = _unit(x) @ _unit(x).T
    fn = jax.jit(partial(getattr(losses, kind), temperature=0.3, multilabel=weighting))
    for y in (labels, labels.astype(np.int32)):  # bool or 0/1 integers
        got = fn(jnp.asarray(sim, jnp.float32), jnp.asarray(y))
        np.testing.assert_allclose(got, ref_multilabel_softmax(kind, sim, labels, 0.3, weighting), rtol=RTOL)
    # rectangular keys with self columns, and with key labels only
    keys, key_labels = rng.normal(size=(13, 4)), _multi_hot(13, 4, seed=7)
    self_index = np.array([3, 0, 12, 5, 8, 1, 9, 2, 10])
    keys[self_index], key_labels[self_index] = x, labels
    rect = _unit(x) @ _unit(keys).T
    for si in (self_index, None):
        got = fn(
            jnp.asarray(rect, jnp.float32),
            jnp.asarray(labels),
            key_labels=jnp.asarray(key_labels),
            self_index=None if si is None else jnp.asarray(si),
        )
        want = ref_multilabel_softmax(kind, rect, labels, 0.3, weighting, key_labels, si)
        np.testing.assert_allclose(got, want, rtol=RTOL)


@pytest.mark.parametrize("kind", ["supcon", "sincere", "info_nce"])
def test_one_hot_labels_are_the_integer_labels(kind):
    _, labels, sim = _pair_data(n=10, classes=4, seed=8)
    one_hot = np.eye(4, dtype=bool)[labels]
    fn = getattr(losses, kind)
    s = jnp.asarray(sim, jnp.float32)
    for weighting in losses.MULTILABELS:
        np.testing.assert_allclose(
            fn(s, jnp.asarray(one_hot), multilabel=weighting), fn(s, jnp.asarray(labels)), rtol=1e-6
        )


@pytest.mark.parametrize("kind", ["supcon", "info_nce"])
def test_multi_hot_blocked_equals_plain(kind):
    rng = _rng(9)
    e = jnp.asarray(rng.normal(size=(11, 6)), jnp.float32)
    labels = jnp.asarray(_multi_hot(11, 5, seed=10))
    plain, blocked = getattr(losses, kind), getattr(losses, f"{kind}_blocked")
    want = jax.value_and_grad(lambda e: plain(cosine(e, e), labels, multilabel="jaccard"))(e)
    got = jax.value_and_grad(lambda e: blocked(e, labels, multilabel="jaccard", block_size=4))(e)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# edges, NaN, bad input


def test_edges_finite_and_match_loop():
    """Identical points (neg_euclidean: a sqrt at 0), one class, no positive for an anchor: every pair loss
    finite with finite gradients, and equal to its loop."""
    cases = {
        "identical": (np.ones((6, 3)), np.array([0, 0, 1, 1, 2, 2])),
        "one_class": (_rng(1).normal(size=(6, 3)), np.zeros(6, int)),
        "lonely_anchor": (_rng(2).normal(size=(6, 3)), np.array([0, 0, 0, 1, 1, 2])),
    }
    for case, (x, labels) in cases.items():
        sim = np.asarray(neg_euclidean(jnp.asarray(x, jnp.float32), jnp.asarray(x, jnp.float32)), np.float64)
        for name, (fn, ref) in PAIR_CASES.items():
            y = jnp.asarray(labels)
            value, grad = jax.value_and_grad(lambda e, fn=fn, y=y: fn(neg_euclidean(e, e), y))(
                jnp.asarray(x, jnp.float32)
            )
            assert np.all(np.isfinite(grad)), (case, name)
            np.testing.assert_allclose(
                value, ref(sim, labels), rtol=RTOL, atol=1e-5, err_msg=f"{case} {name}"
            )


def test_one_embedding_per_proxy_class_and_identical_embeddings():
    """Identical embeddings and proxies (cos = 1 everywhere): finite value and gradients, as the loop."""
    e = jnp.ones((4, 3))
    w = jnp.ones((3, 3))
    labels = np.array([0, 1, 2, 0])
    for name, (fn, ref) in PROXY_CASES.items():
        similarity = neg_sq_euclidean if name == "proxy_nca" else cosine
        value, grads = jax.value_and_grad(
            lambda e, w, fn=fn, f=similarity: fn(f(e, w), jnp.asarray(labels)), (0, 1)
        )(e, w)
        assert all(np.all(np.isfinite(g)) for g in grads), name
        sim = np.asarray(similarity(e, w), np.float64)
        np.testing.assert_allclose(value, ref(sim, labels), rtol=RTOL, atol=ATOL, err_msg=name)


ALL_NEW = {
    **{name: (fn, "proxy") for name, (fn, _) in PROXY_CASES.items()},
    **{name: (fn, "pair") for name, (fn, _) in PAIR_CASES.items()},
}


@pytest.mark.parametrize("name", ALL_NEW)
def test_nan_anywhere_gives_nan(name):
    fn, kind = ALL_NEW[name]
    sim = np.asarray(_rng(0).uniform(-1, 1, size=(6, 6 if kind == "pair" else 3)), np.float32)
    labels = jnp.array([0, 0, 1, 1, 2, 2])
    assert np.isfinite(fn(jnp.asarray(sim), labels))
    for bad in (np.nan, np.inf):
        spoiled = sim.copy()
        spoiled[0, 0] = bad  # the self column / a single entry: masks must not hide it
        assert np.isnan(fn(jnp.asarray(spoiled), labels)), (name, bad)


def test_bad_inputs_raise_value_error_naming_the_argument():
    sim, y = jnp.zeros((4, 3)), jnp.array([0, 1, 2, 0])
    square = jnp.zeros((4, 4))
    cases = [
        (lambda: losses.proxy_anchor(sim, jnp.array([0, 1, 3, 0])), "labels"),
        (lambda: losses.proxy_nca(sim, jnp.array([0, -1, 2, 0])), "labels"),
        (lambda: losses.normalized_softmax(sim, y[:3]), "labels"),
        (lambda: losses.cosface(sim, y.astype(jnp.float32)), "labels"),
        (lambda: losses.arcface(jnp.zeros((4, 3, 1)), y), "sim"),
        (lambda: losses.arcface(sim.astype(jnp.int32), y), "sim"),
        (lambda: losses.arcface(jnp.zeros((4, 5)), y, sub_centers=2), "sub_centers"),
        (lambda: losses.arcface(jnp.zeros((4, 6)), jnp.array([0, 1, 2, 3]), sub_centers=2), "labels"),
        (lambda: losses.arcface(sim, y, sub_centers=0), "sub_centers"),
        (lambda: losses.arcface(sim, y, margin=4.0), "margin"),
        (lambda: losses.arcface(sim, y, scale=0.0), "scale"),
        (lambda: losses.proxy_anchor(sim, y, alpha=-1.0), "alpha"),
        (lambda: losses.proxy_anchor(sim, y, margin=-0.1), "margin"),
        (lambda: losses.normalized_softmax(sim, y, temperature=0.0), "temperature"),
        (lambda: losses.multi_similarity(square, y, beta=0.0), "beta"),
        (lambda: losses.circle(square, y, gamma=-2.0), "gamma"),
        (lambda: losses.sigmoid(square, y, scale=-1.0), "scale"),
        (lambda: losses.sigmoid(square, y, bias=jnp.zeros(2)), "bias"),
        (lambda: losses.sigmoid(square, y, pos_mask=jnp.ones((4, 4))), "pos_mask"),
        (lambda: losses.circle(square, y, neg_mask=jnp.ones((4, 3), bool)), "neg_mask"),
        (lambda: losses.triplet(square, y, pos_mask=jnp.ones((3, 4), bool)), "pos_mask"),
        (
            lambda: losses.sigmoid_ring(
                jnp.zeros((4, 2)), y, key_embeddings=jnp.zeros((4, 2)), axis_name=None
            ),
            "key_labels",
        ),
        (lambda: losses.sigmoid_ring(jnp.zeros((4, 2)), y, similarity="bogus", axis_name=None), "similarity"),
        (lambda: losses.supcon(square, jnp.full((4, 3), 2)), "labels"),
        (
            lambda: losses.supcon(square, jnp.zeros((4, 3), bool), key_labels=jnp.zeros((4, 2), bool)),
            "key_labels",
        ),
        (lambda: losses.sincere(square, jnp.zeros((4, 3), bool), multilabel="all"), "multilabel"),
        (
            lambda: losses.supcon_blocked(jnp.zeros((4, 2)), jnp.zeros((4, 3), bool), multilabel="x"),
            "multilabel",
        ),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


def test_vmap_and_jit_over_batches():
    batch = [_pair_data(n=7, seed=s) for s in range(3)]
    sims = jnp.stack([jnp.asarray(s, jnp.float32) for _, _, s in batch])
    ys = jnp.stack([jnp.asarray(y) for _, y, _ in batch])
    for name, (fn, ref) in PAIR_CASES.items():
        got = jax.jit(jax.vmap(fn))(sims, ys)
        want = [ref(s, y) for _, y, s in batch]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)
    x, proxies, labels = _proxy_data(n=6, classes=3, seed=1)
    sim = jnp.asarray(np.stack([_unit(x) @ _unit(proxies).T] * 2), jnp.float32)
    y = jnp.asarray(np.stack([labels, labels[::-1]]))
    got = jax.jit(jax.vmap(partial(losses.arcface, scale=8.0)))(sim, y)
    want = [ref_arcface(np.asarray(sim[0], np.float64), yy, 0.5, 8.0) for yy in (labels, labels[::-1])]
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_blocked_forms_keep_their_signatures_and_documents():
    """The factory-made blocked forms: the plain form's keywords and the blocked ones, each documented."""
    for kind in ("supcon", "sincere", "info_nce"):
        blocked = getattr(losses, f"{kind}_blocked")
        assert blocked.__name__ == f"{kind}_blocked"
        params = inspect.signature(blocked).parameters
        plain = set(inspect.signature(getattr(losses, kind)).parameters) - {"sim"}
        assert plain | {"embeddings", "similarity", "block_size", "key_embeddings"} == set(params)
        assert all(p.annotation is not inspect.Parameter.empty for p in params.values())
        args = blocked.__doc__.split("Args:")[1].split("Returns:")[0]
        assert set(re.findall(r"^        (\w+):", args, re.M)) == set(params)
        assert f"losses.{kind}_blocked(e, labels" in blocked.__doc__ and "{" not in blocked.__doc__


# ----------------------------------------------------------------------------------------------------------
# pytorch-metric-learning (not installed in CI): the same values and gradients on its own modules


def _pml():
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning import distances
    from pytorch_metric_learning import losses as pml

    return torch, pml, distances


def _pml_value_and_grads(torch, loss, x, labels, weights=None):
    """PML's loss and its gradients w.r.t. the embeddings and (when given) its proxy / weight parameter."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    value = loss(xt, torch.tensor(labels))
    value.backward()
    grads = [xt.grad.numpy()]
    if weights is not None:
        grads.append(getattr(loss, weights).grad.numpy())
    return float(value.detach()), grads


# name: (PML's class, its values for the same loss, its parameter holding the proxies; "W" is stored [D, C])
PML_PROXY = {
    "proxy_anchor": ("ProxyAnchorLoss", {"margin": 0.2, "alpha": 16.0}, "proxies"),
    "proxy_nca": ("ProxyNCALoss", {"softmax_scale": 3.0}, "proxies"),
    "normalized_softmax": ("NormalizedSoftmaxLoss", {"temperature": 0.2}, "W"),
    "arcface": ("ArcFaceLoss", {"margin": math.degrees(0.4), "scale": 10.0}, "W"),
    "cosface": ("CosFaceLoss", {"margin": 0.3, "scale": 12.0}, "W"),
    "sub_center_arcface": (
        "SubCenterArcFaceLoss",
        {"margin": math.degrees(0.3), "scale": 8.0, "sub_centers": 3},
        "W",
    ),
}
SUB_CENTER_ARCFACE = partial(losses.arcface, margin=0.3, scale=8.0, sub_centers=3)


@pytest.mark.parametrize("name", PML_PROXY)
def test_proxy_losses_equal_pytorch_metric_learning(name):
    torch, pml, _ = _pml()
    cls, kwargs, param = PML_PROXY[name]
    transposed = param == "W"
    fn = SUB_CENTER_ARCFACE if name == "sub_center_arcface" else PROXY_CASES[name][0]
    similarity = (
        (lambda e, p: neg_sq_euclidean(safe_normalize(e), safe_normalize(p)))
        if name == "proxy_nca"
        else cosine
    )
    x, proxies, labels = _proxy_data(n=12, classes=4, d=6, seed=3, sub_centers=kwargs.get("sub_centers", 1))
    loss = getattr(pml, cls)(num_classes=4, embedding_size=6, **kwargs).double()
    with torch.no_grad():
        getattr(loss, param).copy_(torch.tensor(proxies.T if transposed else proxies))
    want, (want_x, want_p) = _pml_value_and_grads(torch, loss, x, labels, param)
    y = jnp.asarray(labels)
    value, (grad_x, grad_p) = jax.value_and_grad(lambda e, p: fn(similarity(e, p), y), (0, 1))(
        jnp.asarray(x, jnp.float32), jnp.asarray(proxies, jnp.float32)
    )
    np.testing.assert_allclose(value, want, rtol=RTOL)
    _close_grad(grad_x, want_x)
    _close_grad(grad_p, want_p.T if transposed else want_p)


@pytest.mark.parametrize("name", ["multi_similarity", "circle"])
def test_pair_losses_equal_pytorch_metric_learning(name):
    torch, pml, _ = _pml()
    loss = {
        "multi_similarity": pml.MultiSimilarityLoss(alpha=3.0, beta=20.0, base=0.3),
        "circle": pml.CircleLoss(m=0.3, gamma=30.0),
    }[name]
    x, labels, _ = _pair_data(n=14, classes=4, seed=12)
    want, (want_x,) = _pml_value_and_grads(torch, loss, x, labels)
    fn = PAIR_CASES[name][0]
    value, grad = jax.value_and_grad(lambda e: fn(cosine(e, e), jnp.asarray(labels)))(
        jnp.asarray(x, jnp.float32)
    )
    np.testing.assert_allclose(value, want, rtol=RTOL)
    _close_grad(grad, want_x)
