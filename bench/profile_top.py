"""Summarise py-spy raw (collapsed) stacks written by `run.py --profile`.

    python bench/profile_top.py bench/profiles/horae-e2e-0.txt [--top 25] [--filter scheduler/]

Prints the functions with the most samples on-CPU in their own code ("self") and
anywhere on the stack ("inclusive"), as a share of all samples of the process.
"""

from __future__ import annotations

import argparse
from collections import Counter


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--filter", default="", help="only list frames whose text contains this")
    args = p.parse_args()
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for path in args.files:
        with open(path) as fh:
            for line in fh:
                stack, _, count = line.rstrip().rpartition(" ")
                if not stack:
                    continue
                n = int(count)
                frames = stack.split(";")
                total += n
                self_c[frames[-1]] += n
                for f in set(frames):
                    incl[f] += n
    print(f"{total} samples")
    for title, counter in (("self", self_c), ("inclusive", incl)):
        print(f"\n-- top {args.top} by {title} --")
        shown = 0
        for frame, n in counter.most_common():
            if args.filter and args.filter not in frame:
                continue
            print(f"{100 * n / total:6.1f}%  {frame}")
            shown += 1
            if shown >= args.top:
                break


if __name__ == "__main__":
    main()
