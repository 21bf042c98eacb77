"""scanrl as a package: the pinned requirements files (the tested lock) satisfy the ranges pyproject.toml declares,
for the runtime dependencies and each optional suite's extra."""

import tomllib

import pytest
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(name: str) -> dict[str, str]:
    """{package: version} of a requirements file and the files it includes (-r)."""
    found = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found |= pins(line[3:].strip())
        elif "==" in line:
            package, version = line.split("==")
            found[canonicalize_name(package)] = version.strip()
    return found


@pytest.mark.parametrize("extra", [None, *PROJECT["optional-dependencies"]])
def test_the_pinned_requirements_satisfy_the_package_ranges(extra):
    lock = pins("requirements.txt" if extra is None else f"requirements-{extra}.txt")
    ranges = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    for requirement in map(Requirement, ranges):
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement.name} is not pinned in the lock of {extra or 'the runtime'}"
        assert requirement.specifier.contains(lock[name]), f"{name}=={lock[name]} is outside {requirement}"

