"""Runs inside benchmarks/.venvs/datatrove (see cjk_words_vs_datatrove.py); not imported by llmtk.

Reads JSONL records {"lang": "zh" | "ja", "text"} and writes, one JSON line per record in
order, the words datatrove's word tokenizer makes of the text for FineWeb-2's language
(`cmn_Hani`: spaCy-zh with jieba; `jpn_Jpan`: spaCy-ja, SudachiPy mode A).
"""

import json
import sys

from datatrove.utils.word_tokenizers import load_word_tokenizer

# FineWeb-2's names (fineweb-2-pipeline.py passes language=lang_script). Not "zh": datatrove
# 0.10.1 maps that code to spaCy's multilingual tokenizer.
NAMES = {"zh": "cmn_Hani", "ja": "jpn_Jpan"}


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    tok = {lang: load_word_tokenizer(name) for lang, name in NAMES.items()}
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            d = json.loads(line)
            words = tok[d["lang"]].word_tokenize(d["text"])
            out.write(json.dumps(words, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
