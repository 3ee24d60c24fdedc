"""`llmtk clean --profile code` on real source files from Debian packages, beside NeMo Curator.

Reproduce (after `make setup`; needs apt-get and the network once, for the packages):

    .venv/bin/python benchmarks/code_quality.py              # builds, then measures
    .venv/bin/python benchmarks/code_quality.py --no-nemo    # llmtk only

The corpus (benchmarks/out/code-quality.jsonl, rebuilt when missing) holds, as records of
{"path", "text", "truth": {...}}:
  - hand-written code, up to --per-lang files of 500 B .. 200 kB per language: Python (the
    standard library, python3-protobuf, devscripts), C (curl's examples, libevent, libuv,
    SQLite headers, Go's cgo runtime), JavaScript (lodash, acorn, jQuery UI, underscore),
    Go (the Go 1.19 standard library), Rust (syn, regex, serde, libc), shell (bash-completion,
    Go's *.bash scripts, devscripts), Perl (devscripts);
  - junk from the same packages: generated code (protobuf *_pb2.py and *.pb.go, Go files
    with Go's own "Code generated ... DO NOT EDIT." line, syn's generated sources),
    minified JavaScript and CSS (*.min.js, *.min.css), data (lock files, source maps, JSON,
    CSV/TSV and .dat test data, Go's base64 test files) and blobs (real binaries of the same
    packages, base64-encoded into a source file as tests embed them);
  - hand-written files with one planted secret each (every kind of the issue, fresh random
    values), and hand-written files with planted look-alikes (SHA-1/SHA-256 digests, UUIDs,
    git commit ids, base64 test vectors, example and template URLs).
Generated and minified files are judged twice: with their real path, and with a neutral
name of the same extension (the content rules alone).

Second peer, for secrets: detect-secrets 1.5.0 (benchmarks/.venvs/detect-secrets, default
plugins) on the planted-secret and look-alike files, each reported secret replaced in its
line, timed on one core.

Peer: NeMo Curator 1.4.0's code filters (AlphaFilter, the comment-ratio filters,
PerExtensionFilter with its own per-extension table, NumberOfLinesOfCodeFilter and
XMLHeaderFilter, settings of its code_filter_pipeline.yaml) in benchmarks/.venvs/nemo, given
each file's true language, timed on one core in the same run as llmtk.
"""

import argparse
import base64
import hashlib
import json
import random
import re
import string
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
DEBS = OUT / "debs"
CORPUS = OUT / "code-quality.jsonl"
NEMO_VENV = ROOT / "benchmarks" / ".venvs" / "nemo"
# NeMo Curator's own requirements pull torch and a cluster stack; its code filters need
# only these (installed with --no-deps first, then these with theirs).
NEMO_PACKAGES_NODEPS = ["nemo-curator==1.4.0", "cosmos-xenna==0.2.0"]
NEMO_PACKAGES = ["comment_parser", "beautifulsoup4", "sentencepiece", "regex", "protobuf",
                 "ray", "rpds-py", "pandas", "numpy", "pyarrow", "loguru", "pyyaml"]

DS_VENV = ROOT / "benchmarks" / ".venvs" / "detect-secrets"

PACKAGES = ["libpython3.11-stdlib", "python3-protobuf", "devscripts", "libcurl4-doc",
            "libevent-dev", "libuv1-dev", "libsqlite3-dev", "node-lodash", "node-acorn",
            "libjs-jquery-ui", "libjs-underscore", "libjs-jquery", "libjs-bootstrap4",
            "golang-1.19-src", "golang-google-protobuf-dev", "librust-syn-dev",
            "librust-regex-dev", "librust-serde-dev", "librust-libc-dev", "bash-completion"]

GO_GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.M)  # Go's convention


def _files(pkg: str, pattern: str) -> list[Path]:
    return sorted(p for p in (DEBS / f"x_{pkg}").rglob(pattern) if p.is_file()
                  and not p.is_symlink())


