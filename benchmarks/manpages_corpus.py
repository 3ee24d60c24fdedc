"""A real multilingual corpus of long technical documents: Debian's manual pages, rendered.

Reproduce (Debian/Ubuntu with apt-get, dpkg-deb and groff; nothing is installed):

    .venv/bin/python benchmarks/manpages_corpus.py        # -> benchmarks/out/manpages.jsonl
                                                          #    (+ manpages-en, manpages-sample)

It runs `apt-get download` for the English pages (manpages, manpages-dev and the packages
whose pages the translators cover: coreutils, util-linux, findutils, grep, sed, tar, gzip,
procps, passwd, login, man-db, dpkg, apt) and for the translations (manpages-de, -fr, -es,
-ru, -pl from manpages-l10n; manpages-ja; manpages-zh), unpacks them with `dpkg-deb -x`, and
renders every page with groff to UTF-8 text with one line per paragraph (a very long line
length, as documentation extracted from HTML comes), leading indentation, the running
header and footer removed. One record per page and language:

    {"id": "ls.1/de", "page": "ls.1", "lang": "de", "package": "manpages-de", "text": "..."}

The same `page` in several languages is a translation of the same text (the translators
work from the English page of roughly the same version), which is what
benchmarks/clean_parallel.py needs. `--more-languages` takes manpages-l10n's other
translations instead (it, nl, pt-br, cs, uk, hu, sv, da, fi, ro, el, id, vi, tr) and writes
benchmarks/out/manpages-more.jsonl.
"""

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGLISH = ["manpages", "manpages-dev", "coreutils", "util-linux", "findutils", "grep", "sed",
           "tar", "gzip", "procps", "passwd", "login", "man-db", "dpkg", "apt"]
# package -> (directory under usr/share/man, our language code)
TRANSLATED = {"manpages-de": ("de", "de"), "manpages-fr": ("fr", "fr"),
              "manpages-es": ("es", "es"), "manpages-ru": ("ru", "ru"),
              "manpages-pl": ("pl", "pl"), "manpages-ja": ("ja", "ja"),
              "manpages-zh": ("zh_CN", "zh")}
# --more-languages: the other translations (manpages-l10n) with a FineWeb-2 entry in llmtk
MORE = {"manpages-it": ("it", "it"), "manpages-nl": ("nl", "nl"),
        "manpages-pt-br": ("pt_BR", "pt"), "manpages-cs": ("cs", "cs"),
        "manpages-uk": ("uk", "uk"), "manpages-hu": ("hu", "hu"), "manpages-sv": ("sv", "sv"),
        "manpages-da": ("da", "da"), "manpages-fi": ("fi", "fi"), "manpages-ro": ("ro", "ro"),
        "manpages-el": ("el", "el"), "manpages-id": ("id", "id"), "manpages-vi": ("vi", "vi"),
        "manpages-tr": ("tr", "tr")}
_HEADER = re.compile(r"^\S.*\(\d\w*\)\s*$")


def fetch(debs: Path, translated: dict) -> None:
    debs.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0] for p in debs.glob("*.deb")}
    missing = [p for p in [*ENGLISH, *translated] if p not in have]
    if missing:
        subprocess.run(["apt-get", "download", *missing], cwd=debs, check=True)
    for deb in debs.glob("*.deb"):
        target = debs / ("x_" + deb.name.split("_")[0])
        if not target.exists():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)


def render(path: Path) -> str:
    """groff -> plain UTF-8 text, one line per paragraph, header/footer/indent removed."""
    with gzip.open(path, "rb") as f:
        src = f.read()
    if src.startswith(b".so "):  # a link to another page
        return ""
    out = subprocess.run(
        ["groff", "-k", "-K", "utf8", "-man", "-Tutf8", "-P", "-cbou", "-rLL=2000n",
         "-rHY=0"], input=src, capture_output=True, check=False).stdout.decode("utf-8", "replace")
    lines = [line.strip() for line in out.splitlines()]
    # the running header (first non-blank line) and footer (last one) name the page
    body = [i for i, line in enumerate(lines) if line]
    if len(body) < 3:
        return ""
    lines = lines[body[0] + 1 : body[-1]]
    text = "\n".join(re.sub(r"[ \t]{2,}", " ", line) for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def pages(debs: Path, translated: dict):
    """(page, lang, package, path) for every page of every package."""
    for pkg in ENGLISH:
        base = debs / f"x_{pkg}" / "usr" / "share" / "man"
        for path in sorted(base.glob("man*/*.gz")):
            yield path.name.removesuffix(".gz"), "en", pkg, path
    for pkg, (subdir, lang) in translated.items():
        base = debs / f"x_{pkg}" / "usr" / "share" / "man" / subdir
        for path in sorted(base.glob("man*/*.gz")):
            yield path.name.removesuffix(".gz"), lang, pkg, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--debs", default=str(ROOT / "benchmarks" / "out" / "debs"))
    ap.add_argument("-o", "--output", default=str(ROOT / "benchmarks" / "out" / "manpages.jsonl"))
    ap.add_argument("--min-chars", type=int, default=500, help="skip shorter pages")
    ap.add_argument("--more-languages", action="store_true",
                    help="the other translated packages (MORE) instead of the issue's seven "
                    "(default output: manpages-more.jsonl)")
    args = ap.parse_args()
    translated = MORE if args.more_languages else TRANSLATED
    if args.more_languages and args.output.endswith("out/manpages.jsonl"):
        args.output = args.output.removesuffix(".jsonl") + "-more.jsonl"
    debs = Path(args.debs)
    fetch(debs, translated)
    todo = list({(p, lang): (p, lang, pkg, path)
                 for p, lang, pkg, path in pages(debs, translated)}.values())
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        texts = list(pool.map(lambda t: render(t[3]), todo))
    n = 0
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for (page, lang, pkg, _), text in zip(todo, texts, strict=True):
            if len(text) < args.min_chars:
                continue
            f.write(json.dumps({"id": f"{page}/{lang}", "page": page, "lang": lang,
                                "package": pkg, "text": text}, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, args.output)
    print(f"wrote {n:,} pages to {args.output}", file=sys.stderr)
    write_subsets(args.output)


def write_subsets(path: str) -> None:
    """manpages-en.jsonl (the English pages) and manpages-sample.jsonl (every 6th line, all
    languages) next to the corpus: the inputs of benchmarks/clean_vs_datatrove.py."""
    base = path.removesuffix(".jsonl")
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    subsets = {f"{base}-en.jsonl": [x for x in lines if json.loads(x)["lang"] == "en"],
               f"{base}-sample.jsonl": lines[::6]}
    for out, chosen in subsets.items():
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(chosen)
        os.replace(out + ".tmp", out)
        print(f"wrote {len(chosen):,} pages to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
