"""Record streams for every tool: read, shard, process in parallel, write, account.

See docs/io.md for the contract. The pieces:
- `StreamRun` / `StreamOptions` (run.py): one tool run, with outputs, rejects and summary;
- `read_docs`, `expand_inputs` (reader.py): inputs to `Doc`s, bad lines to `BadRecord`s;
- `Sink` (writer.py): stdout or an atomically written file, compressed by extension;
- `ordered_map` (workers.py): the order-preserving `--workers` helper;
- `shard_of` / `in_shard` (shard.py): the stable `--shard K/N` rule.
"""

from llmtk.io.atomic import write_file_atomically, write_json_atomically
from llmtk.io.reader import expand_inputs, read_docs
from llmtk.io.record import BadRecord, Doc
from llmtk.io.run import StreamOptions, StreamRun
from llmtk.io.shard import in_shard, shard_of
from llmtk.io.workers import chunked, ordered_map
from llmtk.io.writer import Sink

__all__ = [
    "BadRecord", "Doc", "Sink", "StreamOptions", "StreamRun", "chunked", "expand_inputs",
    "in_shard", "ordered_map", "read_docs", "shard_of", "write_file_atomically",
    "write_json_atomically",
]