def _text(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _rel(p: Path) -> str:
    """The path inside the package (what a crawl of the project would record)."""
    parts = p.relative_to(DEBS).parts
    return "/".join(parts[1:])


def handwritten(rng: random.Random, per_lang: int) -> dict[str, list[tuple[str, str]]]:
    """{language: [(path, text)]} of hand-written files: generated, test-data and vendored
    paths left out by what the packages say of them (names, directories, Go's marker)."""
    pools: dict[str, list[Path]] = {
        "python": _files("libpython3.11-stdlib", "*.py") + _files("python3-protobuf", "*.py")
        + _files("devscripts", "*.py"),
        "c": _files("libcurl4-doc", "*.c") + _files("libevent-dev", "*.h")
        + _files("libuv1-dev", "*.h") + _files("libsqlite3-dev", "*.h")
        + [p for p in _files("golang-1.19-src", "*.c") if "/testdata/" not in str(p)],
        "javascript": [p for p in _files("node-lodash", "*.js") + _files("node-acorn", "*.js")
                       + _files("libjs-jquery-ui", "*.js") + _files("libjs-underscore", "*.js")
                       if ".min." not in p.name and "-min." not in p.name],
        "go": [p for p in _files("golang-1.19-src", "*.go") if "/testdata/" not in str(p)
               and "/vendor/" not in str(p) and not p.name.startswith("z")],
        "rust": _files("librust-syn-dev", "*.rs") + _files("librust-regex-dev", "*.rs")
        + _files("librust-serde-dev", "*.rs") + _files("librust-libc-dev", "*.rs"),
        "shell": _files("bash-completion", "*") + _files("golang-1.19-src", "*.bash")
        + [p for p in _files("devscripts", "*") if p.suffix in ("", ".sh")],
        "perl": _files("devscripts", "*.pm"),
    }
    out = {}
    for lang, paths in pools.items():
        items = []
        for p in paths:
            text = _text(p)
            if text is None or not 500 <= len(text.encode()) <= 200_000:
                continue
            if "/gen/" in str(p) or p.name.endswith("_pb2.py") or GO_GENERATED.search(text):
                continue
            if lang == "shell" and p.parent.name not in ("completions",) and p.suffix != ".bash" \
                    and not re.match(r"#!\s*/(usr/)?bin/(env )?(ba)?sh\b", text):
                continue
            items.append((_rel(p), text))
        rng.shuffle(items)
        out[lang] = sorted(items[:per_lang])
    return out


def junk(rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    gen, mini, data = [], [], []
    for pkg, pat in (("python3-protobuf", "*_pb2.py"), ("golang-google-protobuf-dev", "*.pb.go"),
                     ("golang-1.19-src", "*.go"), ("librust-syn-dev", "*.rs")):
        for p in _files(pkg, pat):
            text = _text(p)
            if text is None or len(text) < 500:
                continue
            if pkg == "golang-1.19-src" and not GO_GENERATED.search(text):
                continue
            if pkg == "librust-syn-dev" and "/gen/" not in str(p):
                continue
            gen.append((_rel(p), text))
    for pkg in ("libjs-jquery", "libjs-underscore", "libjs-bootstrap4", "libjs-jquery-ui",
                "node-lodash", "node-acorn"):
        for pat in ("*.min.js", "*-min.js", "*.min.css"):
            for p in _files(pkg, pat):
                text = _text(p)
                if text is not None and len(text) >= 500:
                    mini.append((_rel(p), text))
    lock_names = ("go.sum", "package-lock.json", "npm-shrinkwrap.json", "Cargo.lock", "yarn.lock")
    for pkg in PACKAGES:
        for p in _files(pkg, "*"):
            if p.name in lock_names or (p.suffix in (".map", ".base64", ".dat", ".csv", ".tsv")
                                        or (p.suffix == ".json" and p.stat().st_size > 5000)):
                text = _text(p)
                if text is not None and len(text) >= 200:
                    data.append((_rel(p), text))
    # blobs: real binaries of these packages, base64 in a source file as a test embeds one
    binaries = [p for pkg in ("libpython3.11-stdlib", "golang-1.19-src", "libjs-jquery-ui")
                for pat in ("*.so", "*.png", "*.gz", "*.zip") for p in _files(pkg, pat)]
    rng.shuffle(binaries)
    blobs = []
    for i, p in enumerate(sorted(binaries[:40])):
        raw = p.read_bytes()[: rng.randrange(3_000, 30_000)]
        b64 = base64.encodebytes(raw).decode()
        if i % 2:
            text = f'"""Test fixture: {p.name}."""\nimport base64\n\nDATA = base64.b64decode(' \
                   f'"""\n{b64}""")\n\n\ndef load():\n    return DATA\n'
            blobs.append((f"tests/fixtures/{p.stem}_data.py", text))
        else:
            body = "\\n\" +\n  \"".join(b64.strip().split("\n"))
            text = f"// {p.name}, embedded\nexport const data = \"{body}\";\n"
            blobs.append((f"src/assets/{p.stem}.js", text))
    rng.shuffle(gen)
    rng.shuffle(data)
    return {"generated": sorted(gen[:200]), "minified": sorted(mini),
            "data": sorted(data[:150]), "blob": blobs}


# -- planted secrets and look-alikes --------------------------------------------------------

def _r(rng, n, alphabet=string.ascii_letters + string.digits):
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def secret(kind: str, rng: random.Random) -> tuple[str, list[str]]:
    """(value to plant, the parts that must not survive)."""
    up = string.ascii_uppercase + string.digits
    if kind.startswith("PRIVATE_KEY"):
        label = rng.choice(["RSA ", "EC ", "", "OPENSSH ", "ENCRYPTED "])
        body = base64.encodebytes(bytes(rng.randrange(256) for _ in range(rng.choice(
            [121, 600, 1190])))).decode().strip().split("\n")
        block = [f"-----BEGIN {label}PRIVATE KEY-----", *body, f"-----END {label}PRIVATE KEY-----"]
        sep = "\\n" if kind == "PRIVATE_KEY_ESCAPED" else "\n"
        return sep.join(block) + sep, body
    value = {
        "AWS_KEY_ID": lambda: "AKIA" + _r(rng, 16, up),
        "AWS_SECRET": lambda: _r(rng, 40, string.ascii_letters + string.digits + "/+"),
        "GCP_KEY": lambda: "AIza" + _r(rng, 35, string.ascii_letters + string.digits + "_-"),
        "GITHUB_TOKEN": lambda: rng.choice(["ghp_", "gho_", "ghs_"]) + _r(rng, 36),
        "GITHUB_PAT": lambda: "github_pat_" + _r(rng, 22) + "_" + _r(rng, 59),
        "SLACK_TOKEN": lambda: f"xoxb-{_r(rng, 11, string.digits)}-{_r(rng, 12, string.digits)}"
                               f"-{_r(rng, 24)}",
        "SLACK_WEBHOOK": lambda: f"https://hooks.slack.com/services/T{_r(rng, 8, up)}/"
                                 f"B{_r(rng, 8, up)}/{_r(rng, 24)}",
        "STRIPE_KEY": lambda: rng.choice(["sk_live_", "sk_test_", "rk_live_"]) + _r(rng, 24),
        "OPENAI_KEY": lambda: rng.choice([
            "sk-" + _r(rng, 20) + "T3BlbkFJ" + _r(rng, 20),
            "sk-proj-" + _r(rng, 64, string.ascii_letters + string.digits + "_-") + "T3BlbkFJ"
            + _r(rng, 64, string.ascii_letters + string.digits + "_-")]),
        "HF_TOKEN": lambda: "hf_" + _r(rng, 34),
        "JWT": lambda: ".".join([
            _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()),
            _b64url(json.dumps({"sub": _r(rng, 8, string.digits), "name": _r(rng, 6),
                                "iat": rng.randrange(10**9, 2 * 10**9)}).encode()),
            _b64url(bytes(rng.randrange(256) for _ in range(32)))]),
        "URL_PASSWORD": lambda: _r(rng, rng.randrange(8, 20), string.ascii_letters
                                   + string.digits + "!_.~-"),
        "CONN_PASSWORD": lambda: _r(rng, rng.randrange(8, 20), string.ascii_letters
                                    + string.digits + "!_.#"),
    }[kind]()
    if kind == "SLACK_WEBHOOK":
        return value, [value.split("/services/")[1]]
    return value, [value]


SECRET_KINDS = ["PRIVATE_KEY", "PRIVATE_KEY_ESCAPED", "AWS_KEY_ID", "AWS_SECRET", "GCP_KEY",
                "GITHUB_TOKEN", "GITHUB_PAT", "SLACK_TOKEN", "SLACK_WEBHOOK", "STRIPE_KEY",
                "OPENAI_KEY", "HF_TOKEN", "JWT", "URL_PASSWORD", "CONN_PASSWORD"]


def assignment(lang: str, name: str, value: str, multiline: bool = False) -> str:
    """One line (or block) of `lang` that gives `value` to `name`."""
    if multiline and lang == "python":
        return f'{name.upper()} = """{value}"""'
    if multiline:
        value = value.replace("\n", "\\n")
    return {
        "python": f'{name.upper()} = "{value}"',
        "c": f'static const char *{name} = "{value}";',
        "javascript": f'const {name} = "{value}";',
        "go": f'const {name} = "{value}"',
        "rust": f'const {name.upper()}: &str = "{value}";',
        "shell": f'{name.upper()}="{value}"',
        "perl": f'my ${name} = "{value}";',
    }[lang]


def plant(text: str, lines_to_add: list[str], rng: random.Random) -> str:
    lines = text.split("\n")
    at = rng.randrange(len(lines) // 3, max(len(lines) // 3 + 1, 2 * len(lines) // 3))
    return "\n".join(lines[:at] + lines_to_add + lines[at:])


def planted_secret(kind, lang, text, rng) -> tuple[str, list[str]]:
    value, must_go = secret(kind, rng)
    if kind in ("PRIVATE_KEY", "PRIVATE_KEY_ESCAPED"):
        line = assignment(lang, "signing_key", value, multiline=kind == "PRIVATE_KEY")
    elif kind == "AWS_SECRET":
        line = assignment(lang, "aws_secret_access_key", value)
    elif kind == "URL_PASSWORD":
        user = _r(rng, 6, string.ascii_lowercase)
        host = rng.choice(["db.internal", "10.0.3.7", "redis.prod.example.net", "mq"])
        scheme = rng.choice(["postgres", "mysql", "redis", "amqp", "https", "mongodb+srv"])
        line = assignment(lang, "database_url", f"{scheme}://{user}:{value}@{host}:5432/app")
    elif kind == "CONN_PASSWORD":
        line = assignment(lang, "conn_str", rng.choice([
            f"Server=sql01;Database=orders;User Id=svc;Password={value};",
            f"host=localhost port=5432 dbname=app user=app password={value}",
            f"Data Source=db;Initial Catalog=x;uid=sa;pwd={value}"]))
    else:
        line = assignment(lang, kind.lower(), value)
    return plant(text, [line], rng), must_go


def lookalikes(lang: str, rng: random.Random) -> list[str]:
    raw = bytes(rng.randrange(256) for _ in range(rng.choice([16, 32, 48])))
    values = {
        "sha256": hashlib.sha256(raw).hexdigest(),
        "sha1": hashlib.sha1(raw).hexdigest(),
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "commit": hashlib.sha1(raw[::-1]).hexdigest(),
        "short_commit": hashlib.sha1(raw[1:]).hexdigest()[:12],
        "b64_vector": base64.b64encode(raw).decode(),
        "url": rng.choice(["https://example.com/api/v1/items?id=42",
                           "http://localhost:8080/health", "https://user@example.org/repo.git",
                           "postgres://localhost:5432/testdb",
                           "https://${USER}:${PASSWORD}@example.com/",
                           "mysql://%s:%s@%s/%s", "ftp://anonymous@ftp.example.org/pub/"]),
    }
    chosen = rng.sample(sorted(values), 4)
    return [assignment(lang, f"{k}_value", values[k]) for k in chosen], [values[k]
                                                                        for k in chosen]


def build(per_lang: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    debian_packages(DEBS, PACKAGES)
    records = []
    hand = handwritten(rng, per_lang)
    for lang, items in hand.items():
        for path, text in items:
            records.append({"path": path, "text": text, "truth": {"class": "code", "lang": lang}})
    for cls, items in junk(rng).items():
        for path, text in items:
            records.append({"path": path, "text": text, "truth": {"class": cls}})
            if cls in ("generated", "minified"):
                ext = path.rsplit(".", 1)[-1]
                records.append({"path": f"src/file{len(records)}.{ext}", "text": text,
                                "truth": {"class": cls + "_unnamed"}})
    langs = sorted(hand)
    for i, kind in enumerate(SECRET_KINDS * 12):
        lang = langs[i % len(langs)]
        path, text = hand[lang][rng.randrange(len(hand[lang]))]
        text, must_go = planted_secret(kind, lang, text, rng)
        records.append({"path": path, "text": text,
                        "truth": {"class": "secret", "kind": kind, "must_go": must_go}})
    for i in range(300):
        lang = langs[i % len(langs)]
        path, text = hand[lang][rng.randrange(len(hand[lang]))]
        lines, values = lookalikes(lang, rng)
        records.append({"path": path, "text": plant(text, lines, rng),
                        "truth": {"class": "lookalike", "keep": values}})
    return records


# -- measuring ------------------------------------------------------------------------------

def run_llmtk(records: list[dict]) -> tuple[list[tuple[str | None, str]], float]:
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.io import Doc

    cfg = CleanConfig().with_values({"code.profile": "code"})
    cleaner = Cleaner(cfg)
    cleaner.load()
    docs = [Doc({"path": r["path"], "text": r["text"]}, None, "bench", i + 1, i)
            for i, r in enumerate(records)]
    start = time.process_time()
    out = [(cleaner(d), d.text) for d in docs]
    return out, time.process_time() - start


NEMO_SCRIPT = r"""
import json, sys, time, os, warnings
warnings.filterwarnings("ignore")
from nemo_curator.stages.text.filters.heuristic.code import (AlphaFilter,
    GeneralCommentToCodeFilter, NumberOfLinesOfCodeFilter, PerExtensionFilter,
    PythonCommentToCodeFilter, XMLHeaderFilter)
import nemo_curator
meta = os.path.join(os.path.dirname(nemo_curator.__file__), "utils", "code_meta.csv")
MIME = {"c": "text/x-c", "javascript": "application/javascript", "go": "text/x-go",
        "rust": "text/x-c", "shell": "text/x-shellscript", "perl": "text/x-shellscript"}
EXT_LANG = {"py": "python", "c": "c", "h": "c", "js": "javascript", "mjs": "javascript",
            "go": "go", "rs": "rust", "sh": "shell", "bash": "shell", "pm": "perl",
            "css": "css", "json": "json"}
recs = [json.loads(l) for l in open(sys.argv[1])]
alpha, lines, xml = AlphaFilter(), NumberOfLinesOfCodeFilter(5, 20000), XMLHeaderFilter()
pycom = PythonCommentToCodeFilter(0.001, 0.85)
com = {}; ext_f = {}
out = []
start = time.process_time()
for r in recs:
    text, path = r["text"], r["path"]
    base = path.rsplit("/", 1)[-1]
    ext = base.rsplit(".", 1)[-1] if "." in base else ""
    lang = r.get("lang") or EXT_LANG.get(ext, "")
    keep = alpha.keep_document(alpha.score_document(text))
    keep = keep and lines.keep_document(lines.score_document(text))
    keep = keep and xml.keep_document(xml.score_document(text))
    if keep and lang == "python":
        keep = pycom.keep_document(pycom.score_document(text))
    elif keep and lang in MIME:
        f = com.setdefault(lang, GeneralCommentToCodeFilter(MIME[lang], 0.01, 0.85))
        keep = f.keep_document(f.score_document(text))
    if keep and lang:
        key = (lang, ext)
        try:
            f = ext_f.setdefault(key, PerExtensionFilter(lang, ext, metadata_file=meta))
            keep = f.keep_document(f.score_document(text))
        except ValueError:
            pass
    out.append(bool(keep))
print(json.dumps({"keep": out, "cpu": time.process_time() - start}))
"""


def nemo_python() -> Path:
    python = NEMO_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(NEMO_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                        *NEMO_PACKAGES_NODEPS], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *NEMO_PACKAGES], check=True)
    return python


def run_nemo(records: list[dict]) -> tuple[list[bool], float]:
    path = OUT / "code-quality-nemo.jsonl"
    with open(path, "w") as f:
        for r in records:
            lang = r["truth"].get("lang", "")
            f.write(json.dumps({"path": r["path"], "text": r["text"], "lang": lang}) + "\n")
    script = OUT / "_nemo_code.py"
    script.write_text(NEMO_SCRIPT)
    res = subprocess.run([str(nemo_python()), str(script), str(path)], check=True,
                         capture_output=True, text=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return got["keep"], got["cpu"]


DS_SCRIPT = r"""
import json, os, sys, tempfile, time
from detect_secrets.core.secrets_collection import SecretsCollection
from detect_secrets.settings import default_settings
recs = [json.loads(l) for l in open(sys.argv[1])]
out, cpu = [], 0.0
with tempfile.TemporaryDirectory() as tmp, default_settings():
    for i, r in enumerate(recs):
        ext = r["path"].rsplit(".", 1)[-1] if "." in r["path"].rsplit("/", 1)[-1] else "txt"
        path = os.path.join(tmp, f"f{i}.{ext}")
        with open(path, "w") as f:
            f.write(r["text"])
        start = time.process_time()
        found = SecretsCollection()
        found.scan_file(path)
        lines = r["text"].split("\n")
        for _, secret in found:
            n = secret.line_number - 1
            if secret.secret_value and 0 <= n < len(lines):
                lines[n] = lines[n].replace(secret.secret_value, "<SECRET>")
        cpu += time.process_time() - start
        out.append("\n".join(lines))
print(json.dumps({"texts": out, "cpu": cpu}))
"""


def run_detect_secrets(records: list[dict]) -> tuple[list[str], float]:
    """detect-secrets 1.5.0 (its default plugins) on each file, every reported secret
    replaced in its line: (texts, CPU seconds)."""
    python = DS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "detect-secrets==1.5.0"],
                       check=True)
    path = OUT / "code-quality-ds.jsonl"
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps({"path": r["path"], "text": r["text"]}) + "\n")
    script = OUT / "_detect_secrets.py"
    script.write_text(DS_SCRIPT)
    res = subprocess.run([str(python), str(script), str(path)], check=True,
                         capture_output=True, text=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return got["texts"], got["cpu"]


def report_detect_secrets(records: list[dict]) -> None:
    chosen = [r for r in records if r["truth"]["class"] in ("secret", "lookalike")]
    texts, cpu = run_detect_secrets(chosen)
    per_kind: dict[str, list[bool]] = defaultdict(list)
    altered = 0
    looks = 0
    for r, text in zip(chosen, texts, strict=True):
        t = r["truth"]
        if t["class"] == "secret":
            per_kind[t["kind"]].append(not any(x in text for x in t["must_go"]))
        else:
            looks += 1
            altered += not all(v in text for v in t["keep"])
    total = sum(sum(v) for v in per_kind.values())
    n = sum(len(v) for v in per_kind.values())
    mb = sum(len(r["text"].encode()) for r in chosen) / 1e6
    print("\n== detect-secrets 1.5.0 on the same files (reported secrets replaced) ==")
    print("  " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(per_kind.items())))
    print(f"  planted secrets scrubbed: {total}/{n} = {total / n:.3f}; look-alike files "
          f"altered: {altered}/{looks} = {altered / max(looks, 1):.3f}; "
          f"{mb / cpu:.2f} MB/s ({mb:.1f} MB, one core)")


