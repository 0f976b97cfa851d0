"""``python -m pyro_dp`` is the ``pyro-dp`` command."""
import sys

from .cli import main

sys.exit(main())
