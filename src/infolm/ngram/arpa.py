"""ARPA files (log10 probabilities and backoff weights) for :class:`NgramModel`.

Conventions, chosen so that KenLM scores an infolm file exactly as infolm does:

* Tokens are the vocabulary's strings; ``<eos>`` is an ordinary word (PTB streams have no sentence
  markers). ``<s>`` and ``</s>``, which KenLM requires, are added when the vocabulary lacks them,
  with log10 probability -99 (they never occur); ``<unk>`` likewise. They are dropped on reading.
* infolm scores the running stream with ``<eos>`` as the history of its first token. The same
  number comes from KenLM with ``bos=False, eos=False`` over ``"<eos> " + stream``, discarding the
  first (unigram) score of that leading ``<eos>``::

      scores = list(kenlm.Model(path).full_scores("<eos> " + text, bos=False, eos=False))[1:]
      ppl = 10 ** (-sum(s[0] for s in scores) / len(scores))

* Tokens containing whitespace (e.g. the space of a character vocabulary) are written as
  ``<0xHH>`` per whitespace character (hex code point) and read back; pass them so to KenLM.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import IO

import numpy as np

from infolm.data.vocab import Vocab
from infolm.errors import InfolmError
from infolm.ngram.counts import lookup
from infolm.ngram.model import BackoffTable, NgramModel

MARKERS = ("<s>", "</s>", "<unk>")  # KenLM needs these in every file
ABSENT_LOG10 = -99.0  # log10 probability written for a marker the model never predicts
_WHITESPACE = re.compile(r"\s")
_ESCAPED = re.compile(r"<0x([0-9A-Fa-f]+)>")


def escape_token(token: str) -> str:
    """The ARPA spelling of a token (whitespace characters become ``<0xHH>``)."""
    if not token:
        raise InfolmError("the vocabulary has an empty token, which an ARPA file cannot hold")
    return _WHITESPACE.sub(lambda m: f"<0x{ord(m.group()):02X}>", token)


def unescape_token(token: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), token)


def _arpa_tokens(vocab: Vocab, vocab_size: int) -> list[str]:
    if len(vocab) != vocab_size:
        raise InfolmError(f"the vocabulary has {len(vocab)} tokens but the n-gram model has {vocab_size}")
    tokens = [escape_token(t) for t in vocab.itos]
    if len(set(tokens)) != len(tokens):
        raise InfolmError("two vocabulary tokens have the same ARPA spelling (whitespace escapes collide)")
    return tokens


def _format(values: np.ndarray, digits: int) -> list[str]:
    return [f"{v:.{digits}g}" for v in values.tolist()]


def write_arpa(model: NgramModel, path: str | Path, vocab: Vocab, digits: int = 10) -> None:
    """Write ``model`` as an ARPA file at ``path`` (atomically: a temporary file, then a rename).

    ``digits`` significant digits of the log10 values (10 keeps probabilities to ~1e-10 relative).
    """
    tokens = _arpa_tokens(vocab, model.vocab_size)
    extra = [m for m in MARKERS if m not in vocab]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            _write(model, tokens, extra, out, digits)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write(model: NgramModel, tokens: list[str], extra: list[str], out: IO[str], digits: int) -> None:
    vocab_size, order = model.vocab_size, model.order
    out.write("\\data\\\n")
    for k in range(1, order + 1):
        out.write(f"ngram {k}={model.num_grams(k) + (len(extra) if k == 1 else 0)}\n")
    names = np.array(tokens, dtype=object)  # (M_k,) the space-joined words of each k-gram
    for k in range(1, order + 1):
        table = model.tables[k - 1]
        out.write(f"\n\\{k}-grams:\n")
        if k > 1:
            names = names[table.keys // vocab_size] + " " + np.array(tokens, dtype=object)[table.keys % vocab_size]
        with np.errstate(divide="ignore"):
            log_prob = _format(np.maximum(np.log10(table.prob), ABSENT_LOG10), digits)
            log_backoff = _format(np.log10(table.backoff), digits) if k < order else None
        if log_backoff is None:
            out.writelines(f"{p}\t{n}\n" for p, n in zip(log_prob, names.tolist()))
        else:
            out.writelines(f"{p}\t{n}\t{b}\n" for p, n, b in zip(log_prob, names.tolist(), log_backoff))
        if k == 1:
            tail = "\t0" if order > 1 else ""
            out.writelines(f"{ABSENT_LOG10:g}\t{marker}{tail}\n" for marker in extra)
    out.write("\n\\end\\\n")


def read_arpa(path: str | Path, vocab: Vocab) -> NgramModel:
    """Read an ARPA file over ``vocab`` (every vocabulary token needs a unigram) into a model.

    The file's ``<s>``, ``</s>`` and ``<unk>`` entries are ignored when the vocabulary lacks them.
    The history of a scored stream is ``<eos>`` when the vocabulary has it.
    """
    path = Path(path)
    return _model(_parse_sections(_read_text(path), path), vocab, path)


def read_arpa_own_vocab(path: str | Path) -> tuple[NgramModel, Vocab]:
    """Read an ARPA file over its own vocabulary: the words of its unigrams, in the file's order
    (``<s>``, ``</s>`` and ``<unk>`` included, as any other word). Returns the model and that vocabulary."""
    path = Path(path)
    sections = _parse_sections(_read_text(path), path)
    words = [unescape_token(token) for token in sections[0][1]]
    if len(set(words)) != len(words):
        raise InfolmError(f"{path}: a unigram is listed twice")
    vocab = Vocab(words)
    return _model(sections, vocab, path), vocab


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise InfolmError(f"ARPA file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InfolmError(f"cannot read ARPA file {path}: {error}") from None


def _model(sections: list[list[list[str]]], vocab: Vocab, path: Path) -> NgramModel:
    vocab_size = len(vocab)
    stoi = {escape_token(t): i for i, t in enumerate(vocab.itos)}
    tables: list[BackoffTable] = []
    for k in range(1, len(sections) + 1):
        tables.append(_read_order(sections[k - 1], k, tables, stoi, vocab_size, path))
    history = vocab.stoi.get("<eos>")
    return NgramModel(tables, vocab_size, history_id=history, method="arpa")


def _parse_sections(text: str, path: Path) -> list[list[list[str]]]:
    """The columns of each order's section (``sections[k-1]``), line counts checked against the header."""
    start = re.search(r"^[ \t]*\\data\\[ \t]*$", text, flags=re.M)
    if start is None:
        raise InfolmError(f"{path} is not an ARPA file (no \\data\\ header)")
    end = re.search(r"^[ \t]*\\end\\[ \t]*$", text[start.end() :], flags=re.M)
    if end is None:
        raise InfolmError(f"{path}: the ARPA file is truncated (no \\end\\)")
    parts = re.split(r"^[ \t]*\\(\d+)-grams:[ \t]*$", text[start.end() : start.end() + end.start()], flags=re.M)
    declared: dict[int, int] = {}
    for line in parts[0].splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"ngram\s+(\d+)\s*=\s*(\d+)", line.strip())
        if not match:
            raise InfolmError(f"{path}: bad ARPA header line {line.strip()[:80]!r}")
        declared[int(match.group(1))] = int(match.group(2))
    if not declared or sorted(declared) != list(range(1, len(declared) + 1)):
        raise InfolmError(f"{path}: the ARPA header must declare n-gram counts for orders 1..n")
    order = (len(parts) - 1) // 2
    if order != len(declared):
        raise InfolmError(f"{path}: the header declares {len(declared)} orders but the file has {order}")
    sections = []
    for k in range(1, order + 1):
        if int(parts[2 * k - 1]) != k:
            raise InfolmError(f"{path}: expected the \\{k}-grams: section, got \\{parts[2 * k - 1]}-grams:")
        columns = _columns(parts[2 * k].strip(), k, order, path)
        if len(columns[0]) != declared[k]:
            raise InfolmError(f"{path}: the header declares {declared[k]} {k}-grams but the file has {len(columns[0])}")
        sections.append(columns)
    return sections


