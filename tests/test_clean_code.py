"""`llmtk clean --profile code|auto` and secret scrubbing, on real files (tests/data/code,
the Python standard library's own sources) and on secrets of every kind the rules know."""

import base64
import colorsys
import hashlib
import json
import random
import textwrap
import uuid
import zlib
from pathlib import Path

import pytest

from llmtk.text.secrets import _keywords, kinds, present_keywords, scrub_secrets
from tests.util import llmtk

DATA = Path(__file__).parent / "data" / "code"


def jsonl(records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def run(records, *args) -> tuple[list[dict], list[dict], dict]:
    """(written records, rejected records, stats) of `llmtk clean --profile code ARGS`."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rejects, stats = Path(tmp) / "rejects.jsonl", Path(tmp) / "stats.json"
        out = llmtk("clean", "--profile", "code", "--annotate", "--rejects", rejects,
                    "--stats", stats, *args, input=jsonl(records), check=True)
        kept = [json.loads(x) for x in out.stdout.decode().splitlines()]
        dropped = [json.loads(x) for x in rejects.read_text().splitlines()]
        return kept, dropped, json.loads(stats.read_text())


def real(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_hand_written_python_c_and_javascript_are_kept_byte_for_byte():
    records = [
        {"path": "Lib/colorsys.py", "text": Path(colorsys.__file__).read_text()},
        {"path": "docs/examples/parseurl.c", "text": real("parseurl.c")},
        {"path": "lodash/chunk.js", "text": real("chunk.js")},
        {"path": "bin/wrap", "text": "#!/usr/bin/env python3\n" + Path(textwrap.__file__)
         .read_text()},  # no extension: the #! line names the language
    ]
    kept, dropped, stats = run(records, "--no-pii")  # curl's header has an e-mail address
    assert dropped == []
    assert [r["text"] for r in kept] == [r["text"] for r in records]
    assert [r["llmtk"]["code_lang"] for r in kept] == ["python", "c", "javascript", "python"]
    assert stats["counts"]["code_lang.python"] == 2


def test_junk_is_dropped_with_its_reason():
    blob = base64.encodebytes(zlib.compress(Path(textwrap.__file__).read_bytes())).decode()
    records = [
        {"path": "jquery-ui/widgets/mouse.min.js", "text": real("mouse.min.js")},
        # the same bundle under a neutral name: its one 3,600-character line gives it away
        {"path": "static/app.js", "text": real("mouse.min.js")},
        {"path": "google/protobuf/empty_pb2.py", "text": real("empty_pb2.py.txt")},
        {"path": "proto/messages.py", "text": real("empty_pb2.py.txt")},  # its header says so
        {"path": "src/go.sum", "text": real("go.sum")},
        {"path": "tests/fixture.py", "text": f'DATA = """\n{blob}"""\n\nprint(len(DATA))\n'},
    ]
    kept, dropped, _ = run(records)
    assert kept == []
    assert [r["llmtk"]["reason"] for r in dropped] == [
        "code.minified", "code.minified", "code.generated", "code.generated",
        "code.lock_file", "code.encoded_data"]


def test_language_from_the_lang_field_then_path_then_shebang():
    text = "# hand-written\n" + "\n".join(f"x{i} = {i} + y" for i in range(20)) + "\n"
    records = [
        {"lang": "Shell", "path": "a.py", "text": text},    # the field wins over the path
        {"path": "lib/Makefile", "text": text},             # a file name
        {"path": "tool", "text": "#!/bin/sh\n" + text},     # a #! line
        {"path": "notes", "text": text},                    # nothing: the [default] rules
    ]
    kept, _, _ = run(records)
    assert [r["llmtk"]["code_lang"] for r in kept] == ["shell", "makefile", "shell", "unknown"]


def test_auto_profile_judges_code_as_code_and_prose_as_prose():
    code = {"path": "colorsys.py", "text": Path(colorsys.__file__).read_text()}
    prose = {"text": "Too short to be a document."}
    out = llmtk("clean", "--profile", "auto", "--no-langid", "--annotate",
                input=jsonl([code, prose]),
                check=True)
    kept = [json.loads(x) for x in out.stdout.decode().splitlines()]
    assert [r["llmtk"].get("code_lang") for r in kept] == ["python"]
    # the same source file as web text is judged by the prose rules, which drop it
    web = llmtk("clean", "--no-langid", input=jsonl([code]), check=True)
    assert web.stdout == b""


def _key_block(newline: str) -> tuple[str, list[str]]:
    body = base64.encodebytes(hashlib.sha512(b"k").digest() * 4).decode().strip().split("\n")
    lines = ["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"]
    return newline.join(lines), body


def _jwt() -> str:
    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    sig = base64.urlsafe_b64encode(hashlib.sha256(b"s").digest()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': '1234567890'})}.{sig}"


_R = "Qw8Er2Ty6Ui4Op0As3Df5Gh7Jk9Lz1Xc4Vb6Nm8Qw2Er4Ty6Ui8Op0As2Df4Gh6Jk8Lz0"  # random-looking

# (kind, a line of code holding one secret, the part that must go)
SECRETS = [
    ("AWS_KEY", 'aws_access_key_id = "AKIAQ3EGRTJ7WXZ6NF5B"', "AKIAQ3EGRTJ7WXZ6NF5B"),
    ("AWS_KEY", 'AWS_SECRET_ACCESS_KEY: &str = "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";',
     "q8Zp/3kLw+e4rT9yUo2iS7dF6gH1jK0lM5nB4vC3"),
    ("GCP_KEY", 'key = "AIzaSyD3x9Kq7Lm2Np8Rt5Vw1Yz4Bc6Df0Gh2Jk"',
     "AIzaSyD3x9Kq7Lm2Np8Rt5Vw1Yz4Bc6Df0Gh2Jk"),
    ("GITHUB_TOKEN", "token: ghp_R7tY2uI9oP4aS6dF1gH3jK8lZ5xC0vB7nM2q",
     "ghp_R7tY2uI9oP4aS6dF1gH3jK8lZ5xC0vB7nM2q"),
    ("GITLAB_TOKEN", "CI_TOKEN=glpat-x7Yq2Lm9Np4Rt8Vw1Zb3", "glpat-x7Yq2Lm9Np4Rt8Vw1Zb3"),
    ("SLACK_TOKEN", "SLACK=xoxb-48213907651-71029384756-Qw8Er2Ty6Ui4Op0As3Df5Gh7",
     "xoxb-48213907651-71029384756-Qw8Er2Ty6Ui4Op0As3Df5Gh7"),
    ("SLACK_TOKEN",
     "url = 'https://hooks.slack.com/services/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'",
     "T04K8M2QZ/B06J3N7RX/pL9kQ2wE5rT8yU1iO4aS7dF0"),
    ("STRIPE_KEY", "stripe.api_key = 'sk_live_51Hx7Qk2Lm9Np4Rt8Vw1Zb3Yc'",
     "sk_live_51Hx7Qk2Lm9Np4Rt8Vw1Zb3Yc"),
    ("OPENAI_KEY", "OPENAI_API_KEY=sk-Qw8Er2Ty6Ui4Op0As3DfT3BlbkFJ5Gh7Jk9Lz1Xc4Vb6Nm8",
     "sk-Qw8Er2Ty6Ui4Op0As3DfT3BlbkFJ5Gh7Jk9Lz1Xc4Vb6Nm8"),
    ("ANTHROPIC_KEY", "key = 'sk-ant-api03-" + "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz0" * 4 + "'",
     "sk-ant-api03-" + "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz0" * 4),
    ("HF_TOKEN", f"HF_TOKEN = 'hf_{_R[:34]}'", f"hf_{_R[:34]}"),
    ("NPM_TOKEN", f"//registry.npmjs.org/:_authToken=npm_{_R[:36]}", f"npm_{_R[:36]}"),
    ("SENDGRID_KEY", f"key = 'SG.{_R[:22]}.{_R[5:48]}'", f"SG.{_R[:22]}.{_R[5:48]}"),
    ("JWT", f"Authorization: Bearer {_jwt()}", _jwt()),
    ("PASSWORD", "DATABASE_URL = 'postgres://app:Zq7!rT2pLw9x@db.internal:5432/app'",
     "Zq7!rT2pLw9x"),
    ("PASSWORD", 'conn = "Server=sql01;Database=orders;User Id=svc;Password=Xy7kq9Lp2;"',
     "Xy7kq9Lp2"),
    ("PASSWORD", 'dsn = "host=localhost dbname=test user=bob password=hunter2x"', "hunter2x"),
]


@pytest.mark.parametrize("kind, line, secret", SECRETS, ids=[f"{k}-{i}" for i, (k, _, _)
                                                             in enumerate(SECRETS)])
def test_each_secret_kind_is_replaced_by_its_placeholder(kind, line, secret):
    text, counts = scrub_secrets(f"import os\n{line}\nprint(os.name)\n")
    assert secret not in text
    assert f"<{kind}>" in text
    assert counts == {kind: 1}
    assert text.startswith("import os\n") and text.endswith("\nprint(os.name)\n")


def test_only_the_kinds_asked_for_are_scrubbed():
    both = SECRETS[0][1] + "\n" + SECRETS[3][1] + "\n"  # an AWS key, a GitHub token
    text, counts = scrub_secrets(both, frozenset({"AWS_KEY"}))
    assert counts == {"AWS_KEY": 1}
    assert SECRETS[0][2] not in text and SECRETS[3][2] in text


def test_keyword_prefilter_finds_exactly_the_keywords_in_a_text():
    # present_keywords' one-regex scan must give the set that an `in` test per keyword
    # gives: whole keywords, pieces of them, at either end, next to each other.
    rng = random.Random(5)
    alphabet = "abcdeKSPWYz0123456789_-=.:/ \n'\""
    for only in (None, frozenset({"AWS_KEY"}), frozenset({"PASSWORD", "SLACK_TOKEN"})):
        keywords = _keywords(only)
        for _ in range(3000):
            parts = []
            for _ in range(rng.randrange(1, 5)):
                k = rng.choice(keywords)
                a = rng.randrange(len(k))
                parts.append(rng.choice([k, k[a:], k[:a], "".join(
                    rng.choice(alphabet) for _ in range(rng.randrange(6)))]))
            text = "".join(parts)
            assert present_keywords(text, only) == {k for k in keywords if k in text}, text
    assert present_keywords("") == set()


@pytest.mark.parametrize("newline", ["\n", "\\n"], ids=["lines", "escaped"])
def test_a_private_key_goes_as_a_whole_block(newline):
    block, body = _key_block(newline)
    text, counts = scrub_secrets(f'KEY = "{block}"\nrest = 1\n')
    assert text == 'KEY = "<PRIVATE_KEY>"\nrest = 1\n'
    assert counts == {"PRIVATE_KEY": 1}
    # a block cut off before its END line still loses its body
    cut = newline.join(block.split(newline)[:-2])
    text, _ = scrub_secrets(cut + "\n\nThe key above is truncated.\n")
    assert not any(line in text for line in body)
    assert text.endswith("The key above is truncated.\n")


def test_look_alikes_and_templates_are_left_alone():
    text = "\n".join([
        f'SHA256 = "{hashlib.sha256(b"x").hexdigest()}"',
        f'SHA1 = "{hashlib.sha1(b"x").hexdigest()}"',
        f'ID = "{uuid.UUID(int=7, version=4)}"',
        "Fixes: 3f786850e387550fdab836ed7e6dc881de23001b",
        f'VECTOR = "{base64.b64encode(bytes(range(48))).decode()}"',
        "see https://example.com/api?id=42 and https://user@example.org/repo.git",
        'url = f"postgresql://{user}:{password}@{host}/db"',
        'url = "mysql://%s:%s@%s/%s"',
        "url = https://${USER}:${PASSWORD}@example.com/",
        "connect(host='db', user=u, password=pw)",
        "Password=*****; Server=localhost",
    ])
    assert scrub_secrets(text) == (text, {})
    # nor does PII take the user of a URL for an e-mail address
    out = llmtk("clean", "--profile", "code", input=jsonl([{"path": "a.py", "text": text}]),
                check=True)
    assert json.loads(out.stdout)["text"] == text


def test_secrets_in_output_and_counts_per_kind_and_off_switch():
    block, _ = _key_block("\n")
    text = Path(colorsys.__file__).read_text() + f'\nKEY = """{block}"""\n' + SECRETS[0][1] + "\n"
    kept, _, stats = run([{"path": "colorsys.py", "text": text}])
    assert "<PRIVATE_KEY>" in kept[0]["text"] and "AKIAQ3EGRTJ7WXZ6NF5B" not in kept[0]["text"]
    assert stats["counts"]["secrets.PRIVATE_KEY"] == 1
    assert stats["counts"]["secrets.AWS_KEY"] == 1
    kept, _, _ = run([{"path": "colorsys.py", "text": text}], "--secrets", "off")
    assert kept[0]["text"] == text


def test_secrets_all_scrubs_prose_too():
    article = json.loads((DATA.parent / "clean" / "articles.jsonl").read_text().splitlines()[0])
    prose = {"text": article["text"] + "\n\nThe deploy key is " + SECRETS[3][2] + " for now."}
    default = llmtk("clean", "--no-langid", input=jsonl([prose]), check=True)
    assert SECRETS[3][2] in default.stdout.decode()
    scrubbed = llmtk("clean", "--no-langid", "--secrets", "all", input=jsonl([prose]),
                     check=True)
    assert SECRETS[3][2] not in scrubbed.stdout.decode()
    assert "<GITHUB_TOKEN>" in scrubbed.stdout.decode()


@pytest.mark.parametrize("args, needle", [
    (["--profile", "java"], "--profile: expected web, code, auto"),
    (["--secrets", "some"], "--secrets: expected code, all, off"),
])
def test_bad_profile_or_secrets_value_exits_2(args, needle):
    res = llmtk("clean", *args, input=b"")
    assert res.returncode == 2
    assert needle in res.stderr.decode()


def test_every_kind_is_tested():
    assert {k for k, _, _ in SECRETS} | {"PRIVATE_KEY"} == set(kinds())


def test_dedup_code_unit_keeps_operators_as_tokens():
    text = Path(colorsys.__file__).read_text()
    edited = text.replace("i = 0.74*(r-y) - 0.27*(b-y)", "i = 0.74*(r-y) + 0.27*(b-y)")
    assert edited != text  # an operator changed, nothing else
    records = jsonl([{"id": 1, "text": text}, {"id": 2, "text": edited}])
    word = llmtk("dedup", "--annotate", input=records, check=True)
    code = llmtk("dedup", "--annotate", "--unit", "code", input=records, check=True)
    marks = [[json.loads(x).get("llmtk", {}).get("dup_reason") for x in out.stdout.splitlines()]
             for out in (word, code)]
    # without operators the two are one text; with them, near-duplicates
    assert marks == [[None, "dedup.exact"], [None, "dedup.minhash"]]
