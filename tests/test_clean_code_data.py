"""Data in source clothing and secrets wherever code puts them (`--profile code`): files the
tests write, shaped like the real ones benchmarks/code_packages.py measures."""

import json
import zlib
from pathlib import Path

import pytest

from llmtk.clean.code import Code, CodeRules
from llmtk.text.secrets import scrub_secrets
from tests.util import llmtk

RULES = CodeRules(Code(profile="code"))


def _firmware_c() -> str:
    """A firmware blob as vendors ship it: a license line, then one big `0xNN` array."""
    blob = zlib.compress(Path(json.__file__).read_bytes())[:6000]
    rows = ",\n".join("    " + ", ".join(f"0x{b:02x}" for b in blob[i:i + 12])
                      for i in range(0, len(blob), 12))
    return ("/* SPDX-License-Identifier: GPL-2.0 */\n/* rtl_fw.h: microcode for the chip */\n"
            "#include <stdint.h>\n\nstatic const uint8_t rtl_fw[] = {\n" + rows + "\n};\n\n"
            "static const unsigned int rtl_fw_len = sizeof(rtl_fw);\n")


def _font_rs() -> str:
    """An embedded 8x8 font in Rust: one glyph per line, `0x..u8` literals and a comment."""
    rows = "\n".join("    [" + ", ".join(f"0x{(c * 31 + k * 7) % 256:02X}" for k in range(8))
                     + f"], // U+{c:04X}" for c in range(32, 160))
    return f"//! Basic 8x8 font.\n\npub const BASIC: [[u8; 8]; 128] = [\n{rows}\n];\n"


def _crc_c() -> str:
    """Hand-written CRC-32 with its one small table (a nibble at a time): code, not data."""
    table = [0] * 16
    for n in range(16):
        c = n
        for _ in range(4):
            c = 0xEDB88320 ^ (c >> 1) if c & 1 else c >> 1
        table[n] = c
    rows = ",\n".join("    " + ", ".join(f"0x{v:08x}U" for v in table[i:i + 4])
                      for i in range(0, 16, 4))
    body = "\n".join([
        "/* crc32.c -- compute the CRC-32 of a data stream, one byte at a time. */",
        "#include <stddef.h>", "#include <stdint.h>", "",
        "static const uint32_t crc_table[16] = {", rows, "};", "",
        *[line for i in range(3) for line in (
            f"/* Update a running CRC-32 with buffer {i}: the caller starts from 0. */",
            f"uint32_t crc32_update_{i}(uint32_t crc, const unsigned char *buf, size_t len)",
            "{", "    crc = crc ^ 0xffffffffU;", "    while (len--) {",
            "        crc = crc_table[(crc ^ *buf) & 0x0f] ^ (crc >> 4);",
            "        crc = crc_table[(crc ^ (*buf++ >> 4)) & 0x0f] ^ (crc >> 4);", "    }",
            "    return crc ^ 0xffffffffU;", "}", "")],
    ])
    return body


def test_hex_array_sources_are_data_and_a_table_in_code_is_not():
    assert RULES.check(_firmware_c(), "c", "drivers/net/rtl_fw.h") == "code.data_array"
    assert RULES.check(_font_rs(), "rust", "src/font.rs") == "code.data_array"
    escaped = 'IMG = (\n' + "\n".join(
        '    b"' + "".join(f"\\x{(i * 13 + k) % 256:02x}" for k in range(16)) + '"'
        for i in range(200)) + "\n)\n"
    assert RULES.check('"""Icon."""\n' + escaped, "python", "icons.py") == "code.data_array"
    assert RULES.check(_crc_c(), "c", "lib/crc32.c") is None


def test_xml_and_csv_data_are_dropped_and_xml_programs_kept():
    osinfo = ('<?xml version="1.0" encoding="UTF-8"?>\n<!-- generated list -->\n<libosinfo '
              'version="0.0.1">\n' + "".join(
                  f'  <os id="http://debian.org/debian/{v}">\n    <short-id>debian{v}</short-id>'
                  f'\n    <release-date>20{v:02d}-06-10</release-date>\n  </os>\n'
                  for v in range(7, 13)) + "</libosinfo>\n")
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16">'
           '<path d="M1 1h14v14H1z"/></svg>\n')
    xslt = ('<?xml version="1.0"?>\n<xsl:stylesheet version="1.0" '
            'xmlns:xsl="http://www.w3.org/1999/XSL/Transform">\n  <xsl:template match="/">'
            '<html><xsl:apply-templates/></html></xsl:template>\n</xsl:stylesheet>\n')
    pom = "<?xml version='1.0'?>\n<project><modelVersion>4.0.0</modelVersion></project>\n"
    assert RULES.check(osinfo, "xml", "os/debian.xml") == "code.xml_data"
    assert RULES.check(svg, "xml", "icons/box.svg") == "code.xml_data"
    assert RULES.check(xslt, "xml", "style/html.xsl") is None
    assert RULES.check(pom, "xml", "pom.xml") is None
    small = "species,island,bill_length_mm\nAdelie,Torgersen,39.1\nGentoo,Biscoe,46.1\n"
    assert RULES.check(small, "csv", "data/penguins.csv") == "code.csv_data"


