"""One config pattern: frozen configs, one validate() raising ConfigError(key, ...),
one TOML loader, and the key worded as the flag or as `FILE: key` by the command layer."""

import dataclasses
import pickle
import subprocess
import sys

import pytest

from llmtk.clean import CleanConfig
from llmtk.errors import ConfigError, UsageError
from tests.util import ROOT, env, llmtk


def error_line(r) -> str:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmtk: error: "), r.stderr
    return lines[0].removeprefix("llmtk: error: ")


# ------------------------------------------------------------------ the key, as the user wrote it


def test_clean_words_a_bad_value_as_the_flag_or_as_the_file_key(tmp_path):
    assert error_line(llmtk("clean", "--min-quality", "2", input=b"")) == \
        "--min-quality: expected a number between 0 and 1"
    cfg = tmp_path / "c.toml"
    cfg.write_text("[quality]\nmin_score = 2\n")
    assert error_line(llmtk("clean", "--config", cfg, input=b"")) == \
        f"{cfg}: quality.min_score: expected a number between 0 and 1"
    # the flag wins over the file, and then the flag is named
    assert error_line(llmtk("clean", "--config", cfg, "--min-quality", "3", input=b"")) == \
        "--min-quality: expected a number between 0 and 1"
    cfg.write_text("[gopher_quality]\nmin_doc_wrds = 3\n")
    assert error_line(llmtk("clean", "--config", cfg, input=b"")) == \
        f"{cfg}: gopher_quality.min_doc_wrds: unknown key"


def test_other_keys_in_a_message_are_worded_too():
    assert error_line(llmtk("clean", "--max-ppl", "5", input=b"")) == \
        "--max-ppl: needs --ppl-model"
    assert error_line(llmtk("clean", "--lang", "en", "--no-langid", input=b"")) == \
        "--lang: needs language ID, which --no-langid switches off"


def test_dedup_and_estimate_keys_are_their_flags():
    assert error_line(llmtk("dedup", "--bands", "0", input=b"")) == \
        "--bands: must be >= 1, as must --rows, with at most 1024 permutations (bands x rows); " \
        "got 0x7"
    line = error_line(llmtk("estimate", "--params", "7e9", "--scaling-fit", "nope"))
    assert line.startswith("--scaling-fit: expected one of ")  # the field is `fit`
    assert error_line(llmtk("estimate", "--layers", "2")) == \
        "--d-model: needed with the other model dimensions (or use --model PRESET)"


def test_a_config_error_crosses_worker_processes_whole():
    e = ConfigError("a.b", "needs {0}", also=("c",), source="f.toml", value="v")
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) == "f.toml: a.b v: needs c"
    assert isinstance(again, UsageError) and again.exit_code == 2


def test_braces_in_a_value_are_not_format_fields():
    e = ConfigError("init_from", "drop {0}", also=("tokenizer",), value="runs/{x}")
    assert e.worded(lambda k: "--" + k) == "--init_from runs/{x}: drop --tokenizer"


# ------------------------------------------------------------------ one TOML loader, one wording


@pytest.mark.parametrize("command", [["clean"], ["train"]])
def test_clean_and_train_word_toml_file_errors_alike(tmp_path, command):
    missing = tmp_path / "missing.toml"
    bad = tmp_path / "bad.toml"
    bad.write_text("[quality]\nmin_score = = 2\n")
    for path, expected in ((missing, f"{missing}: cannot read: No such file or directory"),
                           (bad, f"{bad}:2: invalid TOML: Invalid value (column 13)")):
        if command == ["train"]:  # train is not run in-process (torch state)
            r = subprocess.run([sys.executable, "-m", "llmtk", "train", "--config", str(path)],
                               cwd=ROOT, env=env(), capture_output=True)
        else:
            r = llmtk(*command, "--config", path, input=b"")
        assert error_line(r) == expected


# ------------------------------------------------------------------ frozen, validated once


def test_configs_are_frozen_and_derived_with_replace():
    cfg = CleanConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.quality.min_score = 0.9  # type: ignore[misc]
    changed = cfg.with_values({"quality.min_score": 0.9, "normalize.unicode": "nfkc"})
    assert changed.quality.min_score == 0.9 and cfg.quality.min_score == 0.5
    assert changed.normalize.unicode == "NFKC"  # canonical when set, not by validate()
    before = dataclasses.asdict(changed)
    changed.validate()
    assert dataclasses.asdict(changed) == before  # validate() changes nothing


def test_every_clean_stage_option_sets_a_field_of_its_stage():
    """clean's stage options are made from the stages' flags (no table beside them): each
    names a field of its stage's config, and every other option is the command's own."""
    import inspect
    from dataclasses import fields

    from llmtk.clean.stages import PIPELINE
    from llmtk.commands.clean import FLAGS, OWN, PARAMS, clean
    from llmtk.commands.options import STREAM_OPTIONS

    params = set(inspect.signature(clean).parameters)
    assert params - set(OWN) - {"filters"} - set(STREAM_OPTIONS) == set(PARAMS)
    for stage in PIPELINE:
        names = {f.name for f in fields(stage.config)}
        for flag in stage.flags:
            assert flag.key in names, (stage.name, flag.key)
            assert FLAGS[f"{stage.name}.{flag.key}"] == flag.flags[0].split("/")[0]


# ------------------------------------------------------------------ "off": false, one spelling


def test_false_switches_a_threshold_off_and_minus_one_reads_as_false():
    cfg = CleanConfig.from_dict({
        "c4": {"min_num_sentences": -1, "max_word_length": False},
        "fineweb": {"line_punct_thr": -1},
        "gopher_repetition": {"top_n_grams": False},
        "gopher_quality": {"min_doc_words": 0},  # a lower limit of 0: nothing falls below
    })
    assert cfg.c4.min_num_sentences is None and cfg.c4.max_word_length is None
    assert cfg.fineweb.line_punct_thr is None and cfg.gopher_repetition.top_n_grams == []
    assert cfg.gopher_quality.min_doc_words == 0
    assert "min_num_sentences = false" in cfg.to_toml()


@pytest.mark.parametrize("table", [
    {"gopher_quality": {"max_doc_words": 0}},
    {"lang": {"de": {"gopher_repetition": {"dup_line_frac": 0}}}},
])
def test_zero_where_it_used_to_mean_off_is_refused(tmp_path, table):
    with pytest.raises(ConfigError, match="0 does not switch a rule off: write false"):
        CleanConfig.from_dict(table, "c.toml")


def test_a_shared_stream_option_is_its_flag_even_with_a_config_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[quality]\nmin_score = 0.4\n")
    r = llmtk("clean", "--config", cfg, "-o", tmp_path / "o.parquet", "--compress", "zstd",
              input=b"")
    assert error_line(r) == "--compress: a .parquet output is always zstd-compressed"
