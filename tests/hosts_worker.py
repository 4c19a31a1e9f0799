"""One process of a multi-process ``python -m train`` run, with what a cluster does to a host made to happen
on cue, for tests/test_hosts.py: ``python tests/hosts_worker.py [--slow S] [--clock SECONDS_PER_READ]
[--fail-at-save N] key=value ...``.

- ``--slow S``: each read of the loop's checkpoint clock also sleeps S seconds (a run long enough to be
  signalled mid-way).
- ``--clock R``: this process's checkpoint clock advances R seconds at each read, not with the wall clock
  (each process its own rate, so their clocks cross ``checkpoint_minutes`` at different calls).
- ``--fail-at-save N``: the N-th checkpoint save of this process raises instead (a host that fails mid-run,
  while the others enter the save's collectives).

Every checkpoint save is printed as ``saved step S`` on stderr.
"""

import argparse
import sys
import time

from train.app import checkpoint, cli, loop


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--clock", type=float, default=None)
    parser.add_argument("--fail-at-save", type=int, default=None)
    args, keys = parser.parse_known_args(argv)
    reads = [0]

    def clock() -> float:
        reads[0] += 1
        time.sleep(args.slow)
        return reads[0] * args.clock if args.clock is not None else time.monotonic()

    loop.clock = clock
    save, saves = checkpoint.Checkpointer.save, [0]

    def counted_save(self, step, state):
        if self.directory.endswith("checkpoints"):
            saves[0] += 1
            if saves[0] == args.fail_at_save:
                raise RuntimeError(f"a fault injected at save {saves[0]} (step {step})")
        save(self, step, state)
        print(f"saved step {step}", file=sys.stderr, flush=True)

    checkpoint.Checkpointer.save = counted_save
    return cli.main(keys)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
