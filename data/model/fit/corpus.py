"""The training sentences: every WordNet 3.0 gloss ("word: definition") and usage example of
three words or more, from the data files of Debian's wordnet-base package, shuffled with a fixed
seed. Usage: python3 corpus.py /usr/share/wordnet OUT.txt"""
import random
import sys

src, out = sys.argv[1], sys.argv[2]
texts = []
for pos in ["noun", "verb", "adj", "adv"]:
    with open(f"{src}/data.{pos}", encoding="latin-1") as f:
        for line in f:
            # Lines starting with two spaces are the licence header.
            if line.startswith("  ") or "|" not in line:
                continue
            head, gloss = line.split("|", 1)
            fields = head.split()
            # synset_offset lex_filenum ss_type w_cnt word lex_id ...
            word = fields[4].replace("_", " ")
            parts = [p.strip() for p in gloss.strip().split(";")]
            definition = "; ".join(p for p in parts if not p.startswith('"'))
            if definition:
                texts.append(f"{word}: {definition}")
            for p in parts:
                if p.startswith('"'):
                    example = p.strip('" ')
                    if len(example.split()) >= 3:
                        texts.append(example)
random.seed(7)
random.shuffle(texts)
with open(out, "w") as f:
    f.write("\n".join(texts) + "\n")
print(f"{len(texts)} sentences", file=sys.stderr)
