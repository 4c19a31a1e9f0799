"""Retrieval metrics vs naive numpy double loops; circular variance; few-shot episodes by enumeration."""

import itertools
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import manifolds, metrics, similarity

# --------------------------------------------------------------------------------------------------------
# Naive references: a full [Nq, Nr] similarity matrix, a sorted() per query, plain Python loops.
# --------------------------------------------------------------------------------------------------------


def naive_ranked(sim, same):
    """Per query, reference indices by decreasing similarity, ties to the lower index, self left out."""
    nq, nr = sim.shape
    return [
        sorted((j for j in range(nr) if not (same and j == i)), key=lambda j: (-sim[i, j], j))
        for i in range(nq)
    ]


def naive_all(sim, ql, rl, same, *, ks, k_ap, k_knn):
    ranked = naive_ranked(sim, same)
    p1, rec, mapr, ap, knn = [], {k: [] for k in ks}, [], [], []
    for i, order in enumerate(ranked):
        labs = [rl[j] for j in order]
        rel = [lab == ql[i] for lab in labs]
        r = sum(rel)
        # AP over the top k_ap (0 when nothing relevant is retrieved); every query counts
        hits, acc = 0, 0.0
        for pos in range(k_ap):
            if rel[pos]:
                hits += 1
                acc += hits / (pos + 1)
        ap.append(acc / hits if hits else 0.0)
        # kNN: majority vote, ties to the label met first in rank order
        votes = Counter(labs[:k_knn])
        best = max(votes.values())
        knn.append(next(lab for lab in labs[:k_knn] if votes[lab] == best) == ql[i])
        if r == 0:  # relevant-free: left out of P@1, R@k, MAP@R
            continue
        p1.append(rel[0])
        for k in ks:
            rec[k].append(any(rel[:k]))
        hits, acc = 0, 0.0
        for pos in range(r):
            if rel[pos]:
                hits += 1
                acc += hits / (pos + 1)
        mapr.append(acc / r)
    return {
        "p1": np.mean(p1),
        "recall": {k: np.mean(v) for k, v in rec.items()},
        "map_at_r": np.mean(mapr),
        "map": np.mean(ap),
        "knn": np.mean(knn),
    }


def ours_all(q, ql, r, rl, *, sim, ks, k_ap, k_knn, chunk_size):
    kw = dict(similarity=sim, chunk_size=chunk_size)
    return {
        "p1": metrics.precision_at_1(q, ql, r, rl, **kw),
        "recall": metrics.recall_at_k(q, ql, r, rl, ks=ks, **kw),
        "map_at_r": metrics.map_at_r(q, ql, r, rl, **kw),
        "map": metrics.mean_average_precision(q, ql, r, rl, k=k_ap, **kw),
        "knn": metrics.knn_accuracy(q, ql, r, rl, k=k_knn, **kw),
    }


