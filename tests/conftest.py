"""Test set-up: four fake CPU devices, set before JAX initialises its backends."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)
