"""The docs point only inside the repository: every relative link of README.md, ARCHITECTURE.md,
CHANGELOG.md, benchmarks/ and docs/ names a file that exists here, none leads out of the checkout
(a clone has no design notes beside it), and web addresses are only the examples the pages use."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md",
         ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE_HOSTS = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\]|[a-z0-9.-]*example\.com|[a-z0-9.{}-]*\.svc\.cluster\.local"
                           r"|prometheus[a-z0-9.:-]*|\$)")


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # code blocks hold commands, not links
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(https?://[^>]+)>", text)


def test_every_relative_link_names_a_file_inside_the_repository():
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_nothing_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page.name
        for address in re.findall(r"https?://[^\s)>`'\"]+", text):
            assert EXAMPLE_HOSTS.match(address), f"{page.relative_to(ROOT)} points outside the repository: {address}"


def test_the_check_notices_a_link_out_of_the_checkout(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [the notes](../elsewhere/NOTES.md) and [docs](docs/index.md).\n```sh\n[x](nowhere)\n```\n")
    assert links(page) == ["../elsewhere/NOTES.md", "docs/index.md"]
    assert not (page.parent / "../elsewhere/NOTES.md").resolve().is_relative_to(ROOT)