def _columns(body: str, k: int, order: int, path: Path) -> list[list[str]]:
    """``[log10 probs, word 1, ..., word k, log10 backoffs ("0" where absent)]`` of one section."""
    lines = body.count("\n") + 1 if body else 0
    fields = body.split()
    widths = (k + 1,) if k == order else (k + 2, k + 1)
    for width in widths:  # fast path: every line has the same number of fields
        if len(fields) == lines * width and "\n\n" not in body:
            columns = [fields[j::width] for j in range(width)]
            return columns if width == k + 2 else columns + [["0"] * lines]
    split = [line.split() for line in body.splitlines() if line.strip()]
    bad = next((line for line in split if len(line) not in widths), None)
    if bad is not None:
        raise InfolmError(f"{path}: bad {k}-gram line {' '.join(bad)[:80]!r}")
    columns = [[line[j] for line in split] for j in range(k + 1)]
    return columns + [[line[k + 1] if len(line) == k + 2 else "0" for line in split]]


def _read_order(
    columns: list[list[str]], k: int, lower: list[BackoffTable], stoi: dict[str, int], vocab_size: int, path: Path
) -> BackoffTable:
    try:
        log_prob = np.array(columns[0], dtype=np.float64)
        log_backoff = np.array(columns[k + 1], dtype=np.float64)
    except ValueError as error:
        raise InfolmError(f"{path}: bad number in the {k}-grams: {error}") from None
    marker = -2  # code of an ARPA-only marker token (<s>, </s>, <unk> absent from the vocabulary)
    codes = {**{m: marker for m in MARKERS}, **stoi}
    words = np.array([[codes.get(token, -1) for token in column] for column in columns[1 : k + 1]], dtype=np.int64)
    words = words.T.reshape(len(log_prob), k)  # (M, k)
    if (words == -1).any():
        row, column = np.argwhere(words == -1)[0]
        token = unescape_token(columns[1 + column][row])
        raise InfolmError(f"{path}: the ARPA token {token!r} is not in the vocabulary")
    keep = ~(words == marker).any(axis=1)
    words, log_prob, log_backoff = words[keep], log_prob[keep], log_backoff[keep]
    if k == 1:
        prefix = np.zeros(len(words), dtype=np.int64)
        num_prefixes = 1
    else:
        prefix = words[:, 0]
        for j in range(2, k):
            prefix = lookup(lower[j - 1].keys, prefix, words[:, j - 1], vocab_size)
        if (prefix < 0).any():
            bad = " ".join(str(w) for w in words[int(np.argmax(prefix < 0))])
            raise InfolmError(f"{path}: a {k}-gram (ids {bad}) has no listed {k - 1}-gram prefix")
        num_prefixes = len(lower[k - 2].keys)
    keys = prefix * vocab_size + words[:, -1]
    order_index = np.argsort(keys, kind="stable")
    keys = keys[order_index]
    if len(keys) > 1 and (np.diff(keys) == 0).any():
        raise InfolmError(f"{path}: a {k}-gram is listed twice")
    if k == 1 and len(keys) != vocab_size:
        missing = sorted(set(range(vocab_size)) - set(keys.tolist()))
        raise InfolmError(
            f"{path}: {len(missing)} vocabulary tokens have no unigram (e.g. id {missing[0]}); "
            "was it built for another vocabulary?"
        )
    prob = np.power(10.0, log_prob[order_index])
    backoff = np.power(10.0, log_backoff[order_index])
    return BackoffTable.from_sorted(keys, prob, backoff, num_prefixes, vocab_size)
