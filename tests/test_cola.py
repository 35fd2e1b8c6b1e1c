"""CoLA through the dataset registry; malformed files are one clear line."""

from __future__ import annotations

import pytest

from infolm.data.labelled import load_labelled, read_cola_tsv
from infolm.errors import InfolmError

GOOD = "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n"


def test_reads_labels_and_sentences(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text(GOOD)
    data = read_cola_tsv(path)
    assert data.sentences == ["The cat sat.", "Cat the sat."]
    assert data.labels.tolist() == [1, 0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("gj04\t\tThe dog barked.", r"bad\.tsv:2: expected 4 tab-separated columns .* got 3"),
        ("gj04\t2\t\tThe dog barked.", r"bad\.tsv:2: label '2' is not one of 0, 1"),
        ("gj04\t1\t\t  ", r"bad\.tsv:2: empty sentence"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.tsv"
    path.write_text(GOOD.splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(InfolmError, match=message):
        read_cola_tsv(path)


def test_a_mirror_copy_that_is_not_the_published_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "cola").mkdir()
    for name in ("in_domain_train.tsv", "in_domain_dev.tsv"):
        (tmp_path / "cola" / name).write_text(GOOD)
    monkeypatch.setenv("INFOLM_DATA_MIRROR", str(tmp_path))
    monkeypatch.setenv("INFOLM_DATA", str(tmp_path / "cache"))
    with pytest.raises(InfolmError, match="sha256 mismatch"):
        load_labelled("cola")


def test_cola_is_not_a_text_corpus():
    from infolm.data.datasets import dataset_texts

    with pytest.raises(InfolmError, match="not a text corpus"):
        dataset_texts("cola")
