"""Codecs: what an index stores for a vector and how it measures distance (Stowell 2026 §4 torus codes;
Gong & Lazebnik 2011 ITQ and Hong, Meng & Yuan 2018 Tensorized Projection sign bits; Jégou et al. 2011
product quantisation).

A codec turns vectors [N, dim] into codes [N, width] (``encode``), turns query vectors into the scan's
queries (``queries``: codes for torus and binary codes, the float vectors themselves for PQ's asymmetric
distance), names its scan (:class:`geojax.search.scan.Scan`) and gives the features an inverted file's
coarse quantiser clusters (``coarse``, from codes, so that ``add(x)`` and ``add_codes(encode(x))`` file a
row in the same list; ``coarse_queries``, from query vectors):

- torus: the Clifford features (cos 2πt_k, sin 2πt_k) of the code's angles. The squared Euclidean distance
  of two such features is Σ_k 2 − 2 cos 2πΔ_k, a per-coordinate increasing function of the wraparound
  distance Δ_k, and the mean of a cluster's features, each pair scaled back to unit length, is the
  circular mean of its angles: k-means on the angles with circular means and wraparound distance, computed
  with matrix products;
- binary: the bits as ±1 (squared Euclidean distance = 4 × Hamming distance);
- PQ: the decoded vector (query: the vector), Euclidean, or on the sphere when ``geometry='sphere'``.

``state()`` and :func:`codec_from_state` are the codec's part of an index file.
"""

from __future__ import annotations

import abc

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from geojax import _checks, binary, quantize, tt
from geojax.search import scan

GEOMETRIES = ("euclidean", "sphere", "torus")


def check_vectors(x: ArrayLike, name: str, dim: int) -> np.ndarray:
    """``x`` as a finite float32 matrix [N, dim] (N may be 0).

    Args:
        x: the vectors to check.
        name: the argument named in errors.
        dim: the number of columns required.

    Returns:
        [N, dim] float32 NumPy array.

    Raises:
        ValueError: ``x`` is not a rank-2 floating array of ``dim`` columns, or holds NaN or ±inf.

    Example:
        >>> import numpy as np
        >>> from geojax.search import codecs
        >>> codecs.check_vectors(np.zeros((0, 3)), "x", 3).shape
        (0, 3)
    """
    _checks.check_rank(x, name, 2)
    _checks.check_floating(x, name)
    if np.shape(x)[1] != dim:
        raise ValueError(f"{name} must have {dim} columns (the codec's dim), got shape {tuple(np.shape(x))}")
    _checks.check_finite(x, name)
    return np.asarray(x, np.float32)


