"""llmtk.io.atomic's folder and by-name helpers: what every output that is not a stream
goes through (the token cache, dedup's stage folders, export --hf, a trained tokenizer)."""

import os

import pytest

from llmtk.errors import LlmtkError
from llmtk.io.atomic import atomic_dir, atomic_name


def test_a_folder_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_dir(str(target)) as tmp:
        open(os.path.join(tmp, "half"), "w").close()
        raise RuntimeError("killed halfway")
    assert os.listdir(tmp_path) == []
    with atomic_dir(str(target)) as tmp:
        assert not target.exists()
        open(os.path.join(tmp, "whole"), "w").close()
    assert os.listdir(target) == ["whole"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_finished_folder_is_replaced_kept_or_refused_as_asked(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("")
    with pytest.raises(LlmtkError, match="cannot rename into place"), \
            atomic_dir(str(target)) as tmp:
        open(os.path.join(tmp, "new"), "w").close()
    with atomic_dir(str(target), exist_ok=True) as tmp:  # another process finished first
        open(os.path.join(tmp, "new"), "w").close()
    assert os.listdir(target) == ["old"]
    with atomic_dir(str(target), replace=True) as tmp:  # a killed task's leftover
        open(os.path.join(tmp, "new"), "w").close()
    assert os.listdir(target) == ["new"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_library_that_writes_by_name_writes_our_temporary_file(tmp_path):
    target = tmp_path / "tokenizer.json"
    with atomic_name(str(target)) as tmp:
        assert os.path.exists(tmp) and not target.exists()  # created by us, exclusively
        with open(tmp, "w") as f:
            f.write("{}")
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["tokenizer.json"]
    with pytest.raises(ValueError), atomic_name(str(target)) as tmp:
        with open(tmp, "w") as f:
            f.write("half")
        raise ValueError
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["tokenizer.json"]
