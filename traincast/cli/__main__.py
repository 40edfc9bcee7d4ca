"""``python -m traincast.cli``: the ``traincast`` command."""

import sys

from traincast.cli.app import main

# guarded as the installed ``traincast`` script is: worker processes (forkserver) import this
# module again, and an unguarded one keeps a large load's parse in one process
if __name__ == "__main__":
    sys.exit(main())
