"""CLI: python -m ratchet_taskgen generate --out .ratchet/tasks --seed 0 --target 160"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .check import check_task_set
from .fixtures import FIXTURES, install_sample, make_sample
from .config import DEFAULT_PACKAGES, ConfigError, load_packages
from .generate import Options, generate
from .sdist import SdistError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ratchet_taskgen")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="build a verified task set")
    g.add_argument("--out", type=Path, required=True, help="task set directory, e.g. .ratchet/tasks")
    g.add_argument("--cache", type=Path, help="sdist cache (default: <out>/../cache/sdists)")
    g.add_argument("--packages", type=Path, default=DEFAULT_PACKAGES)
    g.add_argument("--only", action="append", help="use only this package (repeatable)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--target", type=int, default=160)
    g.add_argument("--workers", type=int, default=2)
    g.add_argument("--max-sites-per-function", type=int, default=3)
    g.add_argument("--max-kept-per-function", type=int, default=2)
    g.add_argument("--run-timeout", type=float, default=30.0, help="seconds per pytest run")
    g.add_argument("-v", "--verbose", action="store_true")
    sm = sub.add_parser("sample", help="install the shipped sample tasks (no generation) into a directory")
    sm.add_argument("--out", type=Path, required=True)
    mk = sub.add_parser("make-sample", help="rebuild taskgen/fixtures from a generated task set")
    mk.add_argument("--from", dest="src", type=Path, required=True)
    mk.add_argument("ids", nargs="+")
    ck = sub.add_parser("check", help="verify every row of a task set as a sandbox would use it")
    ck.add_argument("--tasks", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "check":
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="[taskgen %(asctime)s] %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
        return 1 if check_task_set(args.tasks.resolve()) else 0
    if args.cmd == "sample":
        print(install_sample(args.out.resolve()))
        return 0
    if args.cmd == "make-sample":
        rows = make_sample(args.src.resolve(), args.ids)
        print(f"{len(rows)} rows written to {FIXTURES}")
        return 0
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="[taskgen %(asctime)s] %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        packages = load_packages(args.packages)
        if args.only:
            unknown = set(args.only) - {p.name for p in packages}
            if unknown:
                raise ConfigError(f"--only: unknown package(s) {sorted(unknown)}; "
                                  f"known: {[p.name for p in packages]}")
            packages = [p for p in packages if p.name in args.only]
        out = args.out.resolve()
        opts = Options(out=out, cache=(args.cache or out.parent / "cache" / "sdists").resolve(), seed=args.seed,
                       target=args.target, workers=args.workers,
                       max_sites_per_function=args.max_sites_per_function,
                       max_kept_per_function=args.max_kept_per_function, run_timeout=args.run_timeout)
        report = generate(packages, opts)
    except (ConfigError, SdistError) as exc:
        logging.getLogger("ratchet_taskgen").error("%s", exc)
        return 2
    print(json.dumps({k: report[k] for k in ("tried", "kept", "train", "heldout", "seconds")}))
    return 0 if report["kept"] >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
