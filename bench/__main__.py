"""`python -m bench`: run lazyten's benchmark suite (see docs/benchmarks.md)."""
import sys

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
