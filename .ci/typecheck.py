"""CI's type check: mypy over geojax/ (pyproject.toml's ``[tool.mypy]``), the public signatures included.

It fails on every error that ``.ci/mypy_known.txt`` does not list. That file holds the errors geojax/search/
had when the check came in, one per line (``path: message [code]``); they are matched by file and error code,
counted, so that an error worded differently by another mypy, jax or numpy stays known while one more of a
kind fails. Run it as CI does: ``python .ci/typecheck.py``.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ERROR = re.compile(r"^(?P<path>[^:]+?)(?::\d+)?: (?:error: )?(?P<message>.*)\[(?P<code>[a-z-]+)\]$")


def kinds(lines: list[str]) -> collections.Counter[tuple[str, str]]:
    """(file, error code) → how many of ``lines`` (mypy's error lines, or the known list's) are of it."""
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in lines:
        match = ERROR.match(line.strip())
        if match:
            found[match["path"], match["code"]] += 1
    return found


def main() -> int:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    if done.returncode not in (0, 1) or (done.returncode == 1 and not errors):
        print(done.stdout + done.stderr, end="")
        print(f"mypy did not run (exit status {done.returncode})")
        return 2
    known_lines = (ROOT / ".ci" / "mypy_known.txt").read_text(encoding="utf-8").splitlines()
    known = kinds([line for line in known_lines if not line.startswith("#")])
    new = kinds(errors) - known
    if new:
        print("\n".join(line for line in errors if kinds([line]).keys() & new.keys()))
        print(f"type check: {sum(new.values())} error(s) beyond .ci/mypy_known.txt: {dict(new)}")
        return 1
    fixed = known - kinds(errors)
    note = f"; {sum(fixed.values())} known error(s) fixed, delete their lines: {dict(fixed)}" if fixed else ""
    print(f"type check: geojax/ passes ({len(errors)} known error(s) in .ci/mypy_known.txt){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
