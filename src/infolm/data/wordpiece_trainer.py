"""WordPiece vocabulary training, deterministic: the same words and settings give the same tokens with
the same ids in every process.

The algorithm is the one the ``tokenizers`` library documents for its ``WordPieceTrainer``
(BPE-style merges): every word starts as its characters, the first plain and the others with the
continuation prefix (``w ##o ##r ##d``); the vocabulary is the special tokens, the alphabet, the
continuation characters, then, while it is smaller than ``vocab_size``, the most frequent adjacent
pair of symbols is merged into a new symbol (``w`` + ``##o`` -> ``wo``, ``##o`` + ``##r`` -> ``##or``),
until no pair occurs ``min_frequency`` times. Pair counts are kept incrementally: a merge only
revisits the words that hold the pair.

Where the library leaves the order to a hash map (its continuation symbols get ids in the order of
a hash-map walk over the words, and those ids break count ties), the order here is fixed:
- ids: special tokens in their given order, the alphabet by code point, the continuation characters
  by code point, then each new symbol in the order of its merge;
- ties: of the pairs with the highest count, the one with the smallest (left id, right id) merges
  first (the library's rule, over fixed ids).
The alphabet is every character of the words, so ``vocab_size`` bounds the merges only: a text with
more distinct characters than ``vocab_size`` keeps them all (as the library does).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

Pair = tuple[int, int]


def initial_tokens(words: Iterable[str], specials: Iterable[str], prefix: str) -> list[str]:
    """Specials in order, the alphabet by code point, then ``prefix + c`` for every character that
    occurs after a word's first, by code point."""
    words = list(words)
    alphabet = sorted({char for word in words for char in word})
    continuations = sorted({char for word in words for char in word[1:]})
    tokens: list[str] = []
    for token in [*specials, *alphabet, *(prefix + char for char in continuations)]:
        if token not in tokens:
            tokens.append(token)
    return tokens


def _pairs(symbols: list[int]) -> dict[Pair, int]:
    """Occurrences of each adjacent pair of a word."""
    pairs: dict[Pair, int] = {}
    for pair in zip(symbols, symbols[1:]):
        pairs[pair] = pairs.get(pair, 0) + 1
    return pairs


def merge_word(symbols: list[int], left: int, right: int, merged: int) -> list[int]:
    """Each (left, right), scanned left to right without overlap, replaced by ``merged``."""
    out: list[int] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def train_vocabulary(
    word_counts: Mapping[str, int], vocab_size: int, min_frequency: int, specials: Iterable[str], prefix: str
) -> list[str]:
    """The WordPiece vocabulary of ``word_counts`` (word -> occurrences), tokens in id order."""
    words = sorted(word for word, count in word_counts.items() if count > 0 and word)
    counts = [int(word_counts[word]) for word in words]
    tokens = initial_tokens(words, specials, prefix)
    token_id = {token: index for index, token in enumerate(tokens)}
    symbols = [[token_id[word[0]], *(token_id[prefix + char] for char in word[1:])] for word in words]

    pair_counts: dict[Pair, int] = {}
    holders: dict[Pair, set[int]] = {}  # pair -> the words it occurs in
    for index, word_symbols in enumerate(symbols):
        for pair, n in _pairs(word_symbols).items():
            pair_counts[pair] = pair_counts.get(pair, 0) + n * counts[index]
            holders.setdefault(pair, set()).add(index)
    # a max-heap on the count, then the smallest (left id, right id); an entry whose count went down
    # is refreshed when it pops, a count that went up is pushed anew
    queue = [(-count, left, right) for (left, right), count in pair_counts.items()]
    heapq.heapify(queue)

    while len(tokens) < vocab_size and queue:
        negative_count, left, right = heapq.heappop(queue)
        count = pair_counts.get((left, right), 0)
        if count != -negative_count:
            if count > 0:
                heapq.heappush(queue, (-count, left, right))
            continue
        if count < min_frequency:
            break
        right_token = tokens[right]
        new_token = tokens[left] + (right_token[len(prefix) :] if right_token.startswith(prefix) else right_token)
        merged = token_id.setdefault(new_token, len(tokens))  # an existing spelling keeps its id
        if merged == len(tokens):
            tokens.append(new_token)

        changed: set[Pair] = set()
        grown: set[Pair] = set()
        for index in sorted(holders.pop((left, right))):
            before = _pairs(symbols[index])
            symbols[index] = merge_word(symbols[index], left, right, merged)
            after = _pairs(symbols[index])
            for pair in before.keys() | after.keys():
                change = (after.get(pair, 0) - before.get(pair, 0)) * counts[index]
                if change != 0:
                    pair_counts[pair] = pair_counts.get(pair, 0) + change
                    changed.add(pair)
                    if change > 0:
                        grown.add(pair)
                if pair in after:
                    holders.setdefault(pair, set()).add(index)
                elif pair in holders:
                    holders[pair].discard(index)
        for pair in sorted(changed):
            if pair_counts[pair] == 0:  # the merged pair, and pairs only the merged words held
                del pair_counts[pair]
                holders.pop(pair, None)
            elif pair in grown:
                heapq.heappush(queue, (-pair_counts[pair], *pair))
    return tokens
