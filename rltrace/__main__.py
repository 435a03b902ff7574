"""``python -m rltrace``: the same as the ``rltrace`` command."""

import sys

from rltrace.cli import main

sys.exit(main())
