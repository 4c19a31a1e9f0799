"""Never a plausible number from bad input: every jit-able function of geojax.similarity, manifolds, losses
and regularizers propagates a NaN or ±Inf input entry to a NaN in each output entry computed from it (a
loss or regulariser with one bad entry anywhere is NaN), whatever masks, selections or guards sit between."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geojax import losses, manifolds, regularizers, similarity

RNG = np.random.default_rng(0)
N, D = 8, 6
X = RNG.normal(size=(N, D)).astype(np.float32)
Y = RNG.normal(size=(5, D)).astype(np.float32)
LABELS = jnp.asarray([0, 0, 1, 1, 2, 2, 3, 4], jnp.int32)  # anchors 6 and 7 have no positive
SIM = np.asarray(similarity.cosine(X, X))
COORDS = RNG.normal(size=(N, 3, 2)).astype(np.float32)
Q = np.asarray(jax.nn.softmax(RNG.normal(size=(N, 3)), axis=1), np.float32)
PRIOR = RNG.normal(size=(5, 2)).astype(np.float32)

BAD = st.sampled_from([np.nan, np.inf, -np.inf])
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)


def _entry(shape):
    return st.tuples(*(st.integers(0, s - 1) for s in shape))


def _spoil(x, where, value):
    """x with the entry at ``where`` (a traced index tuple) set to ``value``."""
    return jnp.asarray(x).at[where].set(value)


# ----------------------------------------------------------------------------------------------------------
# scalar-valued: losses and regularisers, with the bad entry anywhere in the named argument


def _margin(fn, **kw):
    return lambda s, y: fn(s, y, **kw)


SIM_LOSSES = {
    "supcon": losses.supcon,
    "supcon_base_temperature": functools.partial(losses.supcon, base_temperature=0.07),
    "sincere": losses.sincere,
    "info_nce": losses.info_nce,
    "contrastive": _margin(losses.contrastive, pos_margin=0.7, neg_margin=0.1),
    "triplet_all": _margin(losses.triplet, margin=0.3),
    "triplet_hard": _margin(losses.triplet, margin=0.3, mining="hard"),
    "triplet_semihard": _margin(losses.triplet, margin=0.3, mining="semihard", reduction="mean"),
    "lifted_structured": _margin(losses.lifted_structured, neg_margin=0.5),
}
EMBEDDING_LOSSES = {
    "simo": losses.simo,
    "simo_no_orthogonality": functools.partial(losses.simo, orthogonality=False),
    "supcon_blocked": functools.partial(losses.supcon_blocked, block_size=3),
    "sincere_blocked": functools.partial(losses.sincere_blocked, block_size=3, similarity="neg_euclidean"),
    "info_nce_blocked": functools.partial(losses.info_nce_blocked, block_size=5, similarity="dot"),
}

# name: (function of the spoiled argument, its clean value)
SCALAR = {f"{name}/sim": (lambda s, fn=fn: fn(s, LABELS), SIM) for name, fn in SIM_LOSSES.items()}
SCALAR |= {f"{name}/embeddings": (lambda e, fn=fn: fn(e, LABELS), X) for name, fn in EMBEDDING_LOSSES.items()}
SCALAR |= {
    "koleo/x": (regularizers.koleo, X),
    "mmd_atlas/coords": (lambda c: regularizers.mmd_atlas(c, Q, PRIOR), COORDS),
    "mmd_atlas/q": (lambda q: regularizers.mmd_atlas(COORDS, q, PRIOR), Q),
    "mmd_atlas/prior": (lambda w: regularizers.mmd_atlas(COORDS, Q, w), PRIOR),
    "membership/q": (regularizers.membership, Q),
}


@functools.cache
def _scalar_fn(name):
    fn, _ = SCALAR[name]
    return jax.jit(lambda x, where, value: fn(_spoil(x, where, value)))


def test_scalar_functions_are_finite_on_clean_input():
    # The jitted functions of the tests below, given an entry's own value: the input unchanged.
    for name, (_, clean) in SCALAR.items():
        where = (0,) * np.ndim(clean)
        assert np.isfinite(float(_scalar_fn(name)(clean, where, float(np.asarray(clean)[where])))), name


@SETTINGS
@given(name=st.sampled_from(sorted(SCALAR)), data=st.data(), value=BAD)
def test_scalar_functions_are_nan_with_one_bad_entry(name, data, value):
    clean = SCALAR[name][1]
    where = data.draw(_entry(clean.shape))
    assert np.isnan(float(_scalar_fn(name)(clean, where, value))), (name, where, value)


def test_every_entry_of_sim_reaches_every_loss():
    """Exhaustive over the positions: the self column, pairs of anchors without positives, positives and
    negatives, both NaN and +Inf (the entries that masks or mining used to drop)."""
    for name in SIM_LOSSES:
        fn = _scalar_fn(f"{name}/sim")
        for value in (np.nan, np.inf):
            got = np.array([[float(fn(SIM, (i, j), value)) for j in range(N)] for i in range(N)])
            assert np.all(np.isnan(got)), (name, value, np.argwhere(~np.isnan(got))[:4])


# ----------------------------------------------------------------------------------------------------------
# matrix-valued similarities: the bad row's (or column's) entries are NaN, the others unchanged


PAIRWISE = {name: similarity.get(name) for name in similarity.SIMILARITIES}


@functools.cache
def _pairwise_fn(name, side):
    fn = PAIRWISE[name]
    if side == "a":
        return jax.jit(lambda a, b, where, value: fn(_spoil(a, where, value), b))
    return jax.jit(lambda a, b, where, value: fn(a, _spoil(b, where, value)))


@SETTINGS
@given(name=st.sampled_from(sorted(PAIRWISE)), side=st.sampled_from("ab"), data=st.data(), value=BAD)
def test_similarities_nan_exactly_where_a_bad_row_enters(name, side, data, value):
    where = data.draw(_entry((X if side == "a" else Y).shape))
    got = np.asarray(_pairwise_fn(name, side)(X, Y, where, value))
    clean = np.asarray(PAIRWISE[name](X, Y))
    hit = np.zeros(got.shape, bool)
    if side == "a":
        hit[where[0], :] = True
    else:
        hit[:, where[0]] = True
    assert np.all(np.isnan(got[hit])), (name, side, where, value)
    np.testing.assert_allclose(got[~hit], clean[~hit], rtol=1e-5, atol=1e-6)


@SETTINGS
@given(arg=st.sampled_from(["coords_a", "q_a", "coords_b", "q_b"]), data=st.data(), value=BAD)
def test_manifold_distance_nan_in_the_bad_row(arg, data, value):
    clean = {"coords_a": COORDS, "q_a": Q, "coords_b": COORDS[:5], "q_b": Q[:5]}
    where = data.draw(_entry(clean[arg].shape))
    args = dict(clean, **{arg: _spoil(clean[arg], where, value)})
    got = np.asarray(similarity.manifold_distance(**args, no_overlap=1e3))
    bad = got[where[0], :] if arg.endswith("_a") else got[:, where[0]]
    assert np.all(np.isnan(bad)), (arg, where, value)


# ----------------------------------------------------------------------------------------------------------
# projections: NaN in every output entry computed from the bad input entry


T = RNG.uniform(-2, 2, size=(4, 6)).astype(np.float32)


def _finite_except(x, rows):
    return np.isfinite(np.delete(np.asarray(x), rows, axis=0)).all()


@SETTINGS
@given(data=st.data(), value=BAD)
def test_projections_nan_where_the_bad_entry_enters(data, value):
    i, k = data.draw(_entry(T.shape))
    t = _spoil(T, (i, k), value)
    # the normalised vector: its whole row (the norm enters every entry), no other row
    unit = manifolds.sphere(t)
    assert np.all(np.isnan(unit[i])) and _finite_except(unit, i)
    # angles: only that angle and its Clifford pair
    assert np.isnan(manifolds.wrap(t)[i, k]) and np.sum(np.isnan(manifolds.wrap(t))) == 1
    z = np.asarray(manifolds.torus_clifford(t))
    assert np.all(np.isnan(z[i, 2 * k : 2 * k + 2])) and np.sum(np.isnan(z)) == 2
    # pairs: the pair holding the entry, and its angle
    pair = k // 2
    assert np.all(np.isnan(manifolds.torus_l2p(t)[i, 2 * pair : 2 * pair + 2]))
    angles = manifolds.clifford_to_angles(t)
    assert np.isnan(angles[i, pair]) and np.sum(np.isnan(angles)) == 1


@SETTINGS
@given(data=st.data(), value=BAD)
def test_atlas_split_and_code_nan_in_the_bad_row(data, value):
    charts, dim = 3, 2
    h = RNG.normal(size=(N, charts * dim + charts)).astype(np.float32)
    chosen = np.argmax(np.asarray(manifolds.atlas_split(h, charts=charts, dim=dim)[1]), axis=1)
    i, k = data.draw(_entry(h.shape))
    coords, q = manifolds.atlas_split(_spoil(h, (i, k), value), charts=charts, dim=dim)
    code, _ = manifolds.atlas_code(coords, q)
    if k >= charts * dim:  # a membership logit: every membership and the whole code of that row
        assert np.all(np.isnan(q[i])) and np.all(np.isnan(code[i]))
    else:
        assert np.isnan(coords[i, k // dim, k % dim])
        if k // dim == chosen[i]:  # a coordinate of the chart the code keeps
            assert np.isnan(code[i, k % dim])
    assert _finite_except(code, i)
