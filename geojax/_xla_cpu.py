"""Keep XLA's CPU backend off its YNNPACK fusions, which miscompute bfloat16 programs in jaxlib ≥ 0.11.

From jaxlib 0.11 XLA:CPU hands some fused element-wise + reduction regions to YNNPACK. With bfloat16
operands those fusions return wrong values — huge finite numbers, ±inf or NaN, differing from one
compilation to the next — where the same program run op by op is right. ``relu(relu(x)).sum(0)`` on a
bfloat16 ``x`` of shape [512, 32] under ``jax.jit`` is the smallest case we found; a ResNet-18 in bfloat16
evaluated under ``jax.jit`` on the CPU came out all-NaN. jaxlib 0.10 does not use these fusions.

Importing :mod:`geojax` adds ``--xla_cpu_experimental_ynn_fusion_type=`` (the empty list: no YNNPACK
fusions) to ``XLA_FLAGS`` when the installed jaxlib is 0.11 or newer and the flag is not already set. XLA
reads ``XLA_FLAGS`` when JAX starts its backends, so this takes effect only if geojax is imported before the
first JAX computation; otherwise a warning says what to set. Setting the flag yourself (to any value) turns
this off.
"""

from __future__ import annotations

import os
import re
import warnings

FLAG_NAME = "xla_cpu_experimental_ynn_fusion_type"
FLAG = f"--{FLAG_NAME}="
FIRST_AFFECTED = (0, 11)


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"0.12.0.1"`` or ``"0.11.2.dev20260101"``."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"version must start with MAJOR.MINOR, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def flags_without_ynn_fusions(xla_flags: str, jaxlib_version: str) -> str:
    """``xla_flags`` (the value of ``XLA_FLAGS``) with :data:`FLAG` appended when jaxlib ``jaxlib_version``
    uses YNNPACK fusions and the flags do not already set it; otherwise ``xla_flags`` unchanged."""
    if parse_version(jaxlib_version) < FIRST_AFFECTED or FLAG_NAME in xla_flags:
        return xla_flags
    return f"{xla_flags} {FLAG}".strip()


def avoid_ynn_fusions() -> None:
    """Apply :func:`flags_without_ynn_fusions` to ``os.environ["XLA_FLAGS"]`` before JAX's backends start;
    warn when they already have (the flag can no longer take effect in this process)."""
    import jaxlib.version
    from jax._src import xla_bridge

    flags = os.environ.get("XLA_FLAGS", "")
    wanted = flags_without_ynn_fusions(flags, jaxlib.version.__version__)
    if wanted == flags:
        return
    if xla_bridge.backends_are_initialized():
        warnings.warn(
            f"JAX's backends started before geojax was imported, so geojax could not set XLA_FLAGS={FLAG}: "
            f"jaxlib {jaxlib.version.__version__}'s CPU backend can miscompute bfloat16 programs (wrong "
            f"values, inf or NaN). Import geojax before the first JAX computation, or set "
            f"XLA_FLAGS={FLAG} before starting Python.",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    os.environ["XLA_FLAGS"] = wanted
