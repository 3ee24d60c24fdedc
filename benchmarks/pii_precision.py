"""PII scrubbing (`llmtk/text/pii.py`) on real technical text and code: what it alters that
is nobody's personal data, and what it still finds.

Reproduce (needs apt-get and the network once, for the Rust and C++ packages):

    .venv/bin/python benchmarks/pii_precision.py                 # builds the corpus, measures
    .venv/bin/python benchmarks/pii_precision.py --data DIR      # another corpus directory
    .venv/bin/python benchmarks/pii_precision.py --half held --before 4ac122b --show 40

The corpus (DIR/corpus.jsonl, default benchmarks/out/pii-precision/, built when missing) is
real material the rules were not written on, one record per file:
  - text: man pages of sections 1, 3, 5, 7, 8 rendered by `man` (at most 6 per package),
    and /usr/share/doc files (README, NEWS, changelogs, copyright, *.txt, *.md, *.rst; at
    most 4 per package, the first 100 kB);
  - code: Python (the standard library by module, the running interpreter's site-packages
    by package), C (/usr/include by Debian package), C++ (libstdc++ headers by directory,
    and the headers of header-only Debian packages: fmt, nlohmann-json, spdlog, CLI11,
    Catch2, googletest, pugixml, cxxopts, yaml-cpp, range-v3, GSL, glm, cereal,
    RapidJSON, asio, Eigen), Rust (the sources of Debian's librust-*-dev crates);
    at most 12 files per package, 200 B .. 200 kB each.
Each record's source (a Debian package, a Python module or package, a libstdc++ directory)
decides its half by a stable hash: `dev` (looked at while the rules were written) or `held`
(reported). The halves never share a source. A third set, `fresh` (DIR/fresh.jsonl), holds
FRESH_PACKAGES: Debian packages not installed here (Rust crates, C++ headers, Python
packages, with their docs and man pages), added once the rules were final; docs/clean.md
says which rules came after reading which set.

It reports, per set:
  (a) precision: how many documents and code files get any replacement, by kind, before
      (`--before`, a git revision whose llmtk/text/pii.py is loaded as a module; default
      4ac122b, the commit issue 34 was measured on) and now, and each span replaced now
      with its context, to be read: a real person's address in a changelog is right;
  (b) never-personal constructs (scope operators, reST `::`, versions and section numbers,
      signed decimals, loopback/private/documentation/multicast addresses...) planted into
      real sentences of the set: how many are altered. Each set has its own list:
      different constructs of the same families, plus families only later lists have;
  (c) recall on generated real-shaped personal data planted into real sentences: e-mails,
      public IPv4/IPv6 (random, outside reserved ranges), phone numbers in the formats of
      the US, UK, Germany, France, China, India, Brazil, Japan, Spain, Italy, Russia,
      Australia, Mexico, Korea and the Netherlands, Luhn-valid cards of six issuers, valid
      Chinese resident ID numbers;
  (d) speed: CPU seconds of each version over every record, best of three.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

from llmtk.text import pii  # noqa: E402

DEFAULT_DATA = ROOT / "benchmarks" / "out" / "pii-precision"
BEFORE = "4ac122b"

RUST_CRATES = ["regex", "regex-syntax", "serde", "serde-json", "syn", "tokio", "clap", "nix",
               "libc", "rand", "hyper", "url", "chrono", "log", "itertools", "anyhow", "bytes",
               "futures-util", "rayon", "crossbeam-channel", "memchr", "ipnet", "socket2",
               "mio", "time", "uuid", "base64", "num-bigint", "toml", "nom", "indexmap",
               "hashbrown", "smallvec", "bitflags", "tracing", "http", "trust-dns-proto",
               "h2", "openssl", "rustls", "env-logger", "tempfile", "walkdir", "glob",
               "serde-yaml", "proc-macro2", "quote", "once-cell", "semver", "encoding-rs"]
CPP_PACKAGES = ["libfmt-dev", "nlohmann-json3-dev", "libspdlog-dev", "libcli11-dev", "catch2",
                "libgtest-dev", "libgmock-dev", "libpugixml-dev", "libcxxopts-dev",
                "libyaml-cpp-dev", "librange-v3-dev", "libmsgsl-dev", "libglm-dev",
                "libcereal-dev", "rapidjson-dev", "libasio-dev",
                "libeigen3-dev"]
CODE_EXT = {".py": "python", ".h": "c", ".c": "c", ".hpp": "cpp", ".hh": "cpp", ".cc": "cpp",
            ".cpp": "cpp", ".hxx": "cpp", ".ipp": "cpp", ".rs": "rust", ".tcc": "cpp"}
# The third set, "fresh": Debian packages that are not installed here, read only once the
# rules were final (after the held half had been read: see docs/clean.md).
FRESH_PACKAGES = [
    *(f"librust-{c}-dev" for c in (
        "serde-derive futures reqwest tokio-util tower crossbeam-utils parking-lot ring sha2 "
        "digest rand-core num-traits aho-corasick unicode-segmentation textwrap termcolor "
        "signal-hook ipnetwork trust-dns-resolver httparse mime percent-encoding idna cookie "
        "rustix libloading bindgen cc git2 notify csv flate2 zip tar").split()),
    "libabsl-dev", "libprotobuf-dev", "libpoco-dev", "libwebsocketpp-dev", "libcpprest-dev",
    "cppzmq-dev", "libjsoncpp-dev", "libtbb-dev", "libxsimd-dev", "libxtensor-dev",
    "libmsgpack-cxx-dev", "libboost-regex1.81-dev", "libopencv-core-dev", "libsimdjson-dev",
    "libcrypto++-dev", "libsfml-dev", "python3-django", "python3-twisted", "python3-sqlalchemy",
    "python3-paramiko", "python3-dnspython", "python3-netaddr", "python3-ipython",
    "python3-scrapy", "python3-tornado", "python3-flask", "python3-werkzeug", "python3-babel",
    "python3-sphinx", "python3-docutils", "python3-ldap3", "python3-scapy", "python3-zmq",
    "python3-aiohttp", "python3-pandas",
]
PER_PACKAGE = 12
MAX_BYTES = 200_000


def half_of(source: str) -> str:
    return "dev" if hashlib.sha1(source.encode()).digest()[0] % 2 == 0 else "held"


# -- building the corpus --------------------------------------------------------------------


def dpkg_owner() -> dict[str, str]:
    """Installed file path -> its Debian package, from dpkg's file lists."""
    owner = {}
    for lst in Path("/var/lib/dpkg/info").glob("*.list"):
        pkg = lst.stem.split(":")[0]
        for line in lst.read_text(errors="replace").splitlines():
            owner[line] = pkg
    return owner


