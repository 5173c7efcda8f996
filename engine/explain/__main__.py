"""``python -m engine.explain FILE``: the same as ``qosd explain FILE``."""

import sys

from engine.explain.options import main

sys.exit(main())