def assert_same(ours, ref):
    for name in ("p1", "map_at_r", "map", "knn"):
        np.testing.assert_allclose(ours[name], ref[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert set(ours["recall"]) == set(ref["recall"])
    for k in ref["recall"]:
        np.testing.assert_allclose(ours["recall"][k], ref["recall"][k], rtol=1e-6, err_msg=f"R@{k}")


def tied_data(rng, n, d=3, classes=4):
    """Small integer vectors: `dot` similarities are exact in float32 and full of ties; plus duplicates,
    and one label (99) carried by a single row."""
    x = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    x[1] = x[0]
    x[5] = x[2]
    y = rng.integers(0, classes, size=n).astype(np.int32)
    y[3] = 99
    return x, y


# --------------------------------------------------------------------------------------------------------
# Every ranking metric against the naive loops.
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("same", [True, False])
def test_ranking_metrics_with_ties_vs_naive(same):
    rng = np.random.default_rng(1)
    q, ql = tied_data(rng, 23)
    r, rl = (None, None) if same else tied_data(rng, 31)
    sim = np.asarray(similarity.dot(q, q if same else r))
    ks, k_ap, k_knn = (1, 2, 4, 8), 6, 5
    ref = naive_all(sim, ql, ql if same else rl, same, ks=ks, k_ap=k_ap, k_knn=k_knn)
    assert_same(ours_all(q, ql, r, rl, sim="dot", ks=ks, k_ap=k_ap, k_knn=k_knn, chunk_size=7), ref)


def test_cosine_full_ranking_map_and_knn_ties_vs_naive():
    rng = np.random.default_rng(2)
    q = rng.normal(size=(40, 5)).astype(np.float32)
    ql = rng.integers(0, 3, size=40)
    sim = np.asarray(similarity.cosine(q, q))
    ref = naive_all(sim, ql, ql, True, ks=(3,), k_ap=39, k_knn=4)  # k=4 with 3 labels: vote ties happen
    assert_same(ours_all(q, ql, None, None, sim="cosine", ks=(3,), k_ap=None, k_knn=4, chunk_size=16), ref)


def test_callable_similarity_on_atlas_tuples_vs_naive():
    rng = np.random.default_rng(3)
    coords = rng.normal(size=(20, 3, 2)).astype(np.float32)
    q = np.array(jax.nn.softmax(3 * rng.normal(size=(20, 3)), axis=1), np.float32)
    q[:4] = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]  # one-hot rows: some pairs do not overlap (d_M = inf)
    labels = rng.integers(0, 4, size=20)

    def neg_dm(a, b):
        return -similarity.manifold_distance(a[0], a[1], b[0], b[1])

    sim = np.asarray(neg_dm((coords, q), (coords, q)))
    assert np.isinf(sim).any()
    ref = naive_all(sim, labels, labels, True, ks=(1, 2), k_ap=19, k_knn=1)
    kw = dict(similarity=neg_dm, chunk_size=6)
    data = ((coords, q), labels)
    assert metrics.recall_at_k(*data, ks=(1, 2), **kw) == pytest.approx(ref["recall"])
    assert metrics.map_at_r(*data, **kw) == pytest.approx(ref["map_at_r"])
    assert metrics.mean_average_precision(*data, **kw) == pytest.approx(ref["map"])


def test_self_is_excluded_even_below_minus_inf():
    x = np.zeros((5, 2), np.float32)
    labels = np.array([0, 0, 1, 1, 0])

    def nothing_overlaps(a, b):
        return jnp.full((a.shape[0], b.shape[0]), -jnp.inf)

    # every candidate ties at -inf: the nearest is the lowest index that is not the query itself
    # nearest: 0->1 (0 ok), 1->0 (0 ok), 2->0 (1 vs 0 miss), 3->0 (miss), 4->0 (ok)
    assert metrics.precision_at_1(x, labels, similarity=nothing_overlaps) == pytest.approx(3 / 5)
    # with reference given explicitly nothing is excluded: each query finds row 0 first
    assert metrics.precision_at_1(x, labels, x, labels, similarity=nothing_overlaps) == pytest.approx(3 / 5)
    y = np.eye(5, dtype=np.float32)
    assert metrics.precision_at_1(y, labels, y, labels, similarity="dot") == 1.0  # itself, not excluded
    assert metrics.precision_at_1(y, labels, similarity="dot") == pytest.approx(3 / 5)  # all 0: lowest other


def test_relevant_free_queries_hand_computed():
    x = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9], [-1, 0]], np.float32)
    labels = np.array([0, 0, 1, 1, 2])  # label 2 has no other member
    assert metrics.precision_at_1(x, labels) == 1.0  # 4 queries counted, all hit
    assert metrics.map_at_r(x, labels) == 1.0
    assert metrics.recall_at_k(x, labels, ks=(1, 4)) == {1: 1.0, 4: 1.0}
    assert metrics.knn_accuracy(x, labels, k=1) == pytest.approx(0.8)  # the lone query is just wrong
    assert metrics.mean_average_precision(x, labels) == pytest.approx(0.8)  # and scores 0 here
    assert math.isnan(metrics.precision_at_1(x, np.arange(5)))  # nobody has a match: NaN, not 0


