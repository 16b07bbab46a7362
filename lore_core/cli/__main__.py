"""``python -m lore_core.cli``: the ``lore`` command."""

import sys

from lore_core.cli.commands import main

sys.exit(main())
