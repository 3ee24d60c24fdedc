"""What segmenting Chinese and Japanese into words costs `llmtk clean`, per core.

Reproduce (after `make setup`; the corpora from manpages_corpus.py and
debian_reference_corpus.py, see clean_parallel.py):

    .venv/bin/python benchmarks/clean_cjk_speed.py                  # this checkout
    mkdir /tmp/before && git archive e59f393 llmtk | tar -x -C /tmp/before
    .venv/bin/python benchmarks/clean_cjk_speed.py --llmtk /tmp/before  # a word per character

Any JSONL of {"lang", "text"} records works (the default: the Chinese and Japanese pages of
benchmarks/out/manpages.jsonl and debian-reference.jsonl; a .zst file is read too, e.g. the
shared corpus, whose Chinese is fortune cookies). For each language it prints the CPU time
(one process, one core) and MB/s of UTF-8 text of: the words alone (`DocText.words` on the
normalised text, as the rules see it), the four rule sets on the normalised text, and the
default pipeline (normalise, language ID, rules, PII); then, as a named peer measured in the
same run, the Python jieba package that spaCy's Chinese tokenizer calls (datatrove's word
tokenizer for FineWeb-2's Chinese), where it is installed.
"""

import argparse
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "benchmarks" / "out" / f"{c}.jsonl" for c in ("manpages", "debian-reference")]
LANGS = ("zh", "ja")


def read(path: Path) -> list[dict]:
    raw = path.open("rb")
    if raw.read(4) == b"\x28\xb5\x2f\xfd":
        import zstandard

        raw.seek(0)
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(
            raw, read_across_frames=True), encoding="utf-8")
    else:
        raw.seek(0)
        lines = io.TextIOWrapper(raw, encoding="utf-8")
    return [d for d in map(json.loads, lines) if d.get("lang") in LANGS]


def cpu(fn, items) -> float:
    """CPU seconds of this process for fn over the items."""
    t0 = time.process_time()
    for x in items:
        fn(x)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="*", type=Path, help="JSONL files (default: see above)")
    ap.add_argument("--llmtk", metavar="DIR", help="import llmtk from this checkout")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.llmtk).resolve()) if args.llmtk else str(ROOT))

    import llmtk
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.clean.filters import DocText, Profile
    from llmtk.io.record import Doc

    print(f"llmtk from {Path(llmtk.__file__).parent}")
    docs = [d for p in (args.corpus or DEFAULT) for d in read(p)]
    cfg = CleanConfig().with_values({"pii.enabled": False})
    clean = Cleaner(cfg)
    clean.load()
    norm = cfg.normalize
    print("lang  docs   MB     | words: s  MB/s  | rules: s  MB/s  | pipeline: s  MB/s")
    for lang in LANGS:
        texts = [d["text"] for d in docs if d["lang"] == lang]
        if not texts:
            continue
        mb = sum(len(t.encode()) for t in texts) / 1e6
        normed = [norm(t) for t in texts]
        # once untimed: the dictionaries load on first use (once per process)
        DocText(normed[0], lang).words  # noqa: B018
        t_words = cpu(lambda t, lang=lang: DocText(t, lang).words, normed)
        filters, words = clean.plan(lang)
        profile = Profile.for_lang(lang, words=words)

        def rules(t, filters=filters, profile=profile, lang=lang):
            d = DocText(t, lang)
            for stage in filters.values():
                if stage.check(d, profile) is not None:
                    return

        t_rules = cpu(rules, normed)
        t_all = cpu(lambda t: clean(Doc({"text": t}, None, "b", 1, 0)), texts)
        print(f"{lang:4}  {len(texts):5}  {mb:5.1f}  | {t_words:7.2f}  {mb / t_words:5.2f} "
              f"| {t_rules:7.2f}  {mb / t_rules:5.2f} | {t_all:10.2f}  {mb / t_all:5.2f}")
        if lang == "zh":
            try:
                import jieba
            except ImportError:
                continue
            jieba.setLogLevel(60)
            jieba.initialize()
            t_peer = cpu(lambda t: [w for w in jieba.cut(t) if w.strip()], normed)
            print(f"      peer: Python jieba (spaCy-zh's segmenter) {t_peer:.2f} s, "
                  f"{mb / t_peer:.2f} MB/s; llmtk's words {t_peer / t_words:.1f}x its speed")


if __name__ == "__main__":
    main()
