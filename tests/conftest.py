"""Suite-wide settings, applied before any test module imports torch."""

import os

# One compute thread per process unless a test sets its own: the suite runs tests in
# parallel (pytest-xdist) and starts training subprocesses on a 2-core machine, where
# more threads only fight each other (a 300-step test took 20x longer under load).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Output widths never come from whoever runs the suite: pytest-xdist's workers get
# COLUMNS=80, a developer's terminal anything. Tests that care set COLUMNS themselves.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
