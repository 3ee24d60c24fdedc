"""The HTML report: one self-contained page (no script, no network), tables and inline SVG.

The plots are drawn here as SVG bars (a few lines each; no plotting library to import).
Every number on the page that `--json` also prints carries its JSON key and value in
`data-key` / `data-value`, so a reader (or a test) can check the page against the JSON.
"""

from __future__ import annotations

import html
import json
from typing import Any

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222;
padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;text-align:left;
border-bottom:1px solid #eee}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:1.5em}figure{margin:0}figcaption{color:#555}
svg text{font:11px system-ui,sans-serif;fill:#333}.bar{fill:#4c78a8}.warn{fill:#e45756}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(key: str, value: Any, shown: str | None = None) -> str:
    """A table cell with a number that --json prints under `key`."""
    return (f'<td class="n" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">'
            f"{esc(shown if shown is not None else _fmt(value))}</td>")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _pct(v: float) -> str:
    return f"{100 * v:.2f}%"


def bars(title: str, labels: list[str], values: list[float], fmt=_pct, warn=False,
         width: int = 420) -> str:
    """Horizontal bars, one per label, as an inline <svg> figure."""
    if not labels:
        return ""
    row, left = 18, 150
    height = row * len(labels) + 10
    top = max(values) or 1.0
    parts = [f'<svg role="img" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}"><title>{esc(title)}</title>']
    span = width - left - 70
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = 5 + i * row
        w = max(1.0, span * v / top) if v > 0 else 0.0
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">'
                     f"{esc(label[:24])}</text>"
                     f'<rect class="{"warn" if warn else "bar"}" x="{left}" y="{y + 2}" '
                     f'width="{w:.1f}" height="{row - 5}"/>'
                     f'<text x="{left + w + 4:.1f}" y="{y + 12}">{esc(fmt(v))}</text>')
    parts.append("</svg>")
    return f"<figure>{''.join(parts)}<figcaption>{esc(title)}</figcaption></figure>"


def histogram(title: str, rows: list[dict], width: int = 420, height: int = 180) -> str:
    """Vertical bars over log-spaced bins (documents per bin) as an inline <svg> figure."""
    if not rows:
        return ""
    n = len(rows)
    top = max(r["documents"] for r in rows) or 1
    plot_h, base = height - 40, height - 25
    bw = (width - 20) / n
    parts = [f'<svg role="img" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}"><title>{esc(title)}</title>']
    for i, r in enumerate(rows):
        h = plot_h * r["documents"] / top
        x = 10 + i * bw
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{base - h:.1f}" '
                     f'width="{max(bw - 1, 1):.1f}" height="{h:.1f}">'
                     f'<title>{r["lo"]:,}–{r["hi"]:,}: {r["documents"]:,}</title></rect>')
    first, last = rows[0]["lo"], rows[-1]["hi"]
    parts.append(f'<text x="10" y="{height - 8}">{first:,}</text>'
                 f'<text x="{width - 10}" y="{height - 8}" text-anchor="end">{last:,}</text>'
                 f'<line x1="10" x2="{width - 10}" y1="{base}" y2="{base}" stroke="#888"/>'
                 "</svg>")
    return f"<figure>{''.join(parts)}<figcaption>{esc(title)} (log scale)</figcaption></figure>"


