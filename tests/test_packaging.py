"""What a release ships: the sdist (with a test suite that runs from it) and the wheel built from
that sdist, their metadata, and a README whose links work on the package index."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = "https://github.com/pgqueue/pgqueue"


@dataclass
class Built:
    sdist: Path
    sdist_files: set[str]  # paths inside the sdist's top directory
    unpacked: Path
    wheel: Path
    wheel_files: set[str]


def build(args: list[str], cwd: Path) -> None:
    # Without build isolation: the dev extra brings a setuptools that reads license = "MIT".
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# What a checkout has that a clean clone would not: the sdist is built from a copy without them.
# (Building in the working tree itself would write pgqueue.egg-info/ and a release tree into it
# while other tests, and other people, read the tree.)
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "*.egg-info", "build", "dist", "__pycache__", ".*_cache"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("checkout") / "pgqueue"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED, symlinks=True)
    build(["--sdist", "--outdir", str(out), str(source)], source)
    (sdist,) = out.glob("pgqueue-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        tar.extractall(out / "unpacked", filter="data")
    top = names[0].split("/")[0]
    sdist_files = {n.split("/", 1)[1] for n in names if "/" in n}
    unpacked = (out / "unpacked" / top).resolve()
    # the wheel is built from the sdist, as installers do
    build(["--wheel", "--outdir", str(out), str(unpacked)], unpacked)
    (wheel,) = out.glob("pgqueue-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        wheel_files = set(zf.namelist())
    return Built(sdist, sdist_files, unpacked, wheel, wheel_files)


def tracked(path: str) -> set[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not in a git checkout")
    result = subprocess.run(
        ["git", "ls-files", path], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_the_sdist_ships_the_package_and_the_whole_test_suite(built: Built) -> None:
    files = built.sdist_files
    for needed in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "MANIFEST.in",
        "CHANGELOG.md",
        "mkdocs.yml",  # the site's tests build it from the sdist too
    ):
        assert needed in files, needed
    assert tracked("pgqueue") <= files
    assert tracked("pgqueue_adapters") <= files
    # the tests, with their conftests and helpers, and what they read
    assert tracked("tests") <= files, sorted(tracked("tests") - files)
    for needed in ("tests/conftest.py", "tests/_async/conftest.py", "tests/_sync/conftest.py"):
        assert needed in files, needed
    for folder in ("docs", "examples", "tools"):
        assert tracked(folder) <= files, folder
    assert not any(f.startswith("benchmarks/") for f in files)
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


def test_the_sdists_test_suite_collects(built: Built) -> None:
    # a test module without its conftest (or helpers) fails here, at import
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=built.unpacked,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^\d+(/\d+)? tests collected", result.stdout, re.M), result.stdout[-500:]


def test_the_wheel_holds_the_packages_and_their_data_only(built: Built) -> None:
    files = built.wheel_files
    tops = {f.split("/")[0] for f in files}
    dist_info = next(t for t in tops if t.endswith(".dist-info"))
    assert tops == {"pgqueue", "pgqueue_adapters", dist_info}
    for needed in ("pgqueue/py.typed", "pgqueue_adapters/py.typed", "pgqueue/sql/queries.sql"):
        assert needed in files, needed
    sql = {f for f in tracked("pgqueue/sql") if f.endswith(".sql")}
    assert sql <= files
    assert {f for f in tracked("pgqueue") if f.endswith(".py")} <= files
    assert f"{dist_info}/licenses/LICENSE" in files
    # the dashboard's templates and static files (vendored htmx and its licence too)
    web = {f for f in tracked("pgqueue/web") if not f.endswith(".py")}
    assert web <= files, sorted(web - files)
    for needed in (
        "pgqueue/web/templates/base.html",
        "pgqueue/web/static/htmx.min.js",
        "pgqueue/web/static/htmx.LICENSE",
        "pgqueue/web/static/pgqueue.css",
        "pgqueue/web/static/pgqueue.js",
        "pgqueue/sql/web.sql",
    ):
        assert needed in files, needed


def test_the_metadata_names_license_classifiers_and_urls(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as zf:
        name = next(f for f in built.wheel_files if f.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(name).decode())
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the expression says it
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert urls["Repository"] == REPOSITORY
    assert urls["Documentation"].startswith(REPOSITORY)
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    with tarfile.open(built.sdist) as tar:
        pkg_info = next(
            m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        extracted = tar.extractfile(pkg_info)
        assert extracted is not None
        assert Parser().parsestr(extracted.read().decode())["License-Expression"] == "MIT"


def test_readme_links_are_absolute() -> None:
    # The README is the project page on the package index, where relative links lead nowhere.
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links
    relative = [link for link in links if not link.startswith("https://")]
    assert relative == []
    for link in links:
        if link.startswith(f"{REPOSITORY}/blob/main/"):
            path = link.removeprefix(f"{REPOSITORY}/blob/main/").split("#")[0]
            assert (ROOT / path).exists(), link
