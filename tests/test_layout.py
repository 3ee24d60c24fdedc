"""The code-layout checks `make lint` runs (tools/): they must catch what they are for."""

import importlib
import sys

from tools.check_cycles import cycles


def test_a_cycle_hidden_in_a_function_level_import_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyclepkg import a\n")
    (pkg / "c.py").write_text("from cyclepkg import a, d\n")
    # an import only a type checker runs is no cycle
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclepkg import c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        assert cycles("cyclepkg") == [["cyclepkg.a", "cyclepkg.b"]]
    finally:
        sys.modules.pop("cyclepkg", None)


def test_no_benchmark_or_doc_points_at_one_machines_files():
    """Benchmarks take their corpus as an argument or build it; docs show commands anyone
    can run: no absolute path that exists only on the machines this was built on."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    files = [*root.glob("benchmarks/*.py"), *root.glob("docs/*.md"), root / "README.md"]
    assert not [str(f.relative_to(root)) for f in files if "/work/" in f.read_text()]