class Codec(abc.ABC):
    """The part every codec shares: validation of codes and vectors, and the trained flag.

    An abstract base: a codec turns vectors [N, dim] into codes [N, width] of ``code_dtype``, names its scan
    (:class:`geojax.search.scan.Scan`) and gives an inverted file's coarse features (module docstring).

    Attributes:
        kind: 'torus', 'binary' or 'pq'.
        dim: the vector width.
        width: the code width (columns of a code).
        code_dtype: the codes' NumPy dtype.
        geometry: the coarse quantiser's geometry.
        scan: the scan that measures code distances.
    """

    kind: str
    dim: int
    width: int
    code_dtype: np.dtype = np.dtype(np.uint8)
    geometry: str
    scan: scan.Scan

    @property
    def is_trained(self) -> bool:
        """True when the codec can encode, as codecs without parameters always can."""
        return True

    @property
    def aux(self) -> jax.Array | np.ndarray:
        """The scan's ``aux`` argument (PQ: codebooks)."""
        return scan.NO_AUX

    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit the codec to training vectors x [N, dim] (a no-op for codecs without parameters).

        Args:
            x: [N, dim] finite floating training vectors.
            key: a JAX PRNG key for the fit; None: ``jax.random.key(0)``.

        Raises:
            ValueError: ``x`` is not a finite floating [N, dim] matrix.
        """
        check_vectors(x, "x", self.dim)

    def check_vectors(self, x: ArrayLike, name: str = "x") -> np.ndarray:
        """``x`` as a finite float32 matrix [N, dim], once the codec is trained.

        Args:
            x: the vectors to check.
            name: the argument named in errors.

        Returns:
            [N, dim] float32 NumPy array.

        Raises:
            ValueError: the codec is not trained, or ``x`` is not a finite floating [N, dim] matrix.
        """
        if not self.is_trained:
            raise ValueError(f"the {self.kind} codec must be trained (call train) before encoding {name}")
        return check_vectors(x, name, self.dim)

    def check_codes(self, codes: ArrayLike, name: str = "codes") -> np.ndarray:
        """``codes`` as a [N, width] array of the codec's dtype (N may be 0).

        Args:
            codes: the codes to check.
            name: the argument named in errors.

        Returns:
            [N, width] NumPy array.

        Raises:
            ValueError: ``codes`` is not rank 2, not of the code dtype, or not ``width`` columns wide.
        """
        _checks.check_rank(codes, name, 2)
        _checks.check_dtype(codes, name, self.code_dtype)
        if np.shape(codes)[1] != self.width:
            raise ValueError(
                f"{name} must have {self.width} columns (the code width), got {tuple(np.shape(codes))}"
            )
        return np.asarray(codes)

    def encode(self, x: ArrayLike, name: str = "x") -> np.ndarray:
        """Codes [N, width] of vectors x [N, dim].

        Args:
            x: [N, dim] finite floating vectors (N may be 0).
            name: the argument named in errors.

        Returns:
            [N, width] NumPy codes of ``code_dtype``.

        Raises:
            ValueError: the codec is not trained, or ``x`` is not a finite floating [N, dim] matrix.

        Example:
            >>> import numpy as np
            >>> from geojax.search import codecs
            >>> codec = codecs.TorusCodec(4, bits=8)
            >>> codec.encode(np.array([[0.0, 0.25, 0.5, 0.75]], np.float32))
            array([[  0,  64, 128, 192]], dtype=uint8)
        """
        x = self.check_vectors(x, name)
        if len(x) == 0:
            return np.zeros((0, self.width), self.code_dtype)
        return np.array(self._encode(x))

    def queries(self, x: ArrayLike) -> np.ndarray:
        """The scan's queries for query vectors x [Q, dim]: their codes (symmetric distance).

        Args:
            x: [Q, dim] finite floating query vectors.

        Returns:
            [Q, width] NumPy codes.

        Raises:
            ValueError: the codec is not trained, or ``x`` is not a finite floating [Q, dim] matrix.
        """
        return self.encode(x, "q")

    def coarse_queries(self, x: ArrayLike) -> jax.Array:
        """Coarse features of query vectors x [Q, dim] → [Q, F] float32 (module docstring).

        Args:
            x: [Q, dim] finite floating query vectors.

        Returns:
            [Q, F] float32 coarse features, of their codes (module docstring).

        Raises:
            ValueError: ``x`` is not a finite floating [Q, dim] matrix; the codec is not trained.
        """
        return self.coarse(self.encode(x, "q"))

    def decode(self, codes: ArrayLike) -> np.ndarray:
        """What codes [N, width] stand for, as float32 vectors: the codec's decoder.

        Torus codes: their angles in turns [N, dim] (code / 2^bits); sign bits: the bits as ±1 [N, bits] (for
        'sign', the signs of the vector's coordinates; for 'itq' and 'tp', of its projection); PQ: the
        centroids' concatenation [N, dim] (``quantize.pq_decode``).

        Args:
            codes: [N, width] codes of the codec's dtype (N may be 0).

        Returns:
            [N, D] float32 NumPy array.

        Raises:
            ValueError: ``codes`` is malformed, or the codec is not trained.

        Example:
            >>> import numpy as np
            >>> from geojax.search import codecs
            >>> codecs.TorusCodec(2, bits=8).decode(np.array([[0, 192]], np.uint8))
            array([[0.  , 0.75]], dtype=float32)
        """
        codes = self.check_codes(codes)
        if not self.is_trained:
            raise ValueError(f"the {self.kind} codec must be trained (call train) before decoding codes")
        return np.asarray(self._decode(codes), np.float32)

    @abc.abstractmethod
    def _encode(self, x: np.ndarray) -> jax.Array:
        """Codes of checked vectors [N ≥ 1, dim]."""

    @abc.abstractmethod
    def _decode(self, codes: np.ndarray) -> jax.Array:
        """Decoded vectors of checked codes [N, width] (:meth:`decode`)."""

    @abc.abstractmethod
    def coarse(self, codes: np.ndarray) -> jax.Array:
        """Coarse features [N, F] float32 of codes [N, width] (module docstring).

        Args:
            codes: [N, width] codes of the codec's dtype.

        Returns:
            [N, F] float32 coarse features (module docstring).
        """

    @abc.abstractmethod
    def state(self) -> tuple[dict, dict]:
        """(JSON-able parameters, named NumPy arrays): what :func:`codec_from_state` rebuilds it from.

        Returns:
            (JSON-able parameters, named NumPy arrays).
        """


class TorusCodec(Codec):
    """Packed b-bit flat-torus codes of angles in turns (Stowell 2026 §4).

    The codes are ``quantize.torus_codes(t, bits)``, searched by wraparound L1 (p=1) or squared L2 (p=2),
    :func:`geojax.search.torus_distances`; width = dim·bits/8 bytes. The coarse features are the Clifford
    features (cos 2πt_k, sin 2πt_k) of the code's angles.

    Args:
        dim: angles per vector (a positive int; dim·bits a multiple of 8).
        bits: 1, 2, 4 or 8 bits per angle.
        p: 1 (wraparound L1) or 2 (squared L2).

    Raises:
        ValueError: ``dim`` is not a positive int, ``bits`` or ``p`` is not an allowed value, or dim·bits is
            not a multiple of 8.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import numpy as np
        >>> from geojax.search import codecs
        >>> codec = codecs.TorusCodec(4, bits=8)
        >>> codec.width, codec.state()
        (4, ({'kind': 'torus', 'dim': 4, 'bits': 8, 'p': 1}, {}))
    """

    kind = "torus"
    geometry = "torus"

    def __init__(self, dim: int, *, bits: int = 8, p: int = 1) -> None:
        _checks.check_positive_int(dim, "dim")
        _checks.check_choice(bits, "bits", quantize.TORUS_BITS)
        _checks.check_choice(p, "p", (1, 2))
        _checks.check_multiple_of(dim * bits, "dim·bits", 8)
        self.dim, self.bits, self.p = int(dim), int(bits), int(p)
        self.width = self.dim * self.bits // 8
        self.scan = scan.torus_scan(self.width, self.bits, self.p)

    def _encode(self, x: np.ndarray) -> jax.Array:
        return quantize.torus_codes(x, self.bits)

    def _decode(self, codes: np.ndarray) -> jax.Array:
        return quantize.torus_unpack(codes, self.bits).astype(jnp.float32) / float(1 << self.bits)

    def coarse(self, codes: np.ndarray) -> jax.Array:
        """Clifford features (cos 2πt_k, sin 2πt_k) [N, 2·dim] of the codes' angles.

        Args:
            codes: [N, width] codes of the codec's dtype.

        Returns:
            [N, F] float32 coarse features, F = 2·dim (module docstring).
        """
        return _clifford_features(quantize.torus_unpack(codes, self.bits), float(1 << self.bits))

    def coarse_queries(self, x: ArrayLike) -> jax.Array:
        """Clifford features (cos 2πt_k, sin 2πt_k) [Q, 2·dim] of the query angles themselves.

        Args:
            x: [Q, dim] finite floating query vectors.

        Returns:
            [Q, F] float32 coarse features, F = 2·dim (module docstring).

        Raises:
            ValueError: ``x`` is not a finite floating [Q, dim] matrix.
        """
        return _clifford_features(self.check_vectors(x, "q"), 1.0)

    def state(self) -> tuple[dict, dict]:
        """The codec's parameters (kind, dim, bits, p) and no arrays.

        Returns:
            (JSON-able parameters, named NumPy arrays): the arrays are empty.
        """
        return {"kind": self.kind, "dim": self.dim, "bits": self.bits, "p": self.p}, {}


@jax.jit
def _clifford_features(t: jax.Array, levels: float) -> jax.Array:
    """(cos 2πt_k, sin 2πt_k) pairs [N, 2D] of angles t / levels in turns."""
    angle = (2 * jnp.pi / levels) * t.astype(jnp.float32)
    return jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=-1).reshape(t.shape[0], -1)


BINARY_METHODS = ("sign", "itq", "tp")


class BinaryCodec(Codec):
    """Packed sign bits searched by Hamming distance, of the vector itself, an ITQ rotation or a TP.

    ``method='sign'``: the vector's own signs, bits = dim (``quantize.one_bit``); ``'itq'``: an ITQ rotation
    (Gong & Lazebnik 2011 eq. 5, ``binary.itq_fit``); ``'tp'``: a Tensorized Projection (Hong, Meng & Yuan
    2018 eq. 9, ``binary.tp_fit`` with ``tp_options``). width = bits/8 bytes; the coarse features are the bits
    as ±1 (squared Euclidean distance = 4 × Hamming distance).

    Args:
        dim: the vector width (a positive int).
        bits: the code bits, a multiple of 8; None: ``dim`` (required for 'sign').
        method: 'sign', 'itq' or 'tp'.
        tp_options: for 'tp' only: ``binary.tp_fit``'s in_modes, out_modes, rank, beta, iters.

    Raises:
        ValueError: ``dim`` is not a positive int, ``method`` is unknown, ``bits`` is not a positive multiple
            of 8 (or not dim for 'sign'), or ``tp_options`` is given without 'tp' or missing with it.

    References:
        Gong & Lazebnik 2011, "Iterative Quantization: A Procrustean Approach to Learning Binary Codes" (CVPR
        2011), eq. 5; Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding"
        (AAAI 2018), eq. 9.

    Example:
        >>> import numpy as np
        >>> from geojax.search import codecs
        >>> codec = codecs.BinaryCodec(8)
        >>> codec.encode(np.array([[0.5, -1.0, 0.0, 2.0, -3.0, 1.0, 1.0, -0.1]], np.float32))
        array([[109]], dtype=uint8)
    """

    kind = "binary"
    geometry = "euclidean"

    def __init__(
        self, dim: int, *, bits: int | None = None, method: str = "sign", tp_options: dict | None = None
    ) -> None:
        _checks.check_positive_int(dim, "dim")
        _checks.check_choice(method, "method", BINARY_METHODS)
        bits = dim if bits is None else bits
        _checks.check_multiple_of(bits, "bits", 8)
        if method == "sign" and bits != dim:
            raise ValueError(f"bits must equal dim = {dim} for method 'sign', got {bits}")
        if (method == "tp") != (tp_options is not None):
            raise ValueError("tp_options must be given for method 'tp' and only then")
        self.dim, self.bits, self.method = int(dim), int(bits), method
        self.tp_options = dict(tp_options or {})
        self.width = self.bits // 8
        self.model: binary.ITQ | binary.TP | None = None
        self.scan = scan.hamming_scan(self.width)

    @property
    def is_trained(self) -> bool:
        """True when the codec can encode (always for 'sign', after :meth:`train` for 'itq' and 'tp')."""
        return self.method == "sign" or self.model is not None

    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit the ITQ or TP projection to training vectors x [N, dim] (nothing to fit for 'sign').

        Args:
            x: [N, dim] finite floating training vectors.
            key: a JAX PRNG key for the fit; None: ``jax.random.key(0)``.

        Raises:
            ValueError: ``x`` is not a finite floating [N, dim] matrix.
        """
        x = check_vectors(x, "x", self.dim)
        key = jax.random.key(0) if key is None else key
        if self.method == "itq":
            self.model = binary.itq_fit(x, self.bits, key=key)
        elif self.method == "tp":
            self.model = binary.tp_fit(x, self.bits, key=key, **self.tp_options)

    def _encode(self, x: np.ndarray) -> jax.Array:
        return quantize.one_bit(x) if self.method == "sign" else binary.encode(self.model, x)

    def _decode(self, codes: np.ndarray) -> jax.Array:
        return self.coarse(codes)

    def coarse(self, codes: np.ndarray) -> jax.Array:
        """The code bits as ±1 [N, bits] (squared Euclidean distance = 4 × Hamming distance).

        Args:
            codes: [N, width] codes of the codec's dtype.

        Returns:
            [N, F] float32 coarse features, F = bits (module docstring).
        """
        return 2.0 * quantize.unpack_bits(jnp.asarray(codes)).astype(jnp.float32) - 1.0

    def state(self) -> tuple[dict, dict]:
        """The codec's parameters and, once fitted, its model's arrays (mean, objective, projection or cores).

        Returns:
            (JSON-able parameters, named NumPy arrays).
        """
        params = {"kind": self.kind, "dim": self.dim, "bits": self.bits, "method": self.method}
        params["tp_options"] = self.tp_options if self.method == "tp" else None
        arrays = {}
        if self.model is not None:
            arrays = {"mean": self.model.mean, "objective": self.model.objective}
            if self.method == "itq":
                arrays["projection"] = self.model.projection
            else:
                arrays.update({f"core{i}": g for i, g in enumerate(self.model.projection.cores)})
        return params, {name: np.asarray(a) for name, a in arrays.items()}


class PQCodec(Codec):
    """Product-quantisation codes (Jégou et al. 2011 §III), searched by asymmetric distance.

    ``m`` sub-vectors of ``dim/m`` floats, each the index of one of 2^nbits centroids (``quantize.pq_fit``);
    searched by asymmetric distance (eq. 13) from the float query, :func:`geojax.search.pq_distances`. The
    coarse features are the decoded vectors (queries: the vectors), scaled to unit norm for
    ``geometry='sphere'``.

    Args:
        dim: the vector width (a positive int, divisible by m).
        m: the number of sub-vectors (a positive int).
        nbits: bits per sub-vector code, 1 to 16 (codes uint8 up to 8, else uint16).
        geometry: the coarse quantiser's: 'euclidean', or 'sphere' for unit-norm embeddings.

    Raises:
        ValueError: a size is not a positive int, ``m`` does not divide ``dim``, ``nbits`` > 16, or
            ``geometry`` is unknown.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §III and eq. 13.

    Example:
        >>> import numpy as np
        >>> from geojax.search import codecs
        >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
        >>> codec = codecs.PQCodec(4, m=2, nbits=2)
        >>> codec.train(x)
        >>> codec.encode(x[:2]).shape, codec.aux.shape
        ((2, 2), (2, 4, 2))
    """

    kind = "pq"

    def __init__(self, dim: int, *, m: int, nbits: int = 8, geometry: str = "euclidean") -> None:
        _checks.check_positive_int(dim, "dim")
        _checks.check_positive_int(m, "m")
        _checks.check_positive_int(nbits, "nbits")
        _checks.check_choice(geometry, "geometry", ("euclidean", "sphere"))
        if dim % m:
            raise ValueError(f"m must divide dim = {dim}, got m = {m}")
        if nbits > 16:
            raise ValueError(f"nbits must be at most 16, got {nbits}")
        self.dim, self.m, self.nbits, self.geometry = int(dim), int(m), int(nbits), geometry
        self.width = self.m
        self.code_dtype = np.dtype(np.uint8 if nbits <= 8 else np.uint16)
        self.pq: quantize.PQ | None = None
        self.scan = scan.PQ_SCAN

    @property
    def is_trained(self) -> bool:
        """Whether the codebooks have been fitted (:meth:`train`)."""
        return self.pq is not None

    @property
    def aux(self) -> jax.Array:
        """The codebooks [m, 2^nbits, dim/m], the scan's ``aux``; a ``ValueError`` before training."""
        if self.pq is None:
            raise ValueError("the pq codec must be trained (call train) before searching")
        return self.pq.codebooks

    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit the codebooks to training vectors x [N, dim] (``quantize.pq_fit``, N ≥ 2^nbits).

        Args:
            x: [N, dim] finite floating training vectors.
            key: a JAX PRNG key for the fit; None: ``jax.random.key(0)``.

        Raises:
            ValueError: ``x`` is not a finite floating [N, dim] matrix or has fewer than 2^nbits rows.
        """
        x = check_vectors(x, "x", self.dim)
        key = jax.random.key(0) if key is None else key
        self.pq = quantize.pq_fit(x, m=self.m, nbits=self.nbits, key=key)

    def check_codes(self, codes: ArrayLike, name: str = "codes") -> np.ndarray:
        """``codes`` as a [N, m] array of the code dtype, each entry in [0, 2^nbits).

        Args:
            codes: the codes to check.
            name: the argument named in errors.

        Returns:
            [N, m] NumPy array.

        Raises:
            ValueError: ``codes`` is malformed (``Codec.check_codes``) or an entry lies outside [0,
                2^nbits).
        """
        codes = super().check_codes(codes, name)
        _checks.check_index_range(codes, name, 1 << self.nbits, f"{1 << self.nbits} centroids per sub-space")
        return codes

    def _encode(self, x: np.ndarray) -> jax.Array:
        return quantize.pq_encode(self.pq, x)

    def _decode(self, codes: np.ndarray) -> jax.Array:
        return quantize.pq_decode(self.pq, codes).astype(jnp.float32)

    def queries(self, x: ArrayLike) -> np.ndarray:
        """PQ searches from the float queries (asymmetric distance): x itself, checked.

        Args:
            x: [Q, dim] finite floating query vectors.

        Returns:
            [Q, dim] float32 NumPy array.

        Raises:
            ValueError: the codec is not trained, or ``x`` is not a finite floating [Q, dim] matrix.
        """
        return self.check_vectors(x, "q")

    def coarse(self, codes: np.ndarray) -> jax.Array:
        """The decoded vectors [N, dim] (unit norm for 'sphere'; zero rows stay zero).

        Args:
            codes: [N, width] codes of the codec's dtype.

        Returns:
            [N, F] float32 coarse features, F = dim (module docstring).
        """
        if len(codes) == 0:
            return jnp.zeros((0, self.dim), jnp.float32)
        return _on_sphere(self._decode(codes), self.geometry)

    def coarse_queries(self, x: ArrayLike) -> jax.Array:
        """The query vectors themselves [Q, dim] (unit norm for 'sphere'; zero rows stay zero).

        Args:
            x: [Q, dim] finite floating query vectors.

        Returns:
            [Q, F] float32 coarse features, F = dim (module docstring).

        Raises:
            ValueError: ``x`` is not a finite floating [Q, dim] matrix; the codec is not trained.
        """
        return _on_sphere(jnp.asarray(self.check_vectors(x, "q")), self.geometry)

    def state(self) -> tuple[dict, dict]:
        """The codec's parameters and, once trained, its codebooks.

        Returns:
            (JSON-able parameters, named NumPy arrays).
        """
        params = {"kind": self.kind, "dim": self.dim, "m": self.m, "nbits": self.nbits}
        params["geometry"] = self.geometry
        arrays = {} if self.pq is None else {"codebooks": np.asarray(self.pq.codebooks)}
        return params, arrays


def _on_sphere(x: jax.Array, geometry: str) -> jax.Array:
    """x's rows scaled to unit norm for the 'sphere' geometry (zero rows stay zero), else x."""
    if geometry != "sphere":
        return x
    norm = jnp.linalg.norm(x, axis=1, keepdims=True)
    return x / jnp.where(norm > 0, norm, 1.0)


def codec_from_state(params: dict, arrays: dict) -> Codec:
    """The codec that :meth:`Codec.state` described (an index file's codec part).

    Args:
        params: the JSON-able parameters of ``state()``.
        arrays: the named NumPy arrays of ``state()``.

    Returns:
        A :class:`TorusCodec`, :class:`BinaryCodec` or :class:`PQCodec`, trained when the arrays say so.

    Raises:
        ValueError: ``params['kind']`` is not 'torus', 'binary' or 'pq'.

    Example:
        >>> import numpy as np
        >>> from geojax.search import codecs
        >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
        >>> codec = codecs.PQCodec(4, m=2, nbits=2)
        >>> codec.train(x)
        >>> again = codecs.codec_from_state(*codec.state())
        >>> type(again).__name__, bool(np.array_equal(again.encode(x), codec.encode(x)))
        ('PQCodec', True)
    """
    kind = params["kind"]
    if kind == "torus":
        return TorusCodec(params["dim"], bits=params["bits"], p=params["p"])
    if kind == "binary":
        codec = BinaryCodec(
            params["dim"], bits=params["bits"], method=params["method"], tp_options=params["tp_options"]
        )
        if "mean" in arrays:
            mean, objective = jnp.asarray(arrays["mean"]), jnp.asarray(arrays["objective"])
            if codec.method == "itq":
                codec.model = binary.ITQ(mean, jnp.asarray(arrays["projection"]), objective)
            else:
                cores = tuple(jnp.asarray(arrays[f"core{i}"]) for i in range(_count(arrays, "core")))
                codec.model = binary.TP(mean, tt.TTMatrix(cores), objective)
        return codec
    if kind == "pq":
        codec = PQCodec(params["dim"], m=params["m"], nbits=params["nbits"], geometry=params["geometry"])
        if "codebooks" in arrays:
            books = jnp.asarray(arrays["codebooks"])
            codec.pq = quantize.PQ(codebooks=books, objective=jnp.zeros((books.shape[0], 0)))
        return codec
    raise ValueError(f"codec kind must be one of ['torus', 'binary', 'pq'], got {kind!r}")


def _count(arrays: dict, prefix: str) -> int:
    return sum(1 for name in arrays if name.startswith(prefix))