def read_text(path: Path, limit: int = MAX_BYTES) -> str | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if path.suffix == ".gz":
        import gzip

        try:
            raw = gzip.decompress(raw)
        except OSError:
            return None
    if b"\0" in raw[:4096]:
        return None
    text = raw.decode("utf-8", errors="replace")
    if len(text) > limit:  # cut at a line end
        text = text[:text.rfind("\n", 0, limit) + 1]
    return text


def sample(paths: list[Path], k: int, seed: str) -> list[Path]:
    paths = sorted(paths)
    random.Random(seed).shuffle(paths)
    return sorted(paths[:k])


def man_pages(owner: dict[str, str]) -> list[dict]:
    by_pkg = defaultdict(list)
    for sec in ("1", "3", "5", "7", "8"):
        for p in Path(f"/usr/share/man/man{sec}").glob("*"):
            if p.is_file() and not p.is_symlink() and str(p) in owner:
                by_pkg[owner[str(p)]].append(p)
    out = []
    for pkg in sorted(by_pkg):
        for p in sample(by_pkg[pkg], 6, pkg):
            text = render_man(p)
            if 200 <= len(text) <= MAX_BYTES:
                out.append({"source": f"deb:{pkg}", "kind": "text", "lang": "man",
                            "path": str(p), "text": text})
    return out


