"""The files a reader visits following ``python -m train ARGS`` through the calls, from ``cli.main``.

Every function of ``train/`` is taken in the order of its first call (a function called again is already
read); a visit is a maximal run of consecutive first calls in one file. Lambdas and comprehensions count
with the ``--anonymous`` flag only: they are read with the function that holds them.

    python -m benchmarks.call_path steps=4 batch_size=32 log_every=2 workdir=runs/call_path
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from types import FrameType
from typing import Any

TRAIN = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, "train"))


def visits(argv: list[str], *, anonymous: bool = False) -> list[tuple[str, list[str]]]:
    """The visits of ``train.app.cli.main(argv)``: (file relative to the repository, functions first called).

    Args:
        argv: the ``key=value`` arguments of the run.
        anonymous: count lambdas and comprehensions as functions of their own.

    Returns:
        The visits in order, each a file of ``train/`` and the names of the functions first called there.

    Raises:
        RuntimeError: the run exits with a non-zero status.
    """
    from train.app import cli

    seen: set[tuple[str, int, str]] = set()
    order: list[tuple[str, str]] = []

    def first_calls(frame: FrameType, event: str, _arg: Any) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(TRAIN):
            return
        if code.co_name.startswith("<") and not anonymous:
            return
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        if key not in seen:
            seen.add(key)
            order.append((os.path.relpath(code.co_filename, os.path.dirname(TRAIN)), code.co_name))

    sys.setprofile(first_calls)
    try:
        status = cli.main(argv)
    finally:
        sys.setprofile(None)
    if status:
        raise RuntimeError(f"python -m train {' '.join(argv)} exited with status {status}")
    out: list[tuple[str, list[str]]] = []
    for path, name in order:
        if out and out[-1][0] == path:
            out[-1][1].append(name)
        else:
            out.append((path, [name]))
    return out


def main(args: list[str] | None = None) -> None:
    """Print the visits, then their count per file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anonymous", action="store_true", help="count lambdas and comprehensions")
    parser.add_argument("run", nargs="*", help="the run's key=value arguments")
    ns = parser.parse_args(args)
    path = visits(ns.run, anonymous=ns.anonymous)
    for file, names in path:
        print(f"{file:32s} {', '.join(names)}")
    per_file = collections.Counter(file for file, _ in path)
    print(f"{len(path)} visits of {len(per_file)} files; most visited:")
    for file, count in per_file.most_common(5):
        print(f"  {count} {file}")


if __name__ == "__main__":
    main()