def test_map_at_r_hand_computed():
    # query 0 (label 0), reference order by dot: rows 1(l0), 2(l1), 3(l0), 4(l1); R = 2
    # MAP@R = (1/2)(1/1 + 0) = 0.5; AP (full ranking) = (1/2)(1 + 2/3)
    q = np.array([[1.0]], np.float32)
    r = np.array([[4.0], [3.0], [2.0], [1.0]], np.float32)
    rl = np.array([0, 1, 0, 1])
    assert metrics.map_at_r(q, [0], r, rl, similarity="dot") == pytest.approx(0.5)
    assert metrics.mean_average_precision(q, [0], r, rl, similarity="dot") == pytest.approx((1 + 2 / 3) / 2)
    assert metrics.mean_average_precision(q, [0], r, rl, similarity="dot", k=2) == pytest.approx(1.0)
    assert metrics.knn_accuracy(q, [0], r, rl, similarity="dot", k=4) == 1.0  # 2-2 tie: label of rank 1 wins
    assert metrics.knn_accuracy(q, [1], r, rl, similarity="dot", k=4) == 0.0


@pytest.mark.parametrize("same", [True, False])
def test_chunked_equals_unchunked(same):
    rng = np.random.default_rng(4)
    q, ql = tied_data(rng, 29)
    r, rl = (None, None) if same else tied_data(rng, 17)

    def both(chunk_size):
        kw = dict(similarity="dot", chunk_size=chunk_size)
        return (
            metrics.recall_at_k(q, ql, r, rl, ks=(1, 3, 5), **kw),
            metrics.mean_average_precision(q, ql, r, rl, **kw),
        )

    whole = both(29)
    for chunk_size in (1, 4, 1000):  # 4 does not divide 29; 1000 is clamped to 29
        recall, mean_ap = both(chunk_size)
        assert recall == whole[0]  # exact: integer similarities
        assert mean_ap == pytest.approx(whole[1], rel=1e-6)  # a mean of per-query floats: summation order


def test_against_pytorch_metric_learning():
    pml = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    labels = rng.integers(0, 6, size=300)
    labels[7] = 50  # a lone label, left out by both
    x[labels == 1] += 1.5  # some structure so the numbers are not all chance
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)  # PML's default L2 kNN ranks unit vectors as cosine
    calc = pml.AccuracyCalculator(
        include=("precision_at_1", "mean_average_precision_at_r"), k="max_bin_count"
    )
    want = calc.get_accuracy(unit, labels, unit, labels, ref_includes_query=True)
    assert metrics.precision_at_1(x, labels) == pytest.approx(want["precision_at_1"], abs=1e-6)
    assert metrics.map_at_r(x, labels) == pytest.approx(want["mean_average_precision_at_r"], abs=1e-6)


# --------------------------------------------------------------------------------------------------------
# nearest_neighbors against a full similarity matrix and numpy's stable argsort.
# --------------------------------------------------------------------------------------------------------


def naive_neighbors(sim, k, same):
    """Stable argsort of −similarity (ties to the lower index); the diagonal removed when same."""
    order = np.argsort(-sim, axis=1, kind="stable")
    if same:
        order = np.array([row[row != i] for i, row in enumerate(order)])
    return order[:, :k]


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_nearest_neighbors_with_ties_vs_stable_argsort(same, chunk_size):
    rng = np.random.default_rng(11)
    q, _ = tied_data(rng, 23)
    r = None if same else tied_data(rng, 31)[0]
    sim = np.asarray(similarity.dot(q, q if same else r), np.float64)  # small integers: exact, many ties
    got = metrics.nearest_neighbors(q, r, k=6, similarity="dot", chunk_size=chunk_size)
    assert got.shape == (23, 6) and got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_neighbors(sim, 6, same))