def doc_files() -> list[dict]:
    out = []
    keep = re.compile(r"(readme|news|changelog|copyright|changes|authors|history|todo)"
                      r"|\.(txt|md|rst)(\.gz)?$", re.I)
    for d in sorted(Path("/usr/share/doc").iterdir()):
        if not d.is_dir() or d.is_symlink():
            continue
        files = [p for p in d.rglob("*") if p.is_file() and not p.is_symlink()
                 and keep.search(p.name)]
        for p in sample(files, 4, d.name):
            text = read_text(p, 100_000)
            if text and len(text) >= 200:
                out.append({"source": f"deb:{d.name}", "kind": "text", "lang": "doc",
                            "path": str(p), "text": text})
    return out


def code_files(groups: dict[str, list[Path]]) -> list[dict]:
    out = []
    for source in sorted(groups):
        files = [p for p in groups[source] if p.is_file() and not p.is_symlink()
                 and 200 <= p.stat().st_size <= MAX_BYTES]
        for p in sample(files, PER_PACKAGE, source):
            text = read_text(p)
            if text:
                lang = CODE_EXT.get(p.suffix, "cpp")  # libstdc++ headers have no suffix
                out.append({"source": source, "kind": "code", "lang": lang, "path": str(p),
                            "text": text})
    return out


def python_groups() -> dict[str, list[Path]]:
    groups = defaultdict(list)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for p in stdlib.rglob("*.py"):
        rel = p.relative_to(stdlib).parts
        if rel[0] in ("site-packages", "dist-packages") or "test" in rel[:2]:
            continue
        groups[f"py-stdlib:{rel[0].removesuffix('.py')}"].append(p)
    site = Path(sysconfig.get_paths()["purelib"])
    for p in site.rglob("*.py"):
        rel = p.relative_to(site).parts
        if len(rel) > 1:
            groups[f"pypi:{rel[0]}"].append(p)
    return groups


def c_groups(owner: dict[str, str], root: Path, exts: tuple[str, ...]) -> dict[str, list[Path]]:
    groups = defaultdict(list)
    for p in root.rglob("*"):
        if p.suffix in exts and str(p) in owner and "/c++/" not in str(p):
            groups[f"deb:{owner[str(p)]}"].append(p)
    return groups


def stdcxx_groups() -> dict[str, list[Path]]:
    groups = defaultdict(list)
    for base in Path("/usr/include/c++").glob("*"):
        for p in base.rglob("*"):
            if p.is_file():
                rel = p.relative_to(base).parts
                groups[f"libstdc++:{rel[0] if len(rel) > 1 else 'top'}"].append(p)
    return groups


def unpacked_groups(debs: Path, pkgs: list[str], exts: tuple[str, ...]) -> dict[str, list[Path]]:
    groups = defaultdict(list)
    for pkg in pkgs:
        for p in (debs / f"x_{pkg}").rglob("*"):
            if p.suffix in exts:
                groups[f"deb:{pkg}"].append(p)
    return groups


def render_man(p: Path) -> str:
    env = {**os.environ, "MANWIDTH": "90", "LC_ALL": "C.UTF-8", "MAN_KEEP_FORMATTING": ""}
    r = subprocess.run(["man", "-l", str(p)], capture_output=True, env=env)
    return re.sub(r".\x08", "", r.stdout.decode("utf-8", errors="replace"))


