"""`llmtk inspect`'s logic: what a corpus holds, in one streaming pass, in mergeable sketches.

scan.py reads documents into a `Profile` and answers from it; sketch.py holds the mergeable
summaries; dups.py the duplicate shares (with dedup's own keys, signatures and decisions);
checks.py the broken-document and script tests; report.py the HTML page and the summary.

Layer: above the domain packages, below the commands. Inspect is the one package whose job
is to apply the others' rules without acting (dedup's signatures and decisions, clean's
extraction, language ID, scrubbers and, with --quality, its Cleaner in dry-run mode), so
that its numbers agree with what they then do. It uses their public pieces (DedupConfig,
MinHasher batches, DedupIndex; Extract, Cleaner, CleanConfig) and none imports it.
"""