def test_nearest_neighbors_cosine_full_ranking_and_callable_tuples():
    rng = np.random.default_rng(12)
    q = rng.normal(size=(40, 5)).astype(np.float32)
    r = rng.normal(size=(25, 5)).astype(np.float32)
    sim = np.asarray(similarity.cosine(q, r))
    np.testing.assert_array_equal(
        metrics.nearest_neighbors(q, r, k=25, chunk_size=16), naive_neighbors(sim, 25, False)
    )
    # An atlas (coords, q) with the negated manifold distance; −inf (no chart overlap) ranks last.
    coords = rng.normal(size=(20, 3, 2)).astype(np.float32)
    member = np.array(jax.nn.softmax(3 * rng.normal(size=(20, 3)), axis=1), np.float32)
    member[:4] = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]

    def neg_dm(a, b):
        return -similarity.manifold_distance(a[0], a[1], b[0], b[1])

    sim = np.asarray(neg_dm((coords, member), (coords, member)))
    assert np.isinf(sim).any()
    got = metrics.nearest_neighbors((coords, member), k=19, similarity=neg_dm, chunk_size=6)
    np.testing.assert_array_equal(got, naive_neighbors(sim, 19, True))


def test_nearest_neighbors_is_first_rank_of_precision_at_1():
    rng = np.random.default_rng(13)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    labels = rng.integers(0, 3, size=30)
    nn = metrics.nearest_neighbors(x)[:, 0]
    assert (nn != np.arange(30)).all()
    assert metrics.precision_at_1(x, labels) == pytest.approx(np.mean(labels[nn] == labels))


# --------------------------------------------------------------------------------------------------------
# Circular variance (Stowell 2026, eq. 4).
# --------------------------------------------------------------------------------------------------------


def test_circular_variance_vs_numpy_and_pinned():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(50, 6)).astype(np.float32)
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    assert float(metrics.circular_variance(z)) == pytest.approx(1 - np.linalg.norm(u.mean(0)), abs=1e-6)
    assert float(metrics.circular_variance(np.tile([[0.6, 0.8]], (7, 1)))) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics.circular_variance(np.array([[1.0, 0], [-1, 0]]))) == pytest.approx(1.0)
    batched = jax.vmap(metrics.circular_variance)(jnp.stack([z, -z, 2 * z]))
    np.testing.assert_allclose(batched, float(metrics.circular_variance(z)), rtol=1e-6)


def test_circular_variance_on_clifford_torus_is_overall_not_per_angle():
    rng = np.random.default_rng(7)
    t = np.stack([rng.uniform(0, 1, 300), rng.normal(0.2, 0.05, 300), rng.uniform(0, 0.5, 300)], 1)
    resultant = np.abs(np.exp(2j * np.pi * t).mean(0))  # R̄_k per angle, straight from the angles
    got = float(metrics.circular_variance(manifolds.torus_clifford(jnp.asarray(t, jnp.float32))))
    assert got == pytest.approx(1 - np.sqrt(np.mean(resultant**2)), abs=1e-5)
    assert abs(got - (1 - resultant.mean())) > 0.01  # the per-angle average is a different number


# --------------------------------------------------------------------------------------------------------
# Few-shot episodes: mean over many episodes vs the exact expectation by enumeration.
# --------------------------------------------------------------------------------------------------------


def exact_one_shot(support_sets, query_sets):
    """Expected 2-way 1-shot 1-query accuracy (dot similarity, no ties): every (support, query) choice per
    class equally likely; in the same-set case support and query are distinct rows."""
    accs = []
    for choice in itertools.product(
        *[list(itertools.product(s, qs)) for s, qs in zip(support_sets, query_sets, strict=True)]
    ):
        if any(sv is qv for sv, qv in choice):
            continue
        protos = [sv for sv, _ in choice]
        accs.append(np.mean([np.argmax([qv @ p for p in protos]) == c for c, (_, qv) in enumerate(choice)]))
    return np.mean(accs)


