"""Dependencies: ranges in pyproject.toml, exact pins in constraints.txt, and what pip does
when cdcflow is installed into an existing PySpark environment (no Spark)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import orjson
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cdcflow.spark.jars import TESTED_PYSPARK

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs.extend(extra)
    return [Requirement(r) for r in reqs]


def _pins(file: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{file}: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


@pytest.mark.parametrize(
    ("file", "line"), [("constraints.txt", "4.1"), ("constraints-spark35.txt", "3.5")]
)
def test_every_declared_dependency_is_pinned_inside_its_range(file: str, line: str) -> None:
    pins = _pins(file)
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} has no pin in {file}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{file} pins {req.name}=={pins[name]}, outside {req}"
        )
    assert pins["pyspark"].startswith(line + "."), f"{file} is the Spark {line} line"
    # the release a missing Kafka connector's error points to is the one CI runs on
    assert TESTED_PYSPARK[line] == pins["pyspark"], f"cdcflow.spark.jars.TESTED_PYSPARK, {file}"


def _stand_in(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """An installed distribution as pip sees it: its metadata, no code."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    extras = sorted({r.split('extra == "', 1)[1].rstrip('"') for r in requires if "extra ==" in r})
    lines += [f"Provides-Extra: {e}" for e in extras]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


#: What an existing environment of each Spark line holds (PySpark's own requirements as its
#: metadata states them, and the NumPy it allows).
_STACKS = {
    "3.5": (
        "3.5.1",
        (
            "py4j==0.10.9.7",
            'pandas>=1.0.5; extra == "sql"',
            'pyarrow>=4.0.0; extra == "sql"',
            'numpy<2,>=1.15; extra == "sql"',
        ),
        "1.26.4",
    ),
    "4.1": (
        "4.1.0",
        (
            "py4j<0.10.9.10,>=0.10.9.7",
            'pandas>=2.2.0; extra == "sql"',
            'pyarrow>=15.0.0; extra == "sql"',
            'numpy>=1.21; extra == "sql"',
        ),
        "2.3.5",
    ),
}


@pytest.mark.services
@pytest.mark.parametrize("line", sorted(_STACKS))
def test_install_keeps_an_existing_pyspark_and_pyarrow(tmp_path: Path, line: str) -> None:
    """pip's resolver, run for real (``--dry-run``) against an environment holding PySpark
    3.5.1 (or 4.1.0), pyarrow 18.1.0 and NumPy (their metadata, as pip reads them) and no
    pandas: it installs cdcflow, its own dependencies and pandas (PySpark's ``sql`` extra),
    and replaces none of them. ``make check-install`` does the same with the real
    packages."""
    pyspark, requires, numpy = _STACKS[line]
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    [site] = (env / "lib").glob("python3*/site-packages")
    _stand_in(site, "pyspark", pyspark, requires)
    _stand_in(site, "py4j", "0.10.9.7")
    _stand_in(site, "pyarrow", "18.1.0")
    _stand_in(site, "numpy", numpy)
    repo = tmp_path / "cdcflow"
    repo.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", repo)
    shutil.copy2(ROOT / "README.md", repo)
    shutil.copytree(ROOT / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__"))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env / "bin" / "python"),
            "--disable-pip-version-check",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            f"{repo}[spark]",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    planned = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in orjson.loads(report.read_bytes())["install"]
    }
    assert "cdcflow" in planned and "pandas" in planned and "urllib3" in planned
    kept = {"pyspark", "py4j", "pyarrow", "numpy"} & set(planned)
    assert not kept, f"pip would replace {sorted(kept)}: {planned}"
