"""The ``datareel`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="datareel", description="Elastic, deterministic data loading for PyTorch.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="checkpoint on 4 ranks × 2 workers, resume on 3 × 1 and 2 × 0, compare with an uninterrupted run",
    )
    demo.add_argument("--samples", type=int, default=100, help="dataset size (default 100)")
    demo.add_argument("--seed", type=int, default=1234, help="reel seed (default 1234)")
    demo.add_argument(
        "--distributed", action="store_true",
        help="run each phase as real processes joined by torch.distributed (gloo on 127.0.0.1)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        if args.samples < 1:
            parser.error(f"--samples={args.samples} must be at least 1")
        return 0 if run_demo(samples=args.samples, seed=args.seed, distributed=args.distributed) else 1
    return 2