def test_few_shot_same_set_matches_enumeration():
    a = [np.array([1.0, 0.0]), np.array([0.8, 0.7]), np.array([0.5, -0.2])]
    b = [np.array([0.0, 1.0]), np.array([0.6, 0.9]), np.array([0.45, 0.3])]
    x = np.stack(a + b).astype(np.float32)
    labels = np.array([0, 0, 0, 1, 1, 1])
    want = exact_one_shot([a, b], [a, b])
    mean, ci = metrics.few_shot_accuracy(
        x, labels, key=jax.random.key(0), ways=2, shots=1, queries=1, episodes=4000, similarity="dot"
    )
    assert 0.55 < want < 0.95
    assert abs(mean - want) < 3 * ci / 1.96 + 1e-3


def test_few_shot_separate_reference_matches_enumeration():
    sa = [np.array([1.0, 0.0]), np.array([0.7, 0.7])]
    sb = [np.array([0.0, 1.0]), np.array([0.9, 0.3])]
    qa = [np.array([0.9, 0.5]), np.array([0.2, -0.4])]
    qb = [np.array([0.3, 1.0]), np.array([1.0, 0.6])]
    want = exact_one_shot([sa, sb], [qa, qb])
    mean, ci = metrics.few_shot_accuracy(
        np.stack(qa + qb).astype(np.float32),
        [0, 0, 1, 1],
        np.stack(sa + sb).astype(np.float32),
        [0, 0, 1, 1],
        key=jax.random.key(1),
        ways=2,
        shots=1,
        queries=1,
        episodes=4000,
        similarity="dot",
    )
    assert abs(mean - want) < 3 * ci / 1.96 + 1e-3


def test_few_shot_separated_clusters_and_key():
    rng = np.random.default_rng(8)
    centres = 10 * np.eye(8, dtype=np.float32)
    labels = np.repeat(np.arange(8), 12)
    x = centres[labels] + rng.normal(size=(96, 8)).astype(np.float32) * 0.1
    kw = dict(ways=5, shots=2, queries=5, episodes=50)
    mean, ci = metrics.few_shot_accuracy(x, labels, key=jax.random.key(2), **kw)
    assert (mean, ci) == (1.0, 0.0)
    noisy = centres[labels] + rng.normal(size=(96, 8)).astype(np.float32) * 12
    one = metrics.few_shot_accuracy(noisy, labels, key=jax.random.key(3), **kw)
    assert one == metrics.few_shot_accuracy(noisy, labels, key=jax.random.key(3), **kw)
    assert one != metrics.few_shot_accuracy(noisy, labels, key=jax.random.key(4), **kw)


# --------------------------------------------------------------------------------------------------------
# Validation: ValueError naming the argument, before any work.
# --------------------------------------------------------------------------------------------------------

