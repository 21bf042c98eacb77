"""The repository the committed files belong to, and paths as the runner's messages and committed files name them:
relative to the repository inside it, never a folder of one machine in what is committed."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def inside_repository(path) -> bool:
    path = os.path.abspath(path)
    return path == ROOT or path.startswith(ROOT + os.sep)


def shown(path) -> str:
    """A path as messages show it: relative to the repository inside it, absolute outside."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if inside_repository(path) else path


def portable(value):
    """A value as a record keeps it: an absolute path inside the repository made relative to it, one outside it
    None (a folder of one machine), anything else as it is; dicts and lists item by item."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return os.path.relpath(value, ROOT) if inside_repository(value) else None
    return value
