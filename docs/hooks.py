"""mkdocs hooks (mkdocs.yml's ``hooks``): the site's home page is the README, its links made
relative to docs/, so that the two never say different things."""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    return README.read_text().replace("](docs/", "](")