def build_fresh(data: Path, skip: set[str]) -> list[dict]:
    """Records of FRESH_PACKAGES (downloaded, unpacked, never installed): their code, their
    /usr/share/doc files and their man pages, per package as the other sets are."""
    pkgs = [p for p in FRESH_PACKAGES if f"deb:{p}" not in skip]
    debs = data / "debs"
    debian_packages(debs, pkgs)
    records = code_files(unpacked_groups(debs, pkgs, tuple(CODE_EXT)))
    keep = re.compile(r"(readme|news|changelog|copyright|changes|authors)|\.(txt|md|rst)"
                      r"(\.gz)?$", re.I)
    for pkg in pkgs:
        root = debs / f"x_{pkg}" / "usr" / "share"
        docs = [p for p in (root / "doc").rglob("*") if p.is_file() and not p.is_symlink()
                and keep.search(p.name)]
        for p in sample(docs, 4, pkg):
            text = read_text(p, 100_000)
            if text and len(text) >= 200:
                records.append({"source": f"deb:{pkg}", "kind": "text", "lang": "doc",
                                "path": str(p.relative_to(debs)), "text": text})
        pages = [p for p in (root / "man").glob("man[1-8]/*") if p.is_file()]
        for p in sample(pages, 6, pkg):
            text = render_man(p)
            if 200 <= len(text) <= MAX_BYTES:
                records.append({"source": f"deb:{pkg}", "kind": "text", "lang": "man",
                                "path": str(p.relative_to(debs)), "text": text})
    for r in records:
        r["half"] = "fresh"
    return records


def build(data: Path) -> None:
    debs = data / "debs"
    rust = [f"librust-{c}-dev" for c in RUST_CRATES]
    debian_packages(debs, rust + CPP_PACKAGES)
    owner = dpkg_owner()
    records = man_pages(owner) + doc_files()
    records += code_files(python_groups())
    records += code_files(c_groups(owner, Path("/usr/include"), (".h",)))
    records += code_files(stdcxx_groups())
    records += code_files(unpacked_groups(debs, CPP_PACKAGES, (".h", ".hpp", ".hh", ".ipp",
                                                               ".cc", ".cpp", ".hxx")))
    records += code_files(unpacked_groups(debs, rust, (".rs",)))
    data.mkdir(parents=True, exist_ok=True)
    with open(data / "corpus.jsonl", "w") as f:
        for r in records:
            r["half"] = half_of(r["source"])
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} records to {data / 'corpus.jsonl'}", file=sys.stderr)


# -- planted sets ---------------------------------------------------------------------------

# Never personal: each must come out of the scrubber unchanged. The dev list is what the
# rules were written against (issue 34's examples among them); the held list holds other
# constructs of the same families and families the dev list lacks.
NEVER_DEV = [
    "might be::", "in C::", "A::B x;", "Cafe::Bead", "dead::beef", "section 3.3.2.1.",
    "zlib 1.2.0.1", "release 4.19.0.2", "+3.140000", "+000000120", "127.0.0.1", "10.0.0.5",
    "192.168.1.1", "192.0.2.1", "2001:db8::1", "fe80::1", "as follows::", "std::vector<int>",
    "Foo::Bar::Baz", "ab::cd::ef", "bad::ace()", "fmt::Debug", "E::A", "Vec::<u8>::new()",
    "de:ad:be:ef:00:01:02:03", "version 6.2.9.1", "kernel 2.6.32.71", "172.16.0.1",
    "100.64.0.1", "169.254.1.1", "224.0.0.251", "255.255.255.0", "0.0.0.0", "198.51.100.7",
    "::1", "fd00::1", "ff02::1", "+1.0000000", "+0.123456789", "+48.8566, +2.3522",
    "15000000000", "+20 000 000", "10:30:45", "ISBN 978-3-16-148410-0", "1.3.6.1.4.1.311",
    "2001:db8:85a3::8a2e:370:7334", "Oracle 11.2.0.4",
]
NEVER_HELD = [
    "is shown below::", "written as::", "in Rust::", "Add::add", "ace::bed::cafe", "c::d",
    "DB::Face y;", "fade::in()", "be::", "clause 5.2.1.4", "chapter 12.3.1.2", "v 1.0.2.13",
    "libfoo 2.4.1.3", "build 3.1.20.7", "Python 3.11.7.1", "firmware 4.2.11.9", "+2.718281",
    "+0000000042", "+9.81000", "+1.2500000000", "+1000000000", "127.0.1.1", "10.11.12.13",
    "192.168.100.254", "192.0.2.254", "203.0.113.9", "198.18.0.1", "239.255.255.250",
    "2001:db8:abcd:12::5", "fe80::1ff:fe23:4567:890a", "::ffff:10.0.0.1", "fc00:1:2::7",
    "ff05::1:3", "0:0:0:0:0:0:0:1", "+51.5074, -0.1278", "13000000000", "+33 000 000 000",
    "23:59:59", "RFC 4291 section 2.5.5.2", "2.16.840.1.101.3.4.2.1", "6.1.0.22-1",
    "table 4.3.2.1", "bed::face::cafe::dead",
]

