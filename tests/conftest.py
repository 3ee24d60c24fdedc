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

# pytest-xdist (`make test`: -n auto --dist loadfile) hands out whole files, by default
# those with the most tests first, so the few-but-long training files came last and one
# worker ran them alone for minutes at the end. The files below, longest first (measured
# with --durations), go out first; the rest follow in xdist's order (most tests first).
SLOW_FILES = [  # the order of their summed --durations on 2026-12-01 (under load)
    "test_sft_learning.py", "test_gpu_check.py", "test_train_parallel.py", "test_train.py",
    "test_sft.py",
    "test_doc_commands.py", "test_cluster.py", "test_dedup_stages.py", "test_eval.py",
    "test_eval_formats.py",
    "test_plot_loss.py",
    "test_train_guards.py", "test_train_hf.py", "test_train_loggers.py", "test_clean.py",
    "test_corrupt_checkpoints.py", "test_train_cli.py",
]


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the order below is the schedule


def pytest_collection_modifyitems(session, config, items):
    per_file: dict[str, int] = {}
    for item in items:
        per_file[item.path.name] = per_file.get(item.path.name, 0) + 1

    def rank(pair):
        position, item = pair
        name = item.path.name
        slow = SLOW_FILES.index(name) if name in SLOW_FILES else len(SLOW_FILES)
        return slow, -per_file[name], name, position

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]


def pytest_xdist_make_scheduler(config, log):
    """xdist's loadfile schedule, but a worker is sent its next file when it starts the
    last test of its files (xdist: when 2 are left), so a short file of two long tests
    (test_sft_learning.py) does not take the next long file along to the same worker."""
    from xdist.scheduler import LoadFileScheduling

    if config.getvalue("dist") != "loadfile":
        return None

    class OneTestAhead(LoadFileScheduling):
        def _reschedule(self, node):
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return OneTestAhead(config, log)
