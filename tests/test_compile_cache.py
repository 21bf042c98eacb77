"""scanrl/harness/compile_cache.py: JAX's persistent compilation cache: a hit gives identical
results; only entries this program wrote are run, and only from a folder no one else can write."""

import dataclasses
import json
import os

import jax
import pytest
from cases import tiny_config


@pytest.mark.slow
def test_a_compile_cache_hit_gives_identical_results(tmp_path):
    """The second run of a command loads its programs from the persistent compilation cache (JAX counts the hits)
    and gives bit-identical metrics and returns; the cache lives where --compile-cache says."""
    hits = []

    def count(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    module, config = tiny_config("ppo", tmp_path / "runs", compile_cache=str(tmp_path / "cache"))
    jax.monitoring.register_event_listener(count)
    try:
        counts = []
        for name in ("first", "second"):
            before = len(hits)
            module.main(dataclasses.replace(config, run_name=name))
            counts.append(len(hits) - before)
    finally:
        jax.monitoring.unregister_event_listener(count)
    assert counts[0] == 0 and counts[1] >= 1, counts
    assert list((tmp_path / "cache").glob("*/jit_segment-*")), "no training program in the cache"
    first, second = (tmp_path / "runs" / name for name in ("first", "second"))
    assert (first / "metrics.csv").read_bytes() == (second / "metrics.csv").read_bytes()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (first, second)]
    assert summaries[0]["eval_return"] == summaries[1]["eval_return"]


def test_the_compile_cache_runs_only_entries_it_wrote_and_opens_only_regular_files(tmp_path, capsys):
    """An entry is tied to the program that wrote it (this format, jax and jaxlib) and to its key and content: one
    another program wrote under the same key is not found, a damaged or foreign one is dropped with one note (it
    used to fail every later run), and a FIFO or a link at an entry's name is dropped without being opened (a FIFO
    hung the run)."""
    import threading

    from scanrl.harness.compile_cache import FileCache

    cache = FileCache(tmp_path)
    cache.put("jit_f-1", b"executable")
    assert cache.get("jit_f-1") == b"executable"
    other = FileCache(tmp_path)
    other.program = "another-program"
    assert other.get("jit_f-1") is None  # another program's entries are its own
    other.put("jit_f-2", b"theirs")
    assert cache.get("jit_f-2") is None

    (entry,) = [p for p in tmp_path.iterdir() if p.name.startswith("jit_f-1-")]
    entry.write_bytes(entry.read_bytes()[:-1] + b"X")  # damaged
    assert cache.get("jit_f-1") is None and not entry.exists()
    entry.write_bytes(b"a foreign executable")
    assert cache.get("jit_f-1") is None and not entry.exists()
    victim = tmp_path.parent / "victim"
    victim.write_bytes(b"precious")
    entry.symlink_to(victim)
    assert cache.get("jit_f-1") is None and not entry.is_symlink() and victim.read_bytes() == b"precious"
    os.mkfifo(entry)
    got = []
    reader = threading.Thread(target=lambda: got.append(cache.get("jit_f-1")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # let the thread go before failing
        with open(entry, "wb"):
            pass
        pytest.fail("a FIFO at an entry's name was opened and waited on")
    assert got == [None] and not entry.exists()
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: compile cache: dropped "), notes
    cache.put("jit_f-1", b"compiled again")
    assert cache.get("jit_f-1") == b"compiled again"


def test_the_compile_cache_is_used_only_in_a_folder_no_one_else_can_write(tmp_path, capsys, monkeypatch):
    """The digest finds damage, not forgery: anyone who can write the folder can compute it. So, as ssh does with
    its keys, a cache folder others can write is refused (one note, the run goes on without it), and one scanrl
    makes is this user's alone whatever the umask."""
    from scanrl.harness import compile_cache

    monkeypatch.setattr(compile_cache, "install_cache_store", lambda store: None)
    monkeypatch.setattr(compile_cache.jax.config, "update", lambda *args: None)
    old = os.umask(0o000)
    try:
        made = compile_cache.start(str(tmp_path / "mine" / "cache"))  # folders above the cache are made too
    finally:
        os.umask(old)
    assert made is not None and os.umask(old) == old
    assert [os.stat(folder).st_mode & 0o777 for folder in (made, os.path.dirname(made), tmp_path / "mine")] == [
        0o700] * 3
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert compile_cache.start(str(shared)) is None
    (note,) = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("note: compile cache off: ") and "is writable by others (mode drwxrwxrwx)" in note, note
    assert not any(shared.iterdir())  # nothing made in a folder it refuses