# Written for the fresh set after the rules were final, and not run before it.
NEVER_FRESH = [
    "looks like this::", "in Python::", "For example::", "Ab::Cd z;", "Bead::Face",
    "beef::dead()", "ad::be", "abc::def::ghi", "cafe::", "Ace::Bad::Fed", "section 4.2.3.1",
    "paragraph 3.1.4.1", "gcc 4.9.2.1", "release 5.10.0.8", "version 7.1.3.4",
    "openssl 1.0.1.7", "Clause 6.5.2.3", "2.4.48.5", "+6.022140", "+00000000777",
    "+2.50000000", "+12.000000", "+0.000001234", "+12.345.678", "+1.234.567.890",
    "127.0.0.53", "10.255.255.254", "172.31.255.1", "192.168.0.100", "192.0.2.55",
    "198.51.100.200", "203.0.113.250", "169.254.169.254", "224.0.0.1", "255.255.255.255",
    "fe80::a00:27ff:fe4e:66a1", "2001:db8:1234::abcd", "fd12:3456:789a::1", "ff02::fb",
    "::ffff:192.168.1.1", "14000000000", "+44 0000 000000", "+1 000-000-0000",
    "2001:0db8:0000:0000:0000:ff00:0042:8329",
]
NEVER = {"dev": NEVER_DEV, "held": NEVER_HELD, "fresh": NEVER_FRESH}


def held_ok() -> None:
    lists = list(NEVER.values())
    assert all(len(x) >= 40 for x in lists)
    assert not any(set(a) & set(b) for i, a in enumerate(lists) for b in lists[i + 1:])


def sentences(docs: list[dict], n: int, seed: int) -> list[str]:
    """`n` real sentences (8-30 words, letters only besides punctuation) from text records."""
    pool = []
    for d in docs:
        if d["kind"] != "text":
            continue
        for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", d["text"])):
            words = s.split()
            if 8 <= len(words) <= 30 and not re.search(r"[\d:@+<>]", s):
                pool.append(s)
    pool = sorted(set(pool))
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(n)]


def plant(sentence: str, value: str, rng: random.Random) -> str:
    words = sentence.split()
    i = rng.randint(2, len(words) - 2)
    return " ".join(words[:i] + [value] + words[i:])


def luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def card(rng: random.Random) -> str:
    prefix, n = rng.choice([("4", 16), ("5" + str(rng.randint(1, 5)), 16), ("37", 15),
                            ("6011", 16), ("62", 16), ("35" + str(rng.randint(28, 89)), 16),
                            ("4", 13), ("2221", 16)])
    body = prefix + "".join(str(rng.randint(0, 9)) for _ in range(n - 1 - len(prefix)))
    num = body + luhn_digit(body)
    if n == 16 and rng.random() < 0.5:
        num = rng.choice([" ", "-"]).join(num[i:i + 4] for i in range(0, 16, 4))
    elif n == 15 and rng.random() < 0.5:
        num = f"{num[:4]} {num[4:10]} {num[10:]}"
    return num


def cn_id(rng: random.Random) -> str:
    area = rng.choice(["110105", "310104", "440305", "510107", "330106", "420111"])
    born = f"{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    body = area + born + f"{rng.randint(0, 999):03d}"
    total = sum(int(c) * w for c, w in zip(body, pii._ID_WEIGHTS, strict=True))
    return body + pii._ID_CHECK[total % 11]


