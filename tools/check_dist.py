"""Build the sdist and the wheel, check them as the package index would, and install the wheel
into a clean virtualenv with each extra alone, importing it and running one job
(``make check-dist``; CI runs it).

    python tools/check_dist.py [--dsn URL] [--extras psycopg+asyncpg] [--outdir dist]

The wheel is built from the sdist, as installers do. ``twine check --strict`` reads both: the
README must render on the package index. Each virtualenv installs ``pgqueue[EXTRA]`` from the
built wheel (its dependencies from the package index) and runs ``tools/wheel_smoke.py`` there,
against a database created for the run and dropped after it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = [
    "",
    "psycopg",
    "asyncpg",
    "sqlalchemy",
    "sqlalchemy,psycopg",
    "sqlalchemy,asyncpg",
    "all",
    "prometheus",
    "otel",
    "django",
    "starlette",
    "fastapi",
    "flask",
    "web",
    "demo",
]


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; on failure print its output and exit."""
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"`{' '.join(argv)}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def build(outdir: Path) -> tuple[Path, Path]:
    """Build the sdist from a copy of the tracked files, then the wheel from the sdist."""
    shutil.rmtree(outdir, ignore_errors=True)
    # without isolation: the dev extra brings a setuptools that reads license = "MIT"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(outdir), str(ROOT)])
    (sdist,) = outdir.glob("pgqueue-*.tar.gz")
    (wheel,) = outdir.glob("pgqueue-*.whl")
    return sdist, wheel


def smoke(extra: str, wheel: Path, dsn: str, work: Path) -> str:
    """Install ``pgqueue[extra]`` from ``wheel`` into a new virtualenv and run the smoke script."""
    venv = work / f"venv-{extra.replace(',', '-') or 'bare'}"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    requirement = f"pgqueue[{extra}] @ {wheel.resolve().as_uri()}" if extra else str(wheel)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, requirement])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "PYTHON"))}
    env.pop("DATABASE_URL", None)
    done = run([str(python), str(ROOT / "tools" / "wheel_smoke.py"), extra, dsn], cwd=work, env=env)
    return done.stdout.strip()


def main() -> None:
    """Build, check, install per extra; exit non-zero on the first failure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="a server where a scratch database may be created (default: $PGQUEUE_TEST_DSN)",
    )
    parser.add_argument(
        "--extras", help="a subset, joined with +: psycopg+sqlalchemy,psycopg (`bare`: no extra)"
    )
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    args = parser.parse_args()
    extras = EXTRAS
    if args.extras:
        wanted = ["" if e == "bare" else e for e in args.extras.split("+")]
        extras = [e for e in EXTRAS if e in wanted]
    started = time.monotonic()
    sdist, wheel = build(args.outdir)
    print(f"built {sdist.name} and {wheel.name}")
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
    print("twine check --strict: passed")
    name = f"pgqueue_dist_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = args.dsn.rsplit("/", 1)[0] + "/" + name
    try:
        with (
            tempfile.TemporaryDirectory(prefix="pgqueue-dist-") as tmp,
            ThreadPoolExecutor(3) as pool,
        ):
            for line in pool.map(lambda e: smoke(e, wheel, dsn, Path(tmp)), extras):
                print(line)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    print(f"{len(extras)} installs checked in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
