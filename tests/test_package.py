"""scanrl as a package: the pinned requirements files (the tested lock) satisfy the ranges pyproject.toml declares,
for the runtime dependencies and each optional suite's extra; CI runs the README's test lines and nothing more, which
install this checkout; the code is ruff-clean and the docs site builds."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

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



def commands(text: str) -> list[str]:
    """The command lines of a shell text: comments, blank lines and `set`/`cd` lines left out."""
    lines = (line.split(" #")[0].strip() for line in text.splitlines() if not line.lstrip().startswith("#"))
    return [line for line in lines if line and not line.startswith(("set ", "cd "))]


def test_ci_runs_exactly_the_readmes_test_lines():
    """.ci/run makes a virtualenv, upgrades pip, then runs the README's "Tests" block and nothing else: a step only
    CI takes would hide an install step the README lacks (the copied-script tests once passed only in CI)."""
    section = (ROOT / "README.md").read_text().split("\n## Tests\n", 1)[1]
    readme = commands(section.split("```bash\n", 1)[1].split("```", 1)[0])
    ci = commands((ROOT / ".ci" / "run").read_text())
    setup = ["python3 -m venv .venv", "source .venv/bin/activate", "python -m pip install --quiet --upgrade pip"]
    assert ci[:len(setup)] == setup, ci
    assert ci[len(setup):] == readme, f".ci/run runs {ci[len(setup):]}, the README's Tests block {readme}"


def test_the_installed_scanrl_is_this_checkout():
    """The README's test lines install scanrl editable (`-e .`): a copied script run outside the repository imports
    this checkout's package, not a stale wheel, and the tests that copy scripts need nothing more."""
    found = subprocess.run([sys.executable, "-c", "import scanrl; print(scanrl.__file__)"], cwd="/",
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                 if k != "PYTHONPATH"})
    assert found.returncode == 0, (f"scanrl is not installed: pip install --no-compile -r requirements-dev.txt -e . "
                                   f"({found.stderr})")
    assert Path(found.stdout.strip()).parent == ROOT / "scanrl", (
        f"the installed scanrl is {found.stdout.strip()}, not this checkout's: pip install -e .")


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_docs_site_builds_strict(tmp_path):
    """mkdocs build --strict: a broken link, a missing anchor or a page left out of mkdocs.yml's nav fails it."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_docstring_or_comment_names_a_harness_module_or_function_that_is_gone():
    """Modules moved and functions were renamed, and text naming them drifted (a test file's docstring named
    scanrl/harness/evaluation.py, gone since the evaluation moved): every `harness.<module>[.<name>]`,
    `scanrl/harness/<module>.py` and, inside the harness, `<module>.<name>` in backticks or brackets names what
    exists."""
    import ast
    import io
    import re
    import tokenize

    folder = ROOT / "scanrl" / "harness"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    defined = {m: {n.name for n in ast.walk(ast.parse((folder / f"{m}.py").read_text()))
                   if isinstance(n, ast.FunctionDef | ast.ClassDef)} | {
                  t.id for n in ast.parse((folder / f"{m}.py").read_text()).body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)} for m in modules}
    init = (folder / "__init__.py").read_text()
    exported = set(re.findall(r'"(\w+)": "\w+"', init)) | set(re.findall(r"^def (\w+)", init, re.M))
    files = [*ROOT.glob("*.py"), *(ROOT / "scanrl").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "tests").glob("*.py")]
    wrong = []
    for path in files:
        if path.name == "test_package.py":  # this test's own docstring names what was wrong
            continue
        text = path.read_text()
        for module in re.findall(r"scanrl/harness/(\w+)\.py", text):
            if module not in modules | {"__init__"}:
                wrong.append(f"{path.name}: scanrl/harness/{module}.py")
        for module, name in re.findall(r"\bharness\.(\w+)(?:\.(\w+))?", text):
            if module not in modules | exported or (name and module in modules and name not in defined[module]):
                wrong.append(f"{path.name}: harness.{module}{'.' + name if name else ''}")
        if path.parent == folder:  # in its docstrings and comments (in code a variable may share a module's name)
            prose = [ast.get_docstring(n) or "" for n in ast.walk(ast.parse(text))
                     if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)]
            prose += [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                      if t.type == tokenize.COMMENT]
            for module, name in re.findall(r"[`(](\w+)\.(\w+)", "\n".join(prose)):
                if module in modules and name not in defined[module] | {"csv", "json", "png", "py"}:
                    wrong.append(f"{path.name}: `{module}.{name}`")
    assert not wrong, wrong