def d(rng: random.Random, n: int, first: str = "0123456789") -> str:
    return rng.choice(first) + "".join(rng.choice("0123456789") for _ in range(n - 1))


def phone(rng: random.Random) -> str:
    """A phone number in one country's usual international or national shape."""
    forms = [
        lambda: f"+1 {d(rng, 3, '23456789')}-{d(rng, 3, '23456789')}-{d(rng, 4)}",
        lambda: f"({d(rng, 3, '23456789')}) {d(rng, 3, '23456789')}-{d(rng, 4)}",
        lambda: f"+1 ({d(rng, 3, '23456789')}) {d(rng, 3, '23456789')}-{d(rng, 4)}",
        lambda: f"{d(rng, 3, '23456789')}-{d(rng, 3, '23456789')}-{d(rng, 4)}",
        lambda: f"+44 20 {d(rng, 4, '78')} {d(rng, 4)}",
        lambda: f"+44 7{d(rng, 3)} {d(rng, 6)}",
        lambda: f"+49 30 {d(rng, 8, '123456789')}",
        lambda: f"+49 {d(rng, 3, '1')} {d(rng, 7, '123456789')}",
        lambda: f"+49 89 {d(rng, 3, '123456789')}-{d(rng, 4)}",
        lambda: f"+33 {rng.randint(1, 7)} " + " ".join(d(rng, 2) for _ in range(4)),
        lambda: f"+33.{rng.randint(1, 7)}." + ".".join(d(rng, 2) for _ in range(4)),
        lambda: f"+86 1{rng.choice('3456789')}{d(rng, 1)} {d(rng, 4)} {d(rng, 4)}",
        lambda: f"1{rng.choice('3456789')}{d(rng, 9)}",
        lambda: f"+86-10-{d(rng, 8, '2345678')}",
        lambda: f"+91 {d(rng, 5, '6789')} {d(rng, 5)}",
        lambda: f"+91-{d(rng, 10, '6789')}",
        lambda: f"+55 11 9{d(rng, 4)}-{d(rng, 4)}",
        lambda: f"+55 (21) {d(rng, 4, '23')}-{d(rng, 4)}",
        lambda: f"+81 3-{d(rng, 4)}-{d(rng, 4)}",
        lambda: f"+81 90-{d(rng, 4)}-{d(rng, 4)}",
        lambda: f"+34 6{d(rng, 2)} {d(rng, 2)} {d(rng, 2)} {d(rng, 2)}",
        lambda: f"+39 06 {d(rng, 4)} {d(rng, 4)}",
        lambda: f"+7 9{d(rng, 2)} {d(rng, 3)}-{d(rng, 2)}-{d(rng, 2)}",
        lambda: f"+61 2 {d(rng, 4, '89')} {d(rng, 4)}",
        lambda: f"+61 4{d(rng, 2)} {d(rng, 3)} {d(rng, 3)}",
        lambda: f"+52 55 {d(rng, 4)} {d(rng, 4)}",
        lambda: f"+82 10-{d(rng, 4)}-{d(rng, 4)}",
        lambda: f"+31 6 {d(rng, 8)}",
        lambda: f"+{rng.choice(['1', '44', '49', '33', '86', '91'])}{d(rng, 10, '23456789')}",
    ]
    return rng.choice(forms)()


def public_ip4(rng: random.Random) -> str:
    import ipaddress

    while True:
        s = ".".join(str(rng.randint(1, 254)) for _ in range(4))
        a = ipaddress.ip_address(s)
        if a.is_global and not a.is_multicast:
            return s


def public_ip6(rng: random.Random) -> str:
    import ipaddress

    while True:
        groups = [f"{rng.randint(0x2001, 0x2c0f):x}"] + [
            f"{rng.randint(0, 0xffff):x}" for _ in range(7)]
        if rng.random() < 0.4:
            groups[3:6] = ["0", "0", "0"]
        a = ipaddress.ip_address(":".join(groups))
        if a.is_global:
            return a.compressed if rng.random() < 0.5 else a.exploded