def test_data_files_through_the_command(tmp_path):
    records = [{"id": 1, "path": "fw/rtl_fw.h", "text": _firmware_c()},
               {"id": 2, "path": "lib/crc32.c", "text": _crc_c()},
               {"id": 3, "path": "data/iris.csv", "text": "a,b\n5.1,3.5\n4.9,3.0\n" * 3},
               {"id": 4, "path": "icons/box.svg", "text": '<svg xmlns="http://www.w3.org/2000/'
                'svg"><rect width="4" height="4"/></svg>\n'}]
    src, out, rej = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "rej.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    llmtk("clean", src, "--profile", "code", "--workers", "1", "-o", out, "--rejects", rej,
          check=True)
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [2]
    assert [json.loads(x)["llmtk"]["reason"] for x in rej.read_text().splitlines()] == [
        "code.data_array", "code.csv_data", "code.xml_data"]


AKID = "AKIAQ3EGRTJ7WXZ6NF5B"
AWS_SECRET = "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"
GHP = "ghp_R7tY2uI9oP4aS6dF1gH3jK8lZ5xC0vB7nM2q"
PW = "Zq7!rT2p#Lw9x"

# (name, text holding the secret, the secret): each shape in each placement code puts it
PLACED = [
    ("aws-id-concat", f'KEY = ("{AKID[:9]}"\n       "{AKID[9:]}")\n', AKID),
    ("token-concat-plus", f'const t = "{GHP[:20]}" +\n  "{GHP[20:]}";\n', GHP),
    # the first piece alone has a Slack token's shape: the split secret still goes whole
    ("slack-concat-half-is-a-token", 'const t = "xoxb-56109299948-0469585248" +\n'
     '    "58-Pi9YWMYIPuPfbdw3HCrObNuh";\n',
     "xoxb-56109299948-046958524858-Pi9YWMYIPuPfbdw3HCrObNuh"),
    ("token-concat-c", f'static const char *t = "{GHP[:15]}" "{GHP[15:]}";\n', GHP),
    ("aws-secret-sdk-object", f'new AWS.S3({{accessKeyId: k, secretAccessKey: "{AWS_SECRET}"}})\n',
     AWS_SECRET),
    ("aws-secret-yaml-block", f"aws:\n  access_key_id: {AKID}\n  secret_key: {AWS_SECRET}\n",
     AWS_SECRET),
    ("aws-secret-pairs", f'    ("secret_access_key", "{AWS_SECRET}"),\n', AWS_SECRET),
    ("password-yaml", f"database:\n  host: db.internal\n  user: app\n  password: {PW}\n", PW),
    ("password-json", json.dumps({"db": {"host": "db", "user": "app", "password": PW}},
                                 indent=2), PW),
    ("password-ini", f"[db]\nhost = db.internal\nuser = app\npassword = {PW}\n", PW),
    ("password-ini-dotted", "[db]\nhost = db\nuser = app\npassword = EY9e.TT74yayD3ds\n",
     "EY9e.TT74yayD3ds"),
    ("password-env", f"DB_HOST=db.internal\nDB_USER=app\nDB_PASSWORD={PW}\n", PW),
    ("password-define", f'#define DB_HOST "db"\n#define DB_PASSWORD "{PW}"\n', PW),
    ("password-query", f'login = "https://x.example/auth?user=app&password={PW}&next=1"\n', PW),
    ("password-jdbc", f'url = "jdbc:mysql://db/app?user=root&password={PW}&useSSL=true"\n',
     PW),
    ("password-url-with-at", 'url = "postgres://app:p@ss!w0rd@db:5432/app"\n', "p@ss!w0rd"),
    ("gitlab-routable-whole", "token = glpat-AbCdEfGhIjKlMnOpQrStUvWx.01.1a0b2c3d4\n",
     "glpat-AbCdEfGhIjKlMnOpQrStUvWx.01.1a0b2c3d4"),
    ("gcp-longer-whole", "key=AIzaSyD3x9Kq7Lm2Np8Rt5Vw1Yz4Bc6Df0Gh2JkXy\n",
     "AIzaSyD3x9Kq7Lm2Np8Rt5Vw1Yz4Bc6Df0Gh2JkXy"),
]


@pytest.mark.parametrize("text, secret", [p[1:] for p in PLACED], ids=[p[0] for p in PLACED])
def test_every_shape_is_found_where_code_puts_it_and_scrubbed_whole(text, secret):
    out, counts = scrub_secrets(text)
    assert counts
    # whole: neither half of it may stay (`app:<PASSWORD>@ss!w0rd@db` kept a tail)
    parts = [secret[: len(secret) // 2], secret[len(secret) // 2 :]]
    assert not any(p in out for p in parts), out


def test_look_alikes_stay_in_the_same_placements():
    text = "\n".join([
        "db = {",
        '    "host": "db", "user": "app",',
        '    "password_sha1": "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12",',
        "}",
        'h = "9f86d081884c7d659a2feaa0c55ad015" + "a3bf4f1b2b0b822cd15d6c15b0f00a08"',
        "# secret_key: 0123456789abcdef0123456789abcdef01234567 (a SHA-1, aws test vector)",
        'url = "https://example.com/f?uuid=0e5ec1c4-6d4c-4a4e-9f2a-1d5b9f4a8c3e&x=1"',
        "host = db", "user = app", "password = self.password", "password = get_password()",
        "DB_PASSWORD=${DB_PASSWORD}",
        'print("password", "is")',
    ])
    assert scrub_secrets(text) == (text, {})
