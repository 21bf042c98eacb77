"""How much of each script is the algorithm: its code lines (no blank lines, comments or docstrings) split into
the algorithm, its config checks (`validate`) and the plumbing that hands it to the harness (imports,
`harness.prepare_jax`, `ALGORITHM`, `main`, the `__main__` guard and the `make_train` wrapper).

    python benchmarks/plumbing.py ppo.py pqn.py dqn_tabular_q.py reinforce.py td3.py
"""

import ast
import io
import sys
import tokenize

PLUMBING = {"main", "make_train", "ALGORITHM"}
SKIPPED = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def is_docstring(statement) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def code_lines(source):
    """-> (numbers of the lines that hold code, the module's AST)."""
    tree = ast.parse(source)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
            # a docstring, and in a dataclass each field's docstring
            statements = node.body if isinstance(node, ast.ClassDef) else node.body[:1]
            for statement in statements:
                if is_docstring(statement):
                    docs.update(range(statement.lineno, statement.end_lineno + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in SKIPPED:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - docs, tree


def split(path):
    """-> (total lines, code lines, algorithm, checks, plumbing) of a script."""
    source = open(path).read()
    lines, tree = code_lines(source)
    plumbing, checks = set(), set()
    for node in tree.body:
        span = set(range(node.lineno, node.end_lineno + 1))
        name = getattr(node, "name", None)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        if (isinstance(node, ast.Import | ast.ImportFrom | ast.If) or name in PLUMBING
                or (isinstance(node, ast.Expr) and "prepare_jax" in ast.unparse(node))):
            plumbing |= span
        elif name == "validate":
            checks |= span
    p, c = len(lines & plumbing), len(lines & checks)
    return len(source.splitlines()), len(lines), len(lines) - p - c, c, p


if __name__ == "__main__":
    print("| script | lines | code lines | algorithm | checks | plumbing |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for path in sys.argv[1:]:
        total, code, algorithm, checks, plumbing = split(path)
        print(f"| {path} | {total} | {code} | {algorithm} ({algorithm / code:.0%}) | {checks} ({checks / code:.0%}) "
              f"| {plumbing} ({plumbing / code:.0%}) |")
