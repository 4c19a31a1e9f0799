"""geojax.models: encoders, geometry and atlas heads, MSimCLR q-mixed projection vs numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import manifolds, models
from geojax.models import _kernels

_NHWC = ("NHWC", "HWIO", "NHWC")


def _np(v):
    return np.asarray(v[...], np.float64)


def _count(module_fn):
    abstract = nnx.eval_shape(module_fn)
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))


def test_resnet_parameter_counts_match_published_cifar_variants():
    # torchvision ResNet-18 / ResNet-50 have 11,689,512 / 25,557,032 parameters; without the 1000-way fc
    # (513,000 / 2,049,000) and with the CIFAR 3×3 stem (1,728 instead of the 7×7 stem's 9,408) that is
    # 11,168,832 / 23,500,352.
    assert (
        _count(lambda: models.ResNet(3, depth=18, rngs=nnx.Rngs(0))) == 11_689_512 - 513_000 - 9_408 + 1_728
    )
    assert (
        _count(lambda: models.ResNet(3, depth=50, rngs=nnx.Rngs(0))) == 25_557_032 - 2_049_000 - 9_408 + 1_728
    )


@pytest.mark.parametrize(
    "name,shape",
    [
        ("mlp", (8, 8, 1)),
        ("cnn", (8, 8, 1)),
        ("cnn", (28, 28, 1)),
        ("cnn", (32, 32, 3)),
        ("resnet18", (8, 8, 3)),
    ],
)
def test_encoders_map_images_to_features(name, shape):
    features = []

    def build_and_run():
        enc = models.encoder(name, input_shape=shape, width=8, rngs=nnx.Rngs(0))
        features.append(enc.features)
        return enc(jnp.ones((3, *shape)))

    h = jax.eval_shape(build_and_run)  # traces every layer, allocates nothing
    assert h.shape == (3, features[0]) and h.dtype == jnp.float32


def test_mlp_is_relu_linear_stack():
    mlp = models.MLP(6, hidden=(5, 4), rngs=nnx.Rngs(1))
    x = np.random.default_rng(0).normal(size=(3, 2, 3)).astype(np.float32)
    h = x.reshape(3, 6).astype(np.float64)
    for layer in mlp.layers:
        h = np.maximum(h @ _np(layer.kernel) + _np(layer.bias), 0)
    np.testing.assert_allclose(mlp(jnp.asarray(x)), h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("geometry", ["euclidean", "sphere", "torus_c", "torus_n"])
def test_geometry_head_is_stowell_mlp_then_projection(geometry):
    head = models.GeometryHead(5, 4, geometry=geometry, rngs=nnx.Rngs(2))
    h = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    hid = np.maximum(h @ _np(head.hidden.kernel) + _np(head.hidden.bias), 0)
    assert _np(head.hidden.kernel).shape == (5, 16)  # Linear(h, 4D)
    raw = hid @ _np(head.out.kernel) + _np(head.out.bias)
    if geometry == "sphere":
        want = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    elif geometry == "torus_n":  # each adjacent pair to norm √(2/D)
        pairs = raw.reshape(6, 2, 2)
        want = (pairs / np.linalg.norm(pairs, axis=2, keepdims=True)).reshape(6, 4) * np.sqrt(2 / 4)
    elif geometry == "torus_c":  # raw values are turns: (cos 2πt, sin 2πt) pairs, scale √(1/D)
        want = np.stack([np.cos(2 * np.pi * raw), np.sin(2 * np.pi * raw)], -1).reshape(6, 8) * np.sqrt(1 / 4)
    else:
        want = raw
    got = head(jnp.asarray(h))
    assert got.shape == (6, models.embedding_width(geometry, 4)) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_atlas_head_splits_coordinates_and_softmax_membership():
    head = models.AtlasHead(5, charts=3, dim=2, rngs=nnx.Rngs(3))
    h = np.random.default_rng(2).normal(size=(4, 5)).astype(np.float32)
    raw = h @ _np(head.linear.kernel) + _np(head.linear.bias)
    coords, q = head(jnp.asarray(h))
    want_coords, want_q = manifolds.atlas_split(jnp.asarray(raw, jnp.float32), charts=3, dim=2)
    np.testing.assert_allclose(coords, want_coords, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q, want_q, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.sum(q, 1), 1.0, rtol=1e-6)


def test_mixed_projection_is_q_weighted_sum_of_chart_heads():
    mix = models.MixedProjection(charts=3, dim=2, hidden=5, out=4, rngs=nnx.Rngs(4))
    rng = np.random.default_rng(3)
    coords = rng.normal(size=(6, 3, 2)).astype(np.float32)
    q = rng.dirichlet(np.ones(3), size=6).astype(np.float32)
    want = np.zeros((6, 4))
    for n in range(6):  # z = Σ_c q_c · h_c(sigmoid(coords_c)), h_c = Linear → ReLU → Linear (no biases)
        for c in range(3):
            s = 1 / (1 + np.exp(-coords[n, c].astype(np.float64)))
            hid = np.maximum(s @ _np(mix.w1)[c], 0)
            want[n] += q[n, c] * (hid @ _np(mix.w2)[c])
    np.testing.assert_allclose(mix(jnp.asarray(coords), jnp.asarray(q)), want, rtol=1e-4, atol=1e-5)


def test_embedding_model_outputs_and_bf16_compute():
    enc = models.encoder("mlp", input_shape=(8, 8, 1), width=8, compute_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    model = models.EmbeddingModel(
        enc,
        geometry="atlas",
        dim=2,
        charts=3,
        projection="mixed",
        compute_dtype=jnp.bfloat16,
        rngs=nnx.Rngs(0),
    )
    out = nnx.jit(lambda m, x: m(x))(model, jnp.ones((5, 8, 8, 1), jnp.bfloat16))
    assert out.coords.shape == (5, 3, 2) and out.q.shape == (5, 3) and out.projection.shape == (5, 64)
    assert all(v.dtype == jnp.float32 for v in out)  # the loss sees float32
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    code, _ = manifolds.atlas_code(out.coords, out.q)
    np.testing.assert_allclose(out.embedding, code)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="dim"):
        models.GeometryHead(4, 3, geometry="torus_n", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="geometry"):
        models.GeometryHead(4, 4, geometry="hyperbolic", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="mixed"):
        models.EmbeddingModel(
            models.MLP(4, rngs=nnx.Rngs(0)), geometry="sphere", dim=4, projection="mixed", rngs=nnx.Rngs(0)
        )
    with pytest.raises(ValueError, match="encoder"):
        models.encoder("vit", input_shape=(8, 8, 1), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="input_shape"):
        models.encoder("cnn", input_shape=(8, 8), rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    ("size", "channels", "pools"), [(8, 2, (True, False)), (28, 2, (True, True)), (28, 1, (True, True))]
)
def test_small_cnn_is_conv_relu_maxpool_stack_then_dense(size, channels, pools):
    # Reference: lax convolutions + bias → ReLU → reduce_window 2×2 max-pool while the map is larger than 4×4
    # (8×8: 8 → 4, then none; 28×28: 28 → 14 → 7), flattened (H, W, C) → dense + bias → ReLU, with the
    # module's own parameters; values and parameter gradients to 1e-5. One channel: the first convolution is
    # tap_conv.
    cnn = models.SmallCNN(channels, image_size=size, width=4, rngs=nnx.Rngs(0))
    x = jax.random.uniform(jax.random.key(1), (3, size, size, channels))
    params = nnx.state(cnn, nnx.Param)
    assert cnn.features == 32

    def reference(params, x):
        h = x
        for conv, pool in zip(params["convs"].values(), pools, strict=True):
            h = jax.lax.conv_general_dilated(h, conv["kernel"][...], (1, 1), "SAME", dimension_numbers=_NHWC)
            h = jax.nn.relu(h + conv["bias"][...])
            if pool:
                h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        dense = params["dense"]
        return jax.nn.relu(h.reshape(len(h), -1) @ dense["kernel"][...] + dense["bias"][...])

    graphdef = nnx.graphdef(cnn)

    def ours(params, x):
        return nnx.merge(graphdef, params)(x)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-6)
    g_ours = jax.grad(lambda p: jnp.sum(jnp.sin(3 * ours(p, x))))(params)
    g_ref = jax.grad(lambda p: jnp.sum(jnp.sin(3 * reference(p, x))))(params)
    for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))


@pytest.mark.parametrize("kernel", [(3, 3), (1, 1), (5, 3)])
def test_tap_conv_matches_lax_values_and_gradients(kernel):
    kx, kk, kc = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (4, 9, 7, 1))
    k = jax.random.normal(kk, (*kernel, 1, 5))
    cot = jax.random.normal(kc, (4, 9, 7, 5))

    def loss(conv, x, k):
        return jnp.sum(cot * jnp.tanh(conv(x, k, (1, 1), "SAME", dimension_numbers=_NHWC)))

    ours = jax.value_and_grad(lambda x, k: loss(models.tap_conv, x, k), (0, 1))(x, k)
    ref = jax.value_and_grad(lambda x, k: loss(jax.lax.conv_general_dilated, x, k), (0, 1))(x, k)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))


def test_tap_conv_accumulates_bfloat16_in_float32():
    # Nine taps of 1·w on an all-ones image: 256 + 8·1 = 264 is a bfloat16 number, but summed in bfloat16
    # each +1 rounds away (the spacing at 256 is 2) and the interior comes out 256.
    x = jnp.ones((1, 5, 5, 1), jnp.bfloat16)
    k = jnp.ones((3, 3, 1, 2), jnp.bfloat16).at[0, 0].set(256)
    out = models.tap_conv(x, k, (1, 1), "SAME", dimension_numbers=_NHWC)
    assert out.dtype == jnp.bfloat16
    ref = jax.lax.conv_general_dilated(
        x.astype(jnp.float32), k.astype(jnp.float32), (1, 1), "SAME", dimension_numbers=_NHWC
    )
    assert float(ref[0, 2, 2, 0]) == 264.0
    np.testing.assert_array_equal(out.astype(jnp.float32), ref.astype(jnp.bfloat16).astype(jnp.float32))


@pytest.mark.parametrize(
    ("strides", "padding", "kernel", "channels"),
    [
        ((2, 2), "SAME", (3, 3), 1),
        ((1, 1), "VALID", (3, 3), 1),
        ((1, 1), "SAME", (2, 2), 1),
        ((1, 1), "SAME", (3, 3), 2),
    ],
)
def test_tap_conv_refuses_what_it_does_not_compute(strides, padding, kernel, channels):
    x, k = jnp.ones((1, 6, 6, channels)), jnp.ones((*kernel, channels, 2))
    with pytest.raises(ValueError, match="tap_conv needs a one-channel stride-1 'SAME'"):
        models.tap_conv(x, k, strides, padding, dimension_numbers=_NHWC)


def test_max_pool_gradient_goes_to_each_windows_maxima_split_evenly_between_ties():
    # Small integers: many tied maxima; 7×5 maps: the odd last row and column are dropped (zero gradient).
    h = jax.random.randint(jax.random.key(0), (2, 7, 5, 3), 0, 3).astype(jnp.float32)
    g = jax.random.normal(jax.random.key(1), (2, 3, 2, 3))
    out, vjp = jax.vjp(_kernels.max_pool_2x2, h)
    (dh,) = vjp(g)
    hn, gn = np.asarray(h), np.asarray(g)
    want_out, want_dh = np.zeros((2, 3, 2, 3)), np.zeros(h.shape)
    for n in range(2):
        for y in range(3):
            for x in range(2):
                for c in range(3):
                    window = hn[n, 2 * y : 2 * y + 2, 2 * x : 2 * x + 2, c]
                    want_out[n, y, x, c] = window.max()
                    at_max = window == window.max()
                    want_dh[n, 2 * y : 2 * y + 2, 2 * x : 2 * x + 2, c] = (
                        at_max * gn[n, y, x, c] / at_max.sum()
                    )
    assert (
        int((hn[:, :6, :4].reshape(2, 3, 2, 2, 2, 3) == want_out[:, :, None, :, None]).sum()) > 36 + 10
    )  # ties
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_allclose(dh, want_dh, rtol=1e-6, atol=1e-7)
