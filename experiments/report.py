"""Rebuild the reproduction pages and the index of docs/results.md from protocols and records.

python -m experiments.report                # every page, its curves and the index
python -m experiments.report imm bmi        # some pages (the index is rebuilt too)
python -m experiments.report --check        # exit 1 naming each page that differs from its records
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.reproduce.protocol import ROOT, ProtocolError, load_pages
from experiments.reproduce.render import INDEX_BEGIN, INDEX_END, evaluate, render_index, render_page


def build(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file's text by path: the pages and docs/results.md with its index replaced."""
    pages = load_pages(root / "experiments" / "protocols")
    records_root = root / "experiments" / "records"
    texts: dict[Path, str] = {}
    evaluated = []
    for paper, page in sorted(pages.items(), key=lambda item: (item[1].order, item[0])):
        results = [evaluate(comparison, records_root) for comparison in page.comparisons]
        evaluated.append((page, results))
        texts[root / "docs" / "reproductions" / f"{paper}.md"] = render_page(page, results)
    index_path = root / "docs" / "results.md"
    current = index_path.read_text() if index_path.exists() else ""
    if INDEX_BEGIN in current and INDEX_END in current:
        head, rest = current.split(INDEX_BEGIN, 1)
        tail = rest.split(INDEX_END, 1)[1]
        texts[index_path] = head + render_index(evaluated) + tail
    return texts


def drift(root: Path = ROOT) -> list[str]:
    """The generated files whose committed text differs from what the records make."""
    return [
        str(path.relative_to(root))
        for path, text in build(root).items()
        if not path.exists() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.splitlines()[0])
    parser.add_argument("papers", nargs="*", help="pages to rebuild (default: all)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    parser.add_argument("--no-figures", action="store_true", help="skip the learning-curve PNGs")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = drift()
            for name in stale:
                print(f"{name}: differs from what its records make; run python -m experiments.report", file=sys.stderr)
            return 1 if stale else 0
        texts = build()
        pages = load_pages()
        unknown = [p for p in args.papers if p not in pages]
        if unknown:
            print(f"unknown paper {unknown[0]!r} (known: {', '.join(sorted(pages))})", file=sys.stderr)
            return 2
    except ProtocolError as error:
        print(f"protocol: {error}", file=sys.stderr)
        return 2
    wanted = set(args.papers or pages)
    for path, text in texts.items():
        if path.parent.name == "reproductions" and path.stem not in wanted:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    if not args.no_figures:
        from experiments.reproduce.figures import write_curve, write_frontier
        from experiments.reproduce.render import evaluate as evaluate_comparison

        for paper in sorted(wanted):
            for comparison in pages[paper].comparisons:
                if comparison.curve or comparison.frontier:
                    result = evaluate_comparison(comparison, ROOT / "experiments" / "records")
                    target = ROOT / "docs" / "reproductions" / "img" / f"{paper}-{comparison.id}.png"
                    write = write_frontier if comparison.frontier else write_curve
                    if write(result, target):
                        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