def email(rng: random.Random) -> str:
    user = rng.choice(["anna.schmidt", "li.wei", "j_smith", "marie+news", "raj.patel",
                       "t.yamada", "joao.silva", "kim99", "o'brien"])
    host = rng.choice(["gmail.com", "mail.example.org", "qq.com", "web.de", "orange.fr",
                       "yahoo.co.jp", "uol.com.br", "rediffmail.com", "cs.uni-bonn.de"])
    return f"{user}{rng.randint(1, 99)}@{host}"


POSITIVE = {"EMAIL": email, "IP4": public_ip4, "IP6": public_ip6, "PHONE": phone,
            "CARD": card, "ID_NUMBER": cn_id}


# -- measuring ------------------------------------------------------------------------------


def load_before(rev: str):
    """llmtk/text/pii.py as of git revision `rev`, or the file `rev`, as a module."""
    if Path(rev).is_file():
        src = Path(rev).read_bytes()
    else:
        src = subprocess.run(["git", "show", f"{rev}:llmtk/text/pii.py"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    spec = importlib.util.spec_from_loader("pii_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, f"{rev}:llmtk/text/pii.py", "exec"), mod.__dict__)
    return mod


_PLACEHOLDER = re.compile(r"<(EMAIL|PHONE|ID_NUMBER|CARD|IP)>")


def replaced_spans(scrub, text: str) -> list[tuple[str, str, str]]:
    """(kind, replaced text, context) for each replacement `scrub` makes in `text`, found
    line by line (no pattern spans a line end): the text between the placeholders is what
    stayed, so a pattern of it with one group per placeholder gives what went."""
    spans = []
    for line in text.split("\n"):
        out, _ = scrub(line)
        if out == line:
            continue
        parts = _PLACEHOLDER.split(out)  # kept, kind, kept, kind, ..., kept
        pattern = "(.+?)".join(re.escape(k) for k in parts[::2])
        m = re.fullmatch(pattern, line, re.S)
        if m is None:  # a placeholder already in the input: name the line
            spans.append(("?", line[:60], line[:120]))
            continue
        for i, kind in enumerate(parts[1::2], start=1):
            a, b = m.span(i)
            spans.append((kind, m.group(i), line[max(0, a - 40):b + 40]))
    return spans


def precision(docs: list[dict], scrubs: dict, show: int) -> None:
    """Documents and files altered, all kinds and all but e-mail (the addresses in
    copyright headers and changelogs are real people's), then each non-e-mail span now."""
    total = Counter(doc["kind"] for doc in docs)
    for label, scrub in scrubs.items():
        hit, other, kinds = Counter(), Counter(), Counter()
        for doc in docs:
            _, counts = scrub(doc["text"])
            if counts:
                hit[doc["kind"]] += 1
                kinds.update(counts)
            if set(counts) - {"EMAIL"}:
                other[doc["kind"]] += 1
        print(f"  {label:<8} altered: text {hit['text']}/{total['text']}, code "
              f"{hit['code']}/{total['code']}; by anything but e-mail: text "
              f"{other['text']}/{total['text']}, code {other['code']}/{total['code']}; "
              f"replacements {dict(sorted(kinds.items()))}")
    spans = [(doc, kind, span, ctx) for doc in docs
             for kind, span, ctx in replaced_spans(scrubs["now"], doc["text"])
             if kind != "EMAIL"]
    print(f"  now, every replacement but e-mail ({len(spans)}; read them: a real person's "
          "number in a changelog is right):")
    for doc, kind, span, ctx in spans[:show]:
        print(f"    {doc['kind']:<5}{doc['source']:<28} {kind:<6} {span!r:<30} …{ctx.strip()}…")
    if len(spans) > show:
        print(f"    ({len(spans) - show} more; --show N)")


def never(docs: list[dict], constructs: list[str], scrubs: dict, seed: int) -> None:
    sents = sentences(docs, len(constructs), seed)
    rng = random.Random(seed)
    planted = [plant(s, c, rng) for s, c in zip(sents, constructs, strict=True)]
    for label, scrub in scrubs.items():
        altered = [c for c, p in zip(constructs, planted, strict=True) if scrub(p)[0] != p]
        print(f"  {label:<8} {len(altered)}/{len(constructs)} altered  {altered}")


def recall(docs: list[dict], scrubs: dict, seed: int, per_kind: int) -> None:
    rng = random.Random(seed)
    cases = []
    for kind, make in POSITIVE.items():
        for s in sentences(docs, per_kind, seed + len(kind)):
            value = make(rng)
            cases.append((kind, value, plant(s, value, rng)))
    for label, scrub in scrubs.items():
        found, missed = Counter(), []
        for kind, value, text in cases:
            out, _ = scrub(text)
            want = "<IP>" if kind.startswith("IP") else f"<{kind}>"
            if value not in out and want in out:
                found[kind] += 1
            else:
                i = text.index(value)
                missed.append(text[max(0, i - 30):i + len(value) + 10])
        n = len(cases)
        per = " ".join(f"{k} {found[k]}/{per_kind}" for k in POSITIVE)
        print(f"  {label:<8} {sum(found.values())}/{n} = {sum(found.values()) / n:.3f}  ({per})"
              f"{'  missed: ' + repr(missed[:8]) if missed else ''}")


def speed(docs: list[dict], scrubs: dict) -> None:
    """CPU seconds of each scrub over all records, best of three (one core)."""
    import time

    mb = sum(len(d["text"].encode()) for d in docs) / 1e6
    for label, scrub in scrubs.items():
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            for d in docs:
                scrub(d["text"])
            best = min(best, time.process_time() - t)
        print(f"  {label:<8} {mb:.1f} MB in {best:.2f} s CPU = {mb / best:.1f} MB/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="corpus directory")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--before", default=BEFORE,
                    help="git revision (or a pii.py file) to compare with")
    ap.add_argument("--show", type=int, default=60, help="spans to list per half")
    ap.add_argument("--per-kind", type=int, default=200, help="recall cases per kind")
    ap.add_argument("--half", choices=["dev", "held", "fresh", "all"], default="all")
    args = ap.parse_args()
    held_ok()
    corpus = args.data / "corpus.jsonl"
    if args.rebuild or not corpus.exists():
        build(args.data)
    fresh = args.data / "fresh.jsonl"
    if args.rebuild or not fresh.exists():
        sources = {json.loads(line)["source"] for line in corpus.open()}
        with open(fresh, "w") as f:
            for r in build_fresh(args.data, sources):
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    docs, seen = [], set()
    lines = [*corpus.open(), *fresh.open()]
    for line in lines:  # a file shipped by several packages counts once
        doc = json.loads(line)
        key = hashlib.sha1(doc["text"].encode()).digest()
        if key not in seen:
            seen.add(key)
            docs.append(doc)
    scrubs = {"before": load_before(args.before).scrub, "now": pii.scrub}
    halves = ["dev", "held", "fresh"] if args.half == "all" else [args.half]
    for half in halves:
        i = ["dev", "held", "fresh"].index(half)  # each set's own seeds, whichever run
        part = [x for x in docs if x["half"] == half]
        n = Counter(x["kind"] for x in part)
        langs = Counter(x["lang"] for x in part)
        print(f"\n===== {half}: {n['text']} text documents, {n['code']} code files "
              f"({dict(sorted(langs.items()))}), {len({x['source'] for x in part})} sources")
        print(f"(a) precision on real text and code (before = {args.before})")
        precision(part, scrubs, args.show)
        print("(b) never-personal constructs planted in real sentences")
        never(part, NEVER[half], scrubs, 11 + i)
        print(f"(c) recall on planted real-shaped personal data ({args.per_kind} per kind)")
        recall(part, scrubs, 101 + i, args.per_kind)
    print("\n(d) speed over every record of the sets run")
    speed([x for x in docs if x["half"] in halves], scrubs)


if __name__ == "__main__":
    main()
