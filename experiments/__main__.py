"""``python3 -m experiments NAME [--quick] [--out DIR]``, run from the repository root (:mod:`experiments.cli`)."""
import sys

from .cli import main

sys.exit(main())
