"""Checks every internal link of the built HTML site: the file exists and so does the anchor.

``python tools/docs_linkcheck.py [docs/_build/html]`` reads every ``.html`` file, collects the
``href`` and ``src`` attributes that point inside the site (no scheme, no ``//``, no
``mailto:``), and checks that the target file exists and, for ``#anchor`` links to HTML pages,
that the page defines that ``id``. External links are not followed (no network). Prints every
broken link with the page it is on; the exit status is 1 when there is any.
"""

from __future__ import annotations

import argparse
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

DEFAULT_SITE = Path(__file__).resolve().parent.parent / "docs" / "_build" / "html"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key in ("id", "name"):
                self.ids.add(value)
            elif key in ("href", "src") and not (
                tag == "link" and key == "href" and value.startswith("http")
            ):
                self.links.append(value)


def _parse(path: Path) -> _Collector:
    c = _Collector()
    c.feed(path.read_text(errors="replace"))
    return c


def broken_links(site: Path) -> list[tuple[str, str]]:
    """``(page, link)`` for every internal link whose file or anchor is missing."""
    pages = {p: _parse(p) for p in site.rglob("*.html")}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("data:"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append((str(page.relative_to(site)), link))
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append((str(page.relative_to(site)), link))
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=Path, default=DEFAULT_SITE)
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"no built site at {args.site} (run make docs)", file=sys.stderr)
        return 1
    broken = broken_links(args.site.resolve())
    for page, link in broken:
        print(f"{page}: broken link {link}")
    n = sum(1 for _ in args.site.rglob("*.html"))
    print(f"{len(broken)} broken internal links in {n} pages")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
