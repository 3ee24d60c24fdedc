"""Real, mixed-quality text in one language, to see what a threshold lets through.

Reproduce (Debian/Ubuntu with apt-get and dpkg-deb; nothing is installed):

    python3 benchmarks/manpages_corpus.py                   # the man pages, and the .debs
    .venv/bin/python benchmarks/monolingual_corpus.py --lang es   # -> out/mono-es.jsonl
    .venv/bin/python benchmarks/clean_threshold_cost.py benchmarks/out/mono-es.jsonl \\
        --lang es --old 0.825 --new 0.803

Languages: es, fr, de, pl, ja. The shared corpus holds no Spanish, French, Polish or
Japanese (its German is fortune cookies), and these packages are what the registries offer
in those languages. The sources, each record's `source`:

- `fortunes`: the `fortunes-es` and `fortunes-es-off` cookies (`fortunes-de`, `fortunes-pl`;
  Debian has no French or Japanese ones), one cookie per record: quotations, jokes, verse,
  lists, some ASCII art; most are too short for the rules;
- `manual`: the HTML manuals of `aptitude-doc-LANG`, `maint-guide-LANG` and
  `debian-edu-doc-LANG`, one record per file (the Debian Edu manual cut at its <h2>
  headings), converted with clean's main-content extractor (`--extract resiliparse`);
- `manpages`: the LANG man pages of benchmarks/out/manpages.jsonl, as rendered (credits kept);
- `messages`: the LANG gettext catalogues (.mo) of the programs whose .debs
  manpages_corpus.py unpacked (coreutils, tar, apt, dpkg, ...), one record per catalogue,
  its translated messages one per line: UI strings, usage texts and format strings, the
  kind of text a quality filter should drop.
"""

import argparse
import gettext
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

# What Debian has per language (no French fortunes, no German aptitude manual, no Polish
# manual but the legacy Debian Edu one, no Japanese fortunes).
PACKAGES = {"es": ["fortunes-es", "fortunes-es-off", "aptitude-doc-es", "maint-guide-es",
                   "debian-edu-doc-es"],
            "fr": ["aptitude-doc-fr", "maint-guide-fr", "debian-edu-doc-fr"],
            "de": ["fortunes-de", "maint-guide-de", "debian-edu-doc-de"],
            "pl": ["fortunes-pl"],
            "ja": ["aptitude-doc-ja", "maint-guide-ja", "debian-edu-doc-ja"]}


def fortunes(debs: Path, lang: str):
    seen = set()  # the offensive files come in both Spanish packages
    for path in sorted(debs.glob(f"x_fortunes-{lang}*/usr/share/games/fortunes/**/*")):
        if path.is_symlink() or not path.is_file() or path.suffix in (".dat", ".u8") \
                or path.name.endswith("-pre"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if (path.name, text) in seen:
            continue
        seen.add((path.name, text))
        for i, cookie in enumerate(re.split(r"(?m)^%\s*$", text)):
            if cookie.strip():
                yield f"fortunes/{path.name}/{i}", cookie.strip("\n")


def manuals(debs: Path, lang: str):
    from llmtk.clean.extract import extract

    for pkg in (f"aptitude-doc-{lang}", f"maint-guide-{lang}", f"debian-edu-doc-{lang}"):
        if pkg not in PACKAGES[lang]:
            continue
        for path in sorted((debs / f"x_{pkg}").rglob("*.html")):
            html = path.read_text(encoding="utf-8", errors="replace")
            parts = re.split(r"(?i)(?=<h2\b)", html) if pkg.startswith("debian-edu") else [html]
            for i, part in enumerate(parts):
                text = extract(part, "resiliparse").strip()
                if text:
                    yield f"manual/{pkg}/{path.name}/{i}", text


def manpages(lang: str):
    path = ROOT / "benchmarks" / "out" / "manpages.jsonl"
    if path.exists():
        for line in open(path, encoding="utf-8"):
            d = json.loads(line)
            if d["lang"] == lang:
                yield f"manpages/{d['page']}", d["text"]


def messages(debs: Path, lang: str):
    for path in sorted(debs.glob(f"x_*/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # msgid -> msgstr
        msgs = [v for k, v in catalog.items() if k and isinstance(v, str) and v.strip()]
        if msgs:
            yield f"messages/{path.parts[-5]}/{path.name}", "\n".join(msgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", choices=sorted(PACKAGES), default="es")
    ap.add_argument("--debs", default=str(ROOT / "benchmarks" / "out" / "debs"))
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    debs = Path(args.debs)
    debian_packages(debs, PACKAGES[args.lang])
    out = args.output or str(ROOT / "benchmarks" / "out" / f"mono-{args.lang}.jsonl")
    n = 0
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        for source, docs in (("fortunes", fortunes(debs, args.lang)),
                             ("manual", manuals(debs, args.lang)),
                             ("manpages", manpages(args.lang)),
                             ("messages", messages(debs, args.lang))):
            for doc_id, text in docs:
                f.write(json.dumps({"id": doc_id, "source": source, "lang": args.lang,
                                    "text": text}, ensure_ascii=False) + "\n")
                n += 1
    os.replace(out + ".tmp", out)
    print(f"wrote {n:,} records to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
