"""Test runs keep Python's bytecode caches, whatever PYTHONDONTWRITEBYTECODE says.

Some environments (containers, shared machines) set it for every process. A test run
then compiles every module it imports from source again, in the pytest process, in each
xdist worker and in each ``lore`` process a test starts, and pytest rewrites every test
module's assertions again: about a third of the fast run's CPU. The caches are
``__pycache__`` folders, which git ignores; where one cannot be written, Python goes on
without it.
"""

from __future__ import annotations

import os
import sys

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the lore processes the tests start
sys.dont_write_bytecode = False
