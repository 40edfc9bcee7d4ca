"""``python -m traincast.cli``: the ``traincast`` command."""

import sys

from traincast.cli.app import main

sys.exit(main())
