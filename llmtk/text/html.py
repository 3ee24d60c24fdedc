"""Is this text an HTML document? One answer for every tool that must know: `clean` extracts
the main text of such a record, `train` refuses to learn from one unless told to."""

from __future__ import annotations

import re

# An HTML document starts, after blanks, a BOM, an XML declaration and comments, with a
# doctype or one of the elements only a whole page opens with. A fragment (`<p>…`) or a
# template in a code file is not a page.
_PAGE_START = re.compile(r"\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*"
                         r"<(?:!doctype\s+html|html|head|body)\b", re.I | re.S)


def looks_like_html_page(text: str) -> bool:
    """True when `text` begins as an HTML document does (reads its first 4 KiB only)."""
    return text[:1] in "<\ufeff \t\r\n" and _PAGE_START.match(text, 0, 4096) is not None