def report(records, results, nemo_keep, llmtk_cpu, nemo_cpu) -> None:
    by_class: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        t = r["truth"]
        key = f"code.{t['lang']}" if t["class"] == "code" else t["class"]
        by_class[key].append(i)
    print("\n== kept share of hand-written code / dropped share of junk ==")
    print(f"{'class':<22}{'files':>7}{'llmtk':>9}{'NeMo':>9}   llmtk reasons")
    for key in sorted(by_class):
        idx = by_class[key]
        if key in ("secret", "lookalike"):
            continue
        want_keep = key.startswith("code.")
        ours = sum((results[i][0] is None) == want_keep for i in idx) / len(idx)
        theirs = (sum(nemo_keep[i] == want_keep for i in idx) / len(idx)) if nemo_keep else None
        reasons = Counter(results[i][0] for i in idx if results[i][0] is not None)
        what = "kept" if want_keep else "dropped"
        nemo = f"{theirs:>9.3f}" if theirs is not None else f"{'-':>9}"
        print(f"{key + ' ' + what:<22}{len(idx):>7}{ours:>9.3f}{nemo}   "
              f"{dict(reasons.most_common(4))}")
    print("\n== hand-written files llmtk drops ==")
    for key in sorted(k for k in by_class if k.startswith("code.")):
        for i in by_class[key]:
            if results[i][0] is not None:
                print(f"  {key:<16}{results[i][0]:<24}{records[i]['path']}")

    print("\n== planted secrets ==")
    from llmtk.text.pii import scrub
    from llmtk.text.secrets import scrub_secrets

    per_kind: dict[str, list[bool]] = defaultdict(list)
    dropped = 0
    for i in by_class["secret"]:
        t = records[i]["truth"]
        reason, text = results[i]
        if reason is not None:
            # a rule dropped the file (a planted key on one escaped line is a long line):
            # judge what the scrubbers alone make of it
            dropped += 1
            text = scrub(scrub_secrets(records[i]["text"])[0])[0]
        per_kind[t["kind"]].append(not any(s in text for s in t["must_go"]))
    total = sum(sum(v) for v in per_kind.values())
    n = sum(len(v) for v in per_kind.values())
    for kind, v in sorted(per_kind.items()):
        print(f"  {kind:<22}{sum(v):>4}/{len(v):<4}")
    print(f"  all: {total}/{n} = {total / n:.3f} scrubbed ({dropped} of the files were dropped "
          f"by a code rule; their text is judged as the scrubbers leave it)")

    idx = by_class["lookalike"]
    kept = [i for i in idx if results[i][0] is None]
    altered = [i for i in kept if not all(v in results[i][1] for v in
                                         records[i]["truth"]["keep"])]
    print(f"\n== look-alikes ==\n  files {len(idx)}, kept {len(kept)}, with a planted "
          f"look-alike altered: {len(altered)} = {len(altered) / max(len(kept), 1):.3f}")
    for i in altered[:5]:
        print("   ", records[i]["path"], [v for v in records[i]["truth"]["keep"]
                                          if v not in results[i][1]])

    mb = sum(len(r["text"].encode()) for r in records) / 1e6
    print(f"\n== speed, one core, {len(records)} files, {mb:.1f} MB ==")
    print(f"  llmtk clean --profile code (secrets + PII on): {llmtk_cpu:.2f} s CPU = "
          f"{mb / llmtk_cpu:.2f} MB/s")
    if nemo_cpu:
        print(f"  NeMo Curator 1.4.0 code filters (no scrubbing):  {nemo_cpu:.2f} s CPU = "
              f"{mb / nemo_cpu:.2f} MB/s")
        print(f"  ratio llmtk / NeMo: {nemo_cpu / llmtk_cpu:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-lang", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--no-nemo", action="store_true")
    ap.add_argument("--no-detect-secrets", action="store_true")
    args = ap.parse_args()
    if args.rebuild or not CORPUS.exists():
        records = build(args.per_lang, args.seed)
        OUT.mkdir(parents=True, exist_ok=True)
        with open(CORPUS, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    records = [json.loads(x) for x in open(CORPUS)]
    results, cpu = run_llmtk(records)
    nemo_keep, nemo_cpu = (None, None) if args.no_nemo else run_nemo(records)
    report(records, results, nemo_keep, cpu, nemo_cpu)
    if not args.no_detect_secrets:
        report_detect_secrets(records)


if __name__ == "__main__":
    main()