def _table(head: list[str], rows: list[str]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><tr>{th}</tr>{''.join(rows)}</table>"


def render(result: dict, title: str = "llmtk inspect") -> str:
    """The whole page for an inspect result (the dict --json prints)."""
    r = result
    dups = r["duplicates"]
    out = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{esc(title)}</h1>"]
    near_note = ("exact" if not dups["near_is_estimate"] else
                 f"estimated on a sample of {dups['near_sampled_documents']:,} documents "
                 f"(rate {dups['near_sample_rate']:.4g})")
    out.append("<h2>Overview</h2>" + _table(["", "value"], [
        f"<tr><td>documents</td>{_num('documents', r['documents'])}</tr>",
        f"<tr><td>characters</td>{_num('characters', r['characters'])}</tr>",
        f"<tr><td>words</td>{_num('words', r['words'])}</tr>",
        f"<tr><td>tokens ({esc(r['tokenizer'])})</td>{_num('tokens', r['tokens'])}</tr>",
        f"<tr><td>exact duplicates (share dedup drops as dedup.exact)</td>"
        f"{_num('exact_duplicate_fraction', r['exact_duplicate_fraction'])}</tr>",
        f"<tr><td>exact + near duplicates (share dedup drops; {esc(near_note)})</td>"
        f"{_num('near_duplicate_fraction', r['near_duplicate_fraction'])}</tr>",
        f"<tr><td>web pages (read by their main text, as clean does)</td>"
        f"{_num('web_pages', r['web_pages'])}</tr>",
        f"<tr><td>bad records</td>{_num('bad_records', r['bad_records'])}</tr>",
    ]))
    n = r["documents"] or 1
    shares = [("exact duplicates", r["exact_duplicate_fraction"]),
              ("all duplicates", r["near_duplicate_fraction"])]
    shares += [(reason, b["documents"] / n) for reason, b in r["broken"].items()]
    out.append('<div class="plots">' + bars("Share of documents: duplicates and broken",
                                           [s[0] for s in shares], [s[1] for s in shares],
                                           warn=True) + "</div>")
    if dups["largest_clusters"]:
        out.append("<h2>Largest duplicate clusters</h2>" + _table(
            ["documents", "kept document"],
            [f"<tr><td class=\"n\">{c['documents']:,}</td><td>{esc(c['kept'])}</td></tr>"
             for c in dups["largest_clusters"]]))
    langs = list(r["languages"].items())
    out.append("<h2>Languages</h2>" + '<div class="plots">' + bars(
        "Share of documents per language", [k for k, _ in langs[:20]],
        [v for _, v in langs[:20]]) + bars(
        "Share of characters per language", list(r["language_characters"])[:20],
        list(r["language_characters"].values())[:20]) + "</div>" + _table(
        ["language", "share of documents"],
        [f"<tr><td>{esc(k)}</td>{_num('languages.' + k, v, _pct(v))}</tr>" for k, v in langs])
        + "<p>Documents with several scripts: <span data-key=\"several_scripts_documents\" "
        f"data-value=\"{r['several_scripts_documents']}\">"
        f"{r['several_scripts_documents']:,}</span></p>")
    out.append("<h2>Broken documents</h2>" + _table(
        ["problem", "documents", "example"],
        [f"<tr><td>{esc(k)}</td>{_num(k + '_documents', b['documents'])}"
         f"<td>{esc(b['example'])}</td></tr>" for k, b in r["broken"].items()]
        or ["<tr><td colspan=\"3\">none found</td></tr>"]))
    pii_rows = [f"<tr><td>{esc(k)}</td>{_num('pii.' + k, v)}"
                f"<td class=\"n\">{r['pii_documents'].get(k, 0):,}</td></tr>"
                for k, v in r["pii"].items()]
    pii_rows += [f"<tr><td>secret: {esc(k)}</td>{_num('secrets.' + k, v)}<td></td></tr>"
                 for k, v in r["secrets"].items()]
    out.append("<h2>Personal data and secrets</h2>" + _table(
        ["kind", "matches", "documents"], pii_rows or
        ["<tr><td colspan=\"3\">none found</td></tr>"]))
    if "quality" in r:
        q = r["quality"]
        drops = list(q["would_drop"].items())
        out.append("<h2>Quality at a glance (clean's default rules, dry run)</h2>"
                   f"<p>clean would keep <span data-key=\"quality.would_keep\" data-value="
                   f"\"{q['would_keep']}\">{_pct(q['would_keep'])}</span> of the documents."
                   "</p>" + '<div class="plots">' + bars(
                       "Share of documents each rule would drop", [k for k, _ in drops[:20]],
                       [v for _, v in drops[:20]], warn=True) + "</div>")
    if "sources" in r:
        table = r["source_table"]
        top = list(table)[:20]
        out.append(f"<h2>Sources (by {esc(r['by'])})</h2>" + '<div class="plots">' + bars(
            "Share of documents per source", top, [r["sources"][v] for v in top]) + bars(
            "Share of tokens per source", top, [table[v]["token_share"] for v in top])
            + "</div>" + _table(
            ["source", "share of documents", "documents", "characters", "tokens"],
            [f"<tr><td>{esc(v)}</td>{_num('sources.' + v, r['sources'][v], _pct(r['sources'][v]))}"
             f"<td class=\"n\">{t['documents']:,}</td><td class=\"n\">{t['characters']:,}</td>"
             f"<td class=\"n\">{t['tokens']:,}</td></tr>" for v, t in table.items()]))
    out.append("<h2>Lengths</h2>" + '<div class="plots">' + "".join(
        histogram(f"{name} per document", r["lengths"][name]["histogram"])
        for name in ("characters", "words", "tokens")) + "</div>" + _table(
        ["per document", "mean", "median", "p90", "p99"],
        [f"<tr><td>{name}</td><td class=\"n\">{s['mean']:,}</td><td class=\"n\">"
         f"{s['p50']:,}</td><td class=\"n\">{s['p90']:,}</td><td class=\"n\">{s['p99']:,}</td>"
         "</tr>" for name, s in r["lengths"].items()]))
    out.append("</body></html>\n")
    return "".join(out)


def print_summary(result: dict, console) -> None:
    """The compact summary on stderr: overview, languages, broken, PII, sources."""
    from rich.table import Table

    r = result
    n = r["documents"] or 1
    t = Table(title="what the corpus holds", show_header=False, title_justify="left")
    t.add_column()
    t.add_column(justify="right")
    t.add_row("documents", f"{r['documents']:,}")
    t.add_row(f"tokens ({r['tokenizer']})", f"{r['tokens']:,}")
    if r["web_pages"]:
        t.add_row("web pages (main text read)", f"{r['web_pages']:,}")
    t.add_row("exact duplicates", _pct(r["exact_duplicate_fraction"]))
    near = r["duplicates"]
    t.add_row("exact + near duplicates" + (" (sampled)" if near["near_is_estimate"] else ""),
              _pct(r["near_duplicate_fraction"]))
    for reason, b in r["broken"].items():
        t.add_row(f"{reason}", f"{b['documents']:,} ({_pct(b['documents'] / n)}), "
                  f"e.g. {b['example']}")
    for kind, c in r["pii"].items():
        t.add_row(f"pii {kind}", f"{c:,} in {r['pii_documents'].get(kind, 0):,} docs")
    for kind, c in r["secrets"].items():
        t.add_row(f"secret {kind}", f"{c:,}")
    t.add_row("several scripts", f"{r['several_scripts_documents']:,}")
    if "quality" in r:
        t.add_row("clean would keep", _pct(r["quality"]["would_keep"]))
        for reason, share in list(r["quality"]["would_drop"].items())[:8]:
            t.add_row(f"  would drop {reason}", _pct(share))
    console.print(t)
    langs = list(r["languages"].items())
    if langs:
        lt = Table(title="languages", title_justify="left")
        lt.add_column("lang")
        lt.add_column("documents", justify="right")
        lt.add_column("characters", justify="right")
        for k, v in langs[:10]:
            lt.add_row(k, _pct(v), _pct(r["language_characters"].get(k, 0.0)))
        if len(langs) > 10:
            lt.add_row(f"+{len(langs) - 10} more", "", "")
        console.print(lt)
    if "source_table" in r:
        st = Table(title=f"sources (by {r['by']})", title_justify="left")
        for col in ("source", "documents", "characters", "tokens"):
            st.add_column(col, justify="left" if col == "source" else "right")
        rows = list(r["source_table"].items())
        for v, s in rows[:10]:
            st.add_row(v[:40], _pct(r["sources"][v]), _pct(s["character_share"]),
                       _pct(s["token_share"]))
        if len(rows) > 10:
            st.add_row(f"+{len(rows) - 10} more", "", "", "")
        console.print(st)
    lt = Table(title="lengths per document", title_justify="left")
    for col in ("", "mean", "median", "p90", "p99"):
        lt.add_column(col, justify="left" if not col else "right")
    for name, s in r["lengths"].items():
        lt.add_row(name, f"{s['mean']:,}", f"{s['p50']:,}", f"{s['p90']:,}", f"{s['p99']:,}")
    console.print(lt)