X = np.zeros((6, 3), np.float32)
Y = np.array([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: metrics.precision_at_1(X[0], Y), "query"),
        (lambda: metrics.precision_at_1(X, Y[:5]), "query_labels"),
        (lambda: metrics.precision_at_1(X, Y.astype(np.float32)), "query_labels"),
        (lambda: metrics.precision_at_1(X, Y, X[:4], Y), "reference_labels"),
        (lambda: metrics.precision_at_1(X, Y, X), "reference_labels"),
        (lambda: metrics.precision_at_1(X, Y, reference_labels=Y), "reference_labels"),
        (lambda: metrics.precision_at_1(X, Y, X[:, :2], Y), "query and reference"),
        (lambda: metrics.precision_at_1(X.astype(np.int32), Y), "query"),
        (lambda: metrics.precision_at_1((X, X), Y), "query"),
        (
            lambda: metrics.precision_at_1(
                (X, X), Y, (X, X[:, :2]), Y, similarity=lambda a, b: a[0] @ b[0].T
            ),
            "query",
        ),
        (lambda: metrics.precision_at_1(X, Y, similarity="hamming"), "similarity"),
        (lambda: metrics.precision_at_1(X, Y, similarity=lambda a, b: a), "similarity"),
        (lambda: metrics.precision_at_1(X, Y, chunk_size=0), "chunk_size"),
        (lambda: metrics.precision_at_1(X[:1], Y[:1]), "query"),
        (lambda: metrics.recall_at_k(X, Y, ks=(1, 6)), "ks"),
        (lambda: metrics.recall_at_k(X, Y, ks=4), "ks"),
        (lambda: metrics.recall_at_k(X, Y, ks=()), "ks"),
        (lambda: metrics.knn_accuracy(X, Y, X, Y, k=7), "k"),
        (lambda: metrics.mean_average_precision(X, Y, k=0), "k"),
        (lambda: metrics.circular_variance(X[0]), "z"),
        (lambda: metrics.few_shot_accuracy(X, Y, key=jax.random.key(0), ways=2, queries=2), "ways"),
        (
            lambda: metrics.few_shot_accuracy(X, Y, key=jax.random.key(0), ways=2, queries=1, episodes=1),
            "episodes",
        ),
        (lambda: metrics.few_shot_accuracy(X, Y, X[:, :2], Y, key=jax.random.key(0)), "query and reference"),
        (lambda: metrics.nearest_neighbors(X, k=6), "k"),
        (lambda: metrics.nearest_neighbors(X, X[:, :2]), "query and reference"),
        (lambda: metrics.nearest_neighbors(X[:1]), "query"),
        (lambda: metrics.nearest_neighbors(X, chunk_size=0), "chunk_size"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()


@pytest.mark.parametrize("same", [False, True])
def test_retrieval_metrics_equal_the_separate_functions(same):
    """One search gives what precision_at_1, knn_accuracy and recall_at_k give (ties included: integer
    embeddings; a relevant-free query; an atlas d_M callable on tuples)."""
    rng = np.random.default_rng(7)
    q = rng.integers(0, 3, size=(37, 4)).astype(np.float32)
    r = None if same else rng.integers(0, 3, size=(53, 4)).astype(np.float32)
    ql = rng.integers(0, 4, size=37)
    ql[0] = 9  # relevant-free
    rl = None if same else rng.integers(0, 4, size=53)
    args = (q, ql, r, rl)
    kw = dict(similarity="neg_euclidean", chunk_size=8)  # one block shape: the same similarity roundings
    for knn_k, ks in ((5, (1, 2, 4, 8)), (3, ()), (1, (2,))):
        got = metrics.retrieval_metrics(*args, knn_k=knn_k, ks=ks, **kw)
        assert got["precision_at_1"] == metrics.precision_at_1(*args, **kw)
        assert got["knn_accuracy"] == metrics.knn_accuracy(*args, k=knn_k, **kw)
        if ks:
            assert got["recall_at_k"] == metrics.recall_at_k(*args, ks=ks, **kw)
        else:
            assert "recall_at_k" not in got
    coords, memberships = rng.normal(size=(37, 4, 2)), rng.random((37, 4))
    atlas = (coords.astype(np.float32), memberships.astype(np.float32))

    def neg_d_m(a, b):
        return -similarity.manifold_distance(a[0], a[1], b[0], b[1])

    got = metrics.retrieval_metrics(atlas, ql, knn_k=5, ks=(1, 8), similarity=neg_d_m)
    assert got["recall_at_k"] == metrics.recall_at_k(atlas, ql, ks=(1, 8), similarity=neg_d_m)
    assert got["knn_accuracy"] == metrics.knn_accuracy(atlas, ql, k=5, similarity=neg_d_m)


def test_retrieval_metrics_refuses_bad_k():
    x, y = np.eye(4, dtype=np.float32), np.arange(4)
    with pytest.raises(ValueError, match="knn_k"):
        metrics.retrieval_metrics(x, y, knn_k=0)
    with pytest.raises(ValueError, match="ks"):
        metrics.retrieval_metrics(x, y, ks=(1, -2))
    with pytest.raises(ValueError, match="ks must be a sequence"):
        metrics.retrieval_metrics(x, y, ks=4)
    with pytest.raises(ValueError):
        metrics.retrieval_metrics(x, y, knn_k=4)  # only 3 other rows to rank
