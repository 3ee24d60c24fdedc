"""Training data that is still web pages is refused before step 1.

A WARC file or JSON Lines of crawled HTML reads as documents like any other, and a model
trained on it learns markup: exit 0, a loss that falls, `<!DOCTYPE html>` in `train batch`.
The first documents of the input decide: when at least half of the first SAMPLE are HTML
pages (llmtk.text.html: a doctype or <html>/<head>/<body> at the start), the input is web
pages and the run stops with where the first one is and what to run instead. A code
corpus with some HTML files in it passes; `--allow-html` trains on markup on purpose.
"""

from __future__ import annotations

from llmtk.errors import DataError
from llmtk.io.record import Doc
from llmtk.text.html import looks_like_html_page

SAMPLE = 100  # documents judged; the verdict is reached before the first batch is encoded


class WebPageCheck:
    """Fed each document as it is tokenized; raises DataError once the verdict is web pages."""

    def __init__(self, allow: bool):
        self.done = allow
        self.seen = self.pages = 0
        self.first: str | None = None  # where the first HTML page is

    def see(self, doc: Doc) -> None:
        if self.done:
            return
        self.seen += 1
        if looks_like_html_page(doc.text):
            self.pages += 1
            self.first = self.first or doc.where()
        if self.seen == SAMPLE:
            self.finish()

    def finish(self) -> None:
        """The verdict on what was seen (an input of fewer than SAMPLE documents)."""
        if self.done:
            return
        self.done = True
        if self.pages and 2 * self.pages >= self.seen:
            raise DataError(
                f"{self.first}: these are web pages ({self.pages} of the first {self.seen} "
                f"documents are HTML): run `llmtk clean` first to extract their text, or "
                f"pass --allow-html to train on the markup")
