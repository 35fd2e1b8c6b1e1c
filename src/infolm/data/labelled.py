"""Labelled sentences for classification: CoLA's TSV format, read through the dataset registry.

CoLA's raw files have four tab-separated columns per line: source code, label (0 unacceptable,
1 acceptable), the original author's annotation, sentence. A malformed line is an error naming the
file and line: too few columns (e.g. a missing label column), a label outside the classes, an
empty sentence.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import Tensor

from infolm.data.corpus import read_text
from infolm.errors import InfolmError

COLA_COLUMNS = ("source", "label", "annotation", "sentence")


@dataclasses.dataclass
class LabelledSentences:
    sentences: list[str]  # raw text, one sentence per item
    labels: Tensor  # (N,) int64 class ids

    def __len__(self) -> int:
        return len(self.sentences)

    def subset(self, index: Tensor) -> LabelledSentences:
        return LabelledSentences([self.sentences[int(i)] for i in index], self.labels[index])


def read_cola_tsv(path: str | Path, num_labels: int = 2) -> LabelledSentences:
    """Sentences and labels of a CoLA-format TSV file (see the module docstring)."""
    text = read_text(path)
    sentences: list[str] = []
    labels: list[int] = []
    # lines end at "\n" only: a sentence may hold what str.splitlines also breaks at (U+0085, U+2028, form feed)
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != len(COLA_COLUMNS):
            raise InfolmError(
                f"{path}:{number}: expected {len(COLA_COLUMNS)} tab-separated columns "
                f"({', '.join(COLA_COLUMNS)}), got {len(columns)}"
            )
        label, sentence = columns[1].strip(), columns[3].strip()
        if label not in {str(c) for c in range(num_labels)}:
            raise InfolmError(
                f"{path}:{number}: label {label!r} is not one of {', '.join(str(c) for c in range(num_labels))}"
            )
        if not sentence:
            raise InfolmError(f"{path}:{number}: empty sentence")
        sentences.append(sentence)
        labels.append(int(label))
    return LabelledSentences(sentences, torch.tensor(labels, dtype=torch.long))


def load_labelled(name: str, num_labels: int = 2) -> dict[str, LabelledSentences]:
    """The splits of a registered labelled dataset (``cola``): mirror, cache, then download + sha256."""
    from infolm.data.datasets import DATASETS, locate

    spec = DATASETS.get(name)
    if spec is None or spec.kind != "labelled":
        known = ", ".join(sorted(n for n, s in DATASETS.items() if s.kind == "labelled"))
        raise InfolmError(f"unknown labelled dataset {name!r}; known: {known}")
    return {split: read_cola_tsv(locate(spec, split), num_labels) for split in spec.files}
