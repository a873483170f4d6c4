"""Tests for annotated_transformer.data.

What is checked:
1. Download: files come from a local HTTP server into the cache
   ($XDG_CACHE_HOME/annotated-transformer/multi30k), the cache is reused, corrupt or truncated files
   raise and leave nothing behind, and an unreachable server or a 404 raises a ConnectionError that
   says how to work offline (--data-dir / data_dir= / $MULTI30K_DIR).
2. data_dir and $MULTI30K_DIR: local folders, missing files, unknown splits.
3. Verification against the SHA-256 table: a cached file changed since its download is an error, a
   file of one's own folder that differs from the published one a warning; each file is hashed once
   and again only when its size or mtime changes (remembered in the cache folder, never in the data
   folder; a cache that cannot be written just remembers nothing).
4. Bad input: damaged gzip files, misaligned files, empty lines, invalid UTF-8, Windows line
   endings.
5. `Vocab`: min_freq, special tokens first, deterministic order, encode/decode, state_dict (through
   torch.save too), errors.
6. Tokenizers: spaCy's words behind the `Tokenizer` interface (`SpacyTokenizer`, `join_words`).
7. `encode_pairs`, and the pipeline from a download to batches (the batches themselves are tested in
   tests/test_batching.py).
8. Corpora: `Multi30k`, `ParallelFiles` (every file checked up front, empty sides dropped and
   counted, origins by SHA-256) and `InMemory` satisfy `Corpus`; `open_corpus` finds a registered
   one by name and names the choices otherwise.

Everything is made here: a few hundred synthetic German/English pairs (tests/synthetic.py), gzipped
into a pytest tmp_path and served from 127.0.0.1. No internet, no ../shared folder and no real cache
are needed or touched (urlopen refuses other hosts).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import random
import re
import socket
import sys
import threading
import urllib.parse
import urllib.request
import warnings
from pathlib import Path

import pytest
import torch
from synthetic import sampled_pairs, write_split

import annotated_transformer.data as data
from annotated_transformer.config import ChoiceError
from annotated_transformer.data import (
    CORPORA,
    DATA_DIR_ENV,
    SPECIALS,
    STAMP_FILE,
    Corpus,
    EncodedPairs,
    InMemory,
    Multi30k,
    ParallelFiles,
    SpacyTokenizer,
    Tokenizer,
    Vocab,
    cache_dir,
    download,
    encode_pairs,
    join_words,
    load_multi30k,
    load_tokenizers,
    multi30k_paths,
    open_corpus,
    read_lines,
    sha256_of_file,
    split_files,
)

# Folders of synthetic Multi30k-named files differ from the published files, so reading them warns;
# the tests of section 3 check that warning, the others need not see it.
DIFFERS = "Multi30k file differs from the published one"

# --------------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------------

SPLIT_SIZES = {"train": 300, "val": 40, "test2016": 30}


def split_pairs(split: str) -> list[tuple[str, str]]:
    "The synthetic pairs of a split: each split its own sample."
    return sampled_pairs(SPLIT_SIZES[split], seed=list(SPLIT_SIZES).index(split))


def write_gz(path: Path, content: str | bytes) -> Path:
    "Overwrite `path` with gzipped `content` (text as UTF-8, bytes as they are)."
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        gzip.compress(content.encode("utf-8") if isinstance(content, str) else content, mtime=0)
    )
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def dataset_dir(tmp_path) -> Path:
    "A folder with all six synthetic Multi30k files."
    folder = tmp_path / "multi30k_files"
    folder.mkdir()
    for split in SPLIT_SIZES:
        write_split(folder, split, split_pairs(split))
    return folder


@pytest.fixture
def hashes(dataset_dir, monkeypatch) -> dict[str, str]:
    "SHA-256 table of the synthetic files, patched into the module in place of the real one."
    table = {p.name: sha256(p) for p in sorted(dataset_dir.iterdir())}
    assert set(table) == {
        name for split in data.SPLITS for name in data.split_files(split)
    }  # German and English
    monkeypatch.setattr(data, "SHA256", table)
    return table


# --------------------------------------------------------------------------------------------------
# Isolation: no real cache, no $MULTI30K_DIR, no proxies, no network other than 127.0.0.1
# --------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch) -> Path:
    """Point the cache into tmp_path, forget $MULTI30K_DIR and proxies, and refuse downloads from
    anywhere but 127.0.0.1."""
    cache_home = tmp_path / "xdg_cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    for name in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")

    real_urlopen = urllib.request.urlopen

    def local_only_urlopen(url, *args, **kwargs):
        host = urllib.parse.urlsplit(url if isinstance(url, str) else url.full_url).hostname
        if host != "127.0.0.1":
            raise AssertionError(f"the tests must not reach the network, but {url} was requested")
        return real_urlopen(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", local_only_urlopen)
    return cache_home


@pytest.fixture
def multi30k_cache(isolated) -> Path:
    return isolated / "annotated-transformer" / "multi30k"


# --------------------------------------------------------------------------------------------------
# A local HTTP server
# --------------------------------------------------------------------------------------------------


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    "Serves a folder and records the requested paths on the server."

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()

    def log_message(self, format, *args):  # keep the test output quiet
        pass


class TruncatingHandler(CountingHandler):
    "Announces the full file but sends only its first half, then closes the connection."

    def do_GET(self):
        self.server.requests.append(self.path)
        body = (Path(self.directory) / Path(self.path).name).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True


@pytest.fixture
def serve():
    """serve(folder, handler=CountingHandler) -> (base_url ending in '/', server); every server is
    shut down afterwards."""
    servers = []

    def start(folder: Path, handler=CountingHandler):
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(folder))
        )
        server.daemon_threads = True
        server.requests = []
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/", server

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def stop(server) -> None:
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    "A port on 127.0.0.1 that nothing listens on."
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------
# 1. Download and cache
# --------------------------------------------------------------------------------------------------


def test_split_files_and_cache_dir(isolated, monkeypatch, tmp_path):
    assert split_files("train") == ("train.de.gz", "train.en.gz")
    assert split_files("val") == ("val.de.gz", "val.en.gz")
    assert split_files("test2016") == ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz")
    assert cache_dir() == isolated / "annotated-transformer" / "multi30k"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "annotated-transformer" / "multi30k"


def test_download_lands_in_cache_and_loads(dataset_dir, hashes, serve, multi30k_cache):
    base_url, server = serve(dataset_dir)
    pairs = load_multi30k("train", base_url=base_url)
    assert pairs == split_pairs("train")
    assert sorted(server.requests) == ["/train.de.gz", "/train.en.gz"]
    assert sorted(p.name for p in multi30k_cache.iterdir()) == [
        "train.de.gz",
        "train.en.gz",
        STAMP_FILE,
    ]  # no .part leftovers
    for name in ("train.de.gz", "train.en.gz"):
        assert (multi30k_cache / name).read_bytes() == (dataset_dir / name).read_bytes()
    assert multi30k_paths("train", base_url=base_url) == (
        multi30k_cache / "train.de.gz",
        multi30k_cache / "train.en.gz",
    )

    # The other splits, each with its own pairs.
    assert load_multi30k("val", base_url=base_url) == split_pairs("val")
    assert load_multi30k("test2016", base_url=base_url) == split_pairs("test2016")
    assert sorted(p.name for p in multi30k_cache.iterdir()) == sorted([*hashes, STAMP_FILE])


def test_second_load_uses_the_cache(dataset_dir, hashes, serve):
    base_url, server = serve(dataset_dir)
    first = load_multi30k("val", base_url=base_url)
    assert len(server.requests) == 2
    second = load_multi30k("val", base_url=base_url)
    assert len(server.requests) == 2, f"the cached files were downloaded again: {server.requests}"
    stop(server)  # with the server gone, only the cache can answer
    third = load_multi30k("val", base_url=base_url)
    assert first == second == third == split_pairs("val")


def test_download_function_directly(dataset_dir, serve, tmp_path):
    base_url, server = serve(dataset_dir)
    dest = tmp_path / "somewhere" / "new" / "val.en.gz"
    source = dataset_dir / "val.en.gz"
    assert download(base_url + "val.en.gz", dest, sha256(source)) == dest
    assert dest.read_bytes() == source.read_bytes()
    assert [p.name for p in dest.parent.iterdir()] == ["val.en.gz"]


def test_download_wrong_hash_leaves_nothing(dataset_dir, serve, tmp_path):
    base_url, _ = serve(dataset_dir)
    dest = tmp_path / "dl" / "val.en.gz"
    with pytest.raises(ValueError, match="corrupt"):
        download(base_url + "val.en.gz", dest, "0" * 64)
    assert list(dest.parent.iterdir()) == []


def test_corrupt_download_raises_and_caches_nothing(
    dataset_dir, hashes, serve, multi30k_cache, tmp_path
):
    # Serve files that differ from the ones whose hashes the table holds.
    bad_dir = tmp_path / "tampered"
    bad_dir.mkdir()
    for split in SPLIT_SIZES:
        pairs = split_pairs(split)
        write_split(bad_dir, split, [(de.replace("Mann", "Frau"), en) for de, en in pairs])
    assert sha256(bad_dir / "train.de.gz") != hashes["train.de.gz"]
    base_url, server = serve(bad_dir)
    with pytest.raises(ValueError, match="corrupt") as info:
        load_multi30k("train", base_url=base_url)
    assert "train.de.gz" in str(info.value)
    assert server.requests == ["/train.de.gz"]
    assert not multi30k_cache.exists() or list(multi30k_cache.iterdir()) == []

    # A later good download still works.
    good_url, _ = serve(dataset_dir)
    assert load_multi30k("train", base_url=good_url) == split_pairs("train")


def test_truncated_download_raises_and_caches_nothing(dataset_dir, hashes, serve, multi30k_cache):
    base_url, server = serve(dataset_dir, TruncatingHandler)
    with pytest.raises(ValueError, match="corrupt"):
        load_multi30k("val", base_url=base_url)
    assert server.requests == ["/val.de.gz"]
    assert not multi30k_cache.exists() or list(multi30k_cache.iterdir()) == []


def assert_offline_hint(message: str) -> None:
    """The message names every way to work offline: the command-line flag, the Python argument, the
    environment variable."""
    assert "--data-dir" in message
    assert "data_dir=" in message
    assert DATA_DIR_ENV in message


def test_server_down_raises_connection_error(hashes, multi30k_cache):
    base_url = f"http://127.0.0.1:{closed_port()}/"
    with pytest.raises(ConnectionError) as info:
        load_multi30k("train", base_url=base_url)
    assert_offline_hint(str(info.value))
    assert base_url + "train.de.gz" in str(info.value)
    assert not multi30k_cache.exists() or list(multi30k_cache.iterdir()) == []


def test_http_404_raises_connection_error(hashes, serve, multi30k_cache, tmp_path):
    empty = tmp_path / "empty_site"
    empty.mkdir()
    base_url, server = serve(empty)
    with pytest.raises(ConnectionError) as info:
        load_multi30k("val", base_url=base_url)
    assert_offline_hint(str(info.value))
    assert "404" in str(info.value)
    assert server.requests == ["/val.de.gz"]
    assert not multi30k_cache.exists() or list(multi30k_cache.iterdir()) == []


def test_stopped_server_raises_connection_error(dataset_dir, hashes, serve):
    base_url, server = serve(dataset_dir)
    stop(server)
    with pytest.raises(ConnectionError) as info:
        load_multi30k("test2016", base_url=base_url)
    assert_offline_hint(str(info.value))


# --------------------------------------------------------------------------------------------------
# 2. data_dir and $MULTI30K_DIR
# --------------------------------------------------------------------------------------------------


def test_data_dir_reads_local_folder(dataset_dir, hashes, multi30k_cache):
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # the published files (here: those whose hashes the table holds) do not warn
        for split in SPLIT_SIZES:
            assert load_multi30k(split, data_dir=dataset_dir) == split_pairs(split)
            assert load_multi30k(split, data_dir=str(dataset_dir)) == split_pairs(split)
        assert multi30k_paths("val", data_dir=dataset_dir) == (
            dataset_dir / "val.de.gz",
            dataset_dir / "val.en.gz",
        )
    assert [p.name for p in multi30k_cache.iterdir()] == [
        STAMP_FILE
    ]  # nothing downloaded: only what was verified


def test_env_var_reads_local_folder(dataset_dir, hashes, monkeypatch, multi30k_cache):
    monkeypatch.setenv(DATA_DIR_ENV, str(dataset_dir))
    assert load_multi30k("val") == split_pairs("val")
    assert load_multi30k("train") == split_pairs("train")
    assert multi30k_paths("test2016") == (
        dataset_dir / "test_2016_flickr.de.gz",
        dataset_dir / "test_2016_flickr.en.gz",
    )
    assert [p.name for p in multi30k_cache.iterdir()] == [STAMP_FILE]


def test_data_dir_argument_wins_over_env_var(dataset_dir, monkeypatch, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    write_split(other, "val", [("Ein Satz.", "A sentence.")])
    monkeypatch.setenv(DATA_DIR_ENV, str(dataset_dir))
    assert load_multi30k("val", data_dir=other) == [("Ein Satz.", "A sentence.")]


@pytest.mark.parametrize("via_env", [False, True])
def test_missing_file_in_data_dir(tmp_path, monkeypatch, via_env):
    folder = tmp_path / "partial"
    folder.mkdir()
    write_split(folder, "val", split_pairs("val"))
    (folder / "val.en.gz").unlink()
    if via_env:
        monkeypatch.setenv(DATA_DIR_ENV, str(folder))
    for call in (load_multi30k, multi30k_paths):  # found missing before anything is read
        with pytest.raises(FileNotFoundError) as info:
            call("val", data_dir=None if via_env else folder)
        assert str(folder / "val.en.gz") in str(info.value)
        assert str(folder / "val.de.gz") + "," not in str(
            info.value
        )  # the present file is not reported missing


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="train.de.gz"):
        load_multi30k("train", data_dir=tmp_path / "does_not_exist")


@pytest.mark.parametrize("split", ["training", "test", "Train", "", "test_2016_flickr"])
def test_unknown_split(split, dataset_dir):
    with pytest.raises(ValueError, match="unknown Multi30k split"):
        load_multi30k(split, data_dir=dataset_dir)
    with pytest.raises(ValueError):
        split_files(split)


# --------------------------------------------------------------------------------------------------
# 3. Verification against the SHA-256 table
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def hash_calls(monkeypatch) -> list[Path]:
    "The files the module really hashes (not those it finds remembered), in order."
    calls, real = [], data.sha256_of_file

    def counting(path):
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(data, "sha256_of_file", counting)
    return calls


def stamps(multi30k_cache) -> dict:
    return json.loads((multi30k_cache / STAMP_FILE).read_text())


def test_tampered_cache_file_is_an_error_naming_what_to_delete(
    dataset_dir, hashes, serve, multi30k_cache
):
    base_url, server = serve(dataset_dir)
    assert load_multi30k("val", base_url=base_url) == split_pairs("val")
    cached = multi30k_cache / "val.en.gz"
    write_gz(
        cached, "".join(f"{en.upper()}\n" for _, en in split_pairs("val"))
    )  # changed after its verified download
    with pytest.raises(ValueError) as info:
        load_multi30k("val", base_url=base_url)
    message = str(info.value)
    assert (
        f"{cached} is corrupt" in message and "delete it and it will be downloaded again" in message
    )
    assert sha256(cached) in message and hashes["val.en.gz"] in message
    assert str(multi30k_cache / "val.de.gz") not in message  # the intact file is not blamed
    assert len(server.requests) == 2  # not downloaded over
    # As the message says: deleting it downloads it again.
    cached.unlink()
    assert load_multi30k("val", base_url=base_url) == split_pairs("val")
    assert server.requests[2:] == ["/val.en.gz"]


def test_cached_file_corrupt_before_any_stamp_is_an_error(dataset_dir, hashes, multi30k_cache):
    "A cache filled before files were stamped (or by hand) is verified too, and no server is asked."
    multi30k_cache.mkdir(parents=True)
    for name in split_files("test2016"):
        (multi30k_cache / name).write_bytes((dataset_dir / name).read_bytes())
    write_gz(multi30k_cache / "test_2016_flickr.de.gz", "Ein Satz.\n")
    with pytest.raises(
        ValueError, match=re.escape(f"{multi30k_cache / 'test_2016_flickr.de.gz'} is corrupt")
    ):
        load_multi30k("test2016", base_url=f"http://127.0.0.1:{closed_port()}/")


def test_own_file_that_differs_warns_and_is_used(dataset_dir, hashes, multi30k_cache):
    de, en = dataset_dir / "val.de.gz", dataset_dir / "val.en.gz"
    cleaned = [(d.replace("Mann", "Herr"), e) for d, e in split_pairs("val")]  # say, a cleaned copy
    write_gz(de, "".join(f"{d}\n" for d, _ in cleaned))
    with pytest.warns(UserWarning) as caught:
        assert load_multi30k("val", data_dir=dataset_dir) == cleaned  # used as it is
    assert [str(w.message) for w in caught] == [
        f"{DIFFERS}: {de} has SHA-256 {sha256(de)}, the published val.de.gz "
        f"{hashes['val.de.gz']}; it is used as it is"
    ]  # one warning, for the file that differs only


def test_own_files_through_env_var_warn_too(tmp_path, monkeypatch):
    folder = tmp_path / "own"
    folder.mkdir()
    de, en = write_split(folder, "val", [("Hallo Welt.", "Hello world.")])
    monkeypatch.setenv(DATA_DIR_ENV, str(folder))
    with pytest.warns(UserWarning, match=DIFFERS) as caught:
        assert load_multi30k("val") == [("Hallo Welt.", "Hello world.")]
    assert [str(w.message).split(" has ")[0] for w in caught] == [
        f"{DIFFERS}: {de}",
        f"{DIFFERS}: {en}",
    ]


def test_unchanged_files_are_hashed_once(dataset_dir, hashes, hash_calls, multi30k_cache):
    for _ in range(3):
        assert load_multi30k("val", data_dir=dataset_dir) == split_pairs("val")
        assert data.file_sha256(dataset_dir / "val.de.gz") == hashes["val.de.gz"]
    assert hash_calls == [dataset_dir / "val.de.gz", dataset_dir / "val.en.gz"]
    # Remembered by absolute path, with size and mtime, in the cache folder: the data folder holds
    # only its files.
    de = (dataset_dir / "val.de.gz").resolve()
    assert stamps(multi30k_cache)[str(de)] == [
        de.stat().st_size,
        de.stat().st_mtime_ns,
        hashes["val.de.gz"],
    ]
    assert sorted(p.name for p in dataset_dir.iterdir()) == sorted(hashes)


def test_relative_data_dir_is_remembered_by_absolute_path(
    dataset_dir, hashes, hash_calls, monkeypatch, multi30k_cache
):
    monkeypatch.chdir(dataset_dir.parent)
    load_multi30k("val", data_dir=dataset_dir.name)
    monkeypatch.chdir(dataset_dir)
    load_multi30k("val", data_dir=".")  # the same files by another name: not hashed again
    assert len(hash_calls) == 2
    assert sorted(stamps(multi30k_cache)) == [
        str(dataset_dir.resolve() / name) for name in split_files("val")
    ]


def test_downloads_are_not_hashed_again(dataset_dir, hashes, hash_calls, serve):
    base_url, server = serve(dataset_dir)
    for _ in range(2):
        assert load_multi30k("train", base_url=base_url) == split_pairs("train")
    assert hash_calls == []  # hashed while they streamed in, and remembered
    assert len(server.requests) == 2


def test_a_new_mtime_or_size_has_a_file_hashed_again(dataset_dir, hashes, hash_calls):
    de = dataset_dir / "val.de.gz"
    load_multi30k("val", data_dir=dataset_dir)
    assert len(hash_calls) == 2
    before = de.stat()
    os.utime(de, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # touched, same bytes
    load_multi30k("val", data_dir=dataset_dir)
    assert hash_calls[2:] == [de]

    # Other bytes of another length, the mtime set back: the size tells.
    pairs = [(d + " Ja.", e) for d, e in split_pairs("val")]
    write_gz(de, "".join(f"{d}\n" for d, _ in pairs))
    os.utime(de, ns=(before.st_atime_ns, de.stat().st_mtime_ns - 5_000_000_000))
    stamp = de.stat()
    assert stamp.st_size != before.st_size
    with pytest.warns(UserWarning, match=re.escape(f"{DIFFERS}: {de}")):
        assert load_multi30k("val", data_dir=dataset_dir) == pairs
    assert hash_calls[3:] == [de]

    # Other bytes of the same length (the gzip header's timestamp), another mtime: the mtime tells.
    changed = bytearray(de.read_bytes())
    changed[4] ^= 1
    de.write_bytes(changed)
    assert de.stat().st_size == stamp.st_size
    os.utime(de, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1))
    with pytest.warns(UserWarning, match=re.escape(f"has SHA-256 {sha256(de)}")):
        assert load_multi30k("val", data_dir=dataset_dir) == pairs
    assert hash_calls[4:] == [de]


def test_a_cache_that_cannot_be_written_still_loads(
    dataset_dir, hashes, hash_calls, monkeypatch, tmp_path
):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(
        "XDG_CACHE_HOME", str(blocker)
    )  # the cache folder would be inside a file: it cannot be made
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert load_multi30k("val", data_dir=dataset_dir) == split_pairs("val")
    assert len(hash_calls) == 4  # verified each time, just not remembered
    write_gz(dataset_dir / "val.en.gz", "Something else.\n" * SPLIT_SIZES["val"])
    with pytest.warns(UserWarning, match=DIFFERS):  # and still verified
        load_multi30k("val", data_dir=dataset_dir)


def test_a_damaged_stamp_file_is_replaced(dataset_dir, hashes, hash_calls, multi30k_cache):
    multi30k_cache.mkdir(parents=True)
    for damaged in (
        '{"truncated": [1, 2',
        "[1, 2, 3]",
        '{"%s": "not a stamp"}' % (dataset_dir / "val.de.gz").resolve(),
    ):
        (multi30k_cache / STAMP_FILE).write_text(damaged)
        hash_calls.clear()
        assert load_multi30k("val", data_dir=dataset_dir) == split_pairs("val")
        assert len(hash_calls) == 2
        assert len(stamps(multi30k_cache)) == 2
    assert sorted(p.name for p in multi30k_cache.iterdir()) == [
        STAMP_FILE
    ]  # no temporary files left


def test_stamps_of_files_gone_are_forgotten(tmp_path, multi30k_cache):
    files = [tmp_path / f"{i}.bin" for i in range(3)]
    for i, path in enumerate(files):
        path.write_bytes(bytes([i]) * 100)
    data.file_sha256(files[0])
    data.file_sha256(files[1])
    files[0].unlink()
    assert data.file_sha256(files[2]) == sha256(files[2])
    assert sorted(stamps(multi30k_cache)) == [str(files[1].resolve()), str(files[2].resolve())]


# --------------------------------------------------------------------------------------------------
# 4. Bad input
# --------------------------------------------------------------------------------------------------

TEXT = "".join(f"Satz Nummer {i} mit etwas Text.\n" for i in range(3000))
GZ = gzip.compress(TEXT.encode(), mtime=0)
# name: (bytes, the last good line before the error is found: an exact number, or a range)
CORRUPT_GZIP = {
    "plain text": (TEXT.encode(), 0),
    "cut off": (GZ[: len(GZ) // 2], range(1, 2999)),
    "header only": (GZ[:10], 0),
    "bad CRC": (GZ[:-8] + bytes([GZ[-8] ^ 1]) + GZ[-7:], 3000),
    "bad length": (GZ[:-4] + bytes([GZ[-4] ^ 1]) + GZ[-3:], 3000),
    "invalid deflate data": (GZ[:10] + b"\x07" + bytes(20), 0),  # block type 3 does not exist
}


@pytest.mark.parametrize("kind", CORRUPT_GZIP)
def test_damaged_gzip_file_is_one_clear_error(kind, tmp_path):
    content, good_lines = CORRUPT_GZIP[kind]
    path = tmp_path / "damaged.de.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        read_lines(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a valid gzip file: ")
    assert "\n" not in message and info.value.__cause__ is None and info.value.__suppress_context__
    if good_lines == 0:
        assert message.endswith("(found before the first line)")
    else:
        found = int(re.fullmatch(r".*\(found after line (\d+)\)", message).group(1))
        assert found in (good_lines if isinstance(good_lines, range) else [good_lines])


def test_damaged_gzip_file_through_load(dataset_dir):
    de, en = dataset_dir / "val.de.gz", dataset_dir / "val.en.gz"
    en.write_bytes(en.read_bytes()[:-20])  # cut off
    with pytest.raises(ValueError, match=re.escape(f"{en}: not a valid gzip file")) as info:
        load_multi30k("val", data_dir=dataset_dir)
    assert str(de) not in str(info.value)


def test_gzip_check_does_not_hide_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_lines(tmp_path / "nothing.gz")


def test_line_count_mismatch(tmp_path):
    folder = tmp_path / "misaligned"
    folder.mkdir()
    de, en = write_split(folder, "val", [(f"Satz {i}.", f"Sentence {i}.") for i in range(11)])
    write_gz(en, "".join(f"Sentence {i}.\n" for i in range(7)))
    with pytest.raises(ValueError) as info:
        load_multi30k("val", data_dir=folder)
    message = str(info.value)
    assert str(de) in message and str(en) in message
    rest = message.replace(str(de), "").replace(str(en), "")
    assert re.search(r"\b11\b", rest) and re.search(r"\b7\b", rest), message


def test_empty_line(tmp_path):
    path = write_gz(tmp_path / "f.de.gz", "Eins.\nZwei.\n\nVier.\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3")):
        read_lines(path)


def test_whitespace_only_line(tmp_path):
    path = write_gz(tmp_path / "f.de.gz", "Eins.\n \t \r\nDrei.\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        read_lines(path)


def test_empty_line_through_load(tmp_path):
    folder = tmp_path / "gap"
    folder.mkdir()
    de, en = write_split(folder, "val", [("Eins.", "One."), ("Zwei.", "Two.")])
    write_gz(en, "One.\n\n")  # two lines, the second empty
    with pytest.raises(ValueError, match=re.escape(f"{en}:2")):
        load_multi30k("val", data_dir=folder)


def test_invalid_utf8(tmp_path):
    path = write_gz(tmp_path / "f.en.gz", b"Fine.\nAlso fine.\nBroken \xff\xfe here.\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3")) as info:
        read_lines(path)
    assert "invalid UTF-8" in str(info.value)


def test_invalid_utf8_through_load(tmp_path):
    folder = tmp_path / "latin1"
    folder.mkdir()
    de, _ = write_split(folder, "val", [("a", "a"), ("b", "b")])
    write_gz(de, "Ein Mann.\nGroße Straße.\n".encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(f"{de}:2")) as info:
        load_multi30k("val", data_dir=folder)
    assert "invalid UTF-8" in str(info.value)


def test_windows_line_endings_are_stripped(tmp_path):
    folder = tmp_path / "crlf"
    folder.mkdir()
    de, en = write_split(folder, "val", [])
    write_gz(de, "Ein Mann fährt.\r\nZwei Frauen.\r\nDrei Kinder.")  # no final line ending
    write_gz(en, "A man rides.\r\nTwo women.\r\nThree children.\r\n")
    assert read_lines(de) == ["Ein Mann fährt.", "Zwei Frauen.", "Drei Kinder."]
    assert load_multi30k("val", data_dir=folder) == [
        ("Ein Mann fährt.", "A man rides."),
        ("Zwei Frauen.", "Two women."),
        ("Drei Kinder.", "Three children."),
    ]


def test_read_lines_keeps_inner_whitespace_and_unicode(tmp_path):
    lines = ["  Ein Mann  fährt.", "Straße — “Zitat”", "日本語のテキスト"]
    path = write_gz(tmp_path / "u.de.gz", "\n".join(lines) + "\n")
    assert read_lines(path) == lines


# --------------------------------------------------------------------------------------------------
# 5. Vocab
# --------------------------------------------------------------------------------------------------

SENTENCES = [
    ["the", "dog", "runs", "."],
    ["the", "cat", "sleeps", "."],
    ["a", "dog", "and", "a", "cat", "."],
    ["zebra", "zebra", "apple", "apple", "once"],
]
# counts: . 3, the 2, dog 2, cat 2, a 2, zebra 2, apple 2; runs, sleeps, and, once 1


def test_vocab_build_default_min_freq():
    vocab = Vocab.build(SENTENCES)
    assert vocab.itos == [*SPECIALS, ".", "a", "apple", "cat", "dog", "the", "zebra"]
    assert len(vocab) == 11
    assert [vocab.stoi[s] for s in SPECIALS] == [0, 1, 2, 3]
    assert (vocab.bos, vocab.eos, vocab.pad, vocab.unk) == (0, 1, 2, 3)
    assert vocab.itos[:4] == ["<s>", "</s>", "<blank>", "<unk>"]
    for token in ("runs", "sleeps", "and", "once"):
        assert token not in vocab.stoi


def test_vocab_build_min_freq_values():
    assert Vocab.build(SENTENCES, min_freq=1).itos == [
        *SPECIALS,
        ".",
        "a",
        "apple",
        "cat",
        "dog",
        "the",
        "zebra",
        "and",
        "once",
        "runs",
        "sleeps",
    ]
    assert Vocab.build(SENTENCES, min_freq=3).itos == [*SPECIALS, "."]
    assert Vocab.build(SENTENCES, min_freq=100).itos == list(SPECIALS)
    assert Vocab.build([]).itos == list(SPECIALS)


def test_vocab_order_is_frequency_then_alphabetical_and_deterministic():
    sentences = [["b"] * 5, ["c"] * 3, ["a"] * 3, ["d"] * 7, ["B"] * 3]
    expected = [*SPECIALS, "d", "b", "B", "a", "c"]  # ties sorted by code point ("B" < "a")
    assert Vocab.build(sentences).itos == expected
    for seed in range(5):
        shuffled = [list(s) for s in sentences]
        random.Random(seed).shuffle(shuffled)
        assert Vocab.build(shuffled).itos == expected
    assert Vocab.build(iter(sentences)).itos == expected  # any iterable, consumed once


def test_vocab_build_skips_specials_in_the_text():
    vocab = Vocab.build([["<unk>", "<s>", "x", "</s>", "<blank>"]] * 3)
    assert vocab.itos == [*SPECIALS, "x"]


def test_encode_decode_round_trip():
    vocab = Vocab.build(SENTENCES)
    tokens = ["the", "dog", "zebra", "a", "."]
    ids = vocab.encode(tokens)
    assert ids == [vocab.stoi[t] for t in tokens]
    assert all(4 <= i < len(vocab) for i in ids)
    assert vocab.decode(ids) == tokens
    assert vocab.decode(torch.tensor(ids)) == tokens  # tensors work too
    # Every token of the vocabulary round-trips.
    words = vocab.itos[4:]
    assert vocab.decode(vocab.encode(words)) == words


def test_unknown_tokens():
    vocab = Vocab.build(SENTENCES)
    assert vocab.encode(["the", "runs", "never-seen", "<unk>"]) == [vocab.stoi["the"], 3, 3, 3]
    assert vocab.decode(vocab.encode(["the", "runs", "."])) == ["the", "<unk>", "."]
    assert vocab.encode([]) == []
    assert vocab.decode([]) == []


def test_decode_specials():
    vocab = Vocab.build(SENTENCES)
    the, dog = vocab.stoi["the"], vocab.stoi["dog"]
    ids = [vocab.bos, the, vocab.pad, dog, vocab.unk, vocab.eos, the, vocab.pad, vocab.pad]
    assert vocab.decode(ids) == ["the", "dog", "<unk>"]
    assert vocab.decode(ids, strip_specials=False) == [
        "<s>",
        "the",
        "<blank>",
        "dog",
        "<unk>",
        "</s>",
        "the",
        "<blank>",
        "<blank>",
    ]
    assert vocab.decode([vocab.eos, the, dog]) == []
    assert vocab.decode([vocab.bos, vocab.pad]) == []
    assert vocab.decode(torch.tensor(ids)) == ["the", "dog", "<unk>"]


def test_state_dict_round_trip(tmp_path):
    vocab = Vocab.build(SENTENCES, min_freq=1)
    state = vocab.state_dict()
    assert state == {"itos": vocab.itos}
    state["itos"].append("mutated")  # the state is a copy
    assert "mutated" not in vocab.itos
    restored = Vocab.from_state_dict(vocab.state_dict())
    assert restored.itos == vocab.itos and restored.stoi == vocab.stoi
    assert restored.encode(["dog", "nope"]) == vocab.encode(["dog", "nope"])

    # As in a checkpoint: saved with torch.save, loaded with torch.load (safe weights-only loading
    # too).
    path = tmp_path / "checkpoint.pt"
    torch.save(
        {"src_vocab": vocab.state_dict(), "tgt_vocab": Vocab.build(SENTENCES).state_dict()}, path
    )
    for kwargs in ({}, {"weights_only": True}):
        checkpoint = torch.load(path, **kwargs)
        src = Vocab.from_state_dict(checkpoint["src_vocab"])
        tgt = Vocab.from_state_dict(checkpoint["tgt_vocab"])
        assert src.itos == vocab.itos
        assert tgt.itos == Vocab.build(SENTENCES).itos
        assert src.decode(src.encode(["a", "cat", "sleeps"])) == ["a", "cat", "sleeps"]


@pytest.mark.parametrize(
    "tokens",
    [
        ["dog", *SPECIALS],
        ["<s>", "</s>", "<unk>", "<blank>", "dog"],  # wrong order
        list(SPECIALS[:3]),  # too short
        [],
        ["<s>", "</s>", "<blank>"],
    ],
)
def test_vocab_needs_specials_first(tokens):
    with pytest.raises(ValueError, match="special tokens"):
        Vocab(tokens)


@pytest.mark.parametrize(
    "tokens", [[*SPECIALS, "dog", "cat", "dog"], [*SPECIALS, "<unk>"], [*SPECIALS, "x", "x"]]
)
def test_vocab_rejects_duplicates(tokens):
    with pytest.raises(ValueError, match="twice"):
        Vocab(tokens)
    with pytest.raises(ValueError):
        Vocab.from_state_dict({"itos": tokens})


def test_vocab_accepts_tuple_and_specials_only():
    assert Vocab(SPECIALS).itos == list(SPECIALS)
    assert Vocab((*SPECIALS, "x")).stoi["x"] == 4


# --------------------------------------------------------------------------------------------------
# 6. Tokenizers
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizers():
    return load_tokenizers()


def test_tokenizers_split_punctuation(tokenizers):
    de, en = tokenizers
    assert de.tokenize(["Ein Mann fährt Fahrrad."]) == [["Ein", "Mann", "fährt", "Fahrrad", "."]]
    assert en.tokenize(["Two dogs run, fast!"]) == [["Two", "dogs", "run", ",", "fast", "!"]]
    # Each language has its own exceptions: German ordinals and abbreviations, English contractions.
    assert de.tokenize(["Am 3. Mai z.B. nicht."]) == [["Am", "3.", "Mai", "z.B.", "nicht", "."]]
    assert en.tokenize(["The dog doesn't run."]) == [["The", "dog", "does", "n't", "run", "."]]


def test_tokenize_keeps_the_order_and_shows_a_progress_bar_only_when_asked(
    tokenizers, capsys, monkeypatch
):
    de, en = tokenizers
    texts = ["Ein Mann fährt Fahrrad.", "Zwei Frauen, die am Strand spielen!"]
    assert de.tokenize(texts) == [
        ["Ein", "Mann", "fährt", "Fahrrad", "."],
        ["Zwei", "Frauen", ",", "die", "am", "Strand", "spielen", "!"],
    ]
    assert en.tokenize([]) == []
    assert capsys.readouterr().err == ""  # no progress bar
    # Many texts (more than one spaCy batch would be needed at a small batch size) keep their order.
    many = [f"Satz {i}, bitte!" for i in range(1500)]
    assert de.tokenize(many, progress=True) == [
        ["Satz", str(i), ",", "bitte", "!"] for i in range(1500)
    ]
    assert capsys.readouterr().err == ""  # asked for, but standard error is no terminal

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert de.tokenize(many[:10], progress=True) == [
        ["Satz", str(i), ",", "bitte", "!"] for i in range(10)
    ]
    assert "tokenizing" in sys.stderr.getvalue()  # a bar, on a terminal
    with pytest.raises(TypeError, match="tokenize takes a list of texts, not one text"):
        de.tokenize("Ein Mann.")


def test_load_tokenizers_gives_the_tokenizers_of_the_languages():
    de, en = load_tokenizers()
    assert isinstance(de, SpacyTokenizer) and (de.lang, en.lang) == ("de", "en")
    [fr] = load_tokenizers(["fr"])
    assert fr.tokenize(["L'homme est là."]) == [["L'", "homme", "est", "là", "."]]
    assert isinstance(fr, Tokenizer)  # the interface every tokenizer has
    with pytest.raises(
        ValueError, match="^spaCy has no tokenizer for the language 'xa': use subwords"
    ):
        load_tokenizers(["de", "xa"])


@pytest.mark.parametrize(
    "sentence",
    [
        "Two young, White males are outside near many bushes.",
        "A man's dog isn't running; it's sitting (quietly) by the door!",
        'She says "hello" to the children.',
        "It costs $5 (or 10%).",
    ],
)
def test_detokenize_undoes_the_english_tokenizer(tokenizers, sentence):
    _, en = tokenizers
    tokens = en.tokenize([sentence])[0]
    assert en.detokenize(tokens) == join_words(tokens) == sentence


def test_join_words_spacing():
    assert join_words([]) == ""
    assert join_words(["A", "man", "'s", "hat", "."]) == "A man's hat."
    assert join_words(["(", "a", ")", "b"]) == "(a) b"
    assert join_words(["say", '"', "hi", '"', "now"]) == 'say "hi" now'


# --------------------------------------------------------------------------------------------------
# 7. encode_pairs, and a download to batches
# --------------------------------------------------------------------------------------------------


def test_encode_pairs_wraps_with_start_and_end():
    src_vocab = Vocab.build([["ein", "mann"]], min_freq=1)
    tgt_vocab = Vocab.build([["a", "man", "walks"]], min_freq=1)
    encoded = encode_pairs(
        [["ein", "mann"], ["mann", "unbekannt"]],
        [["a", "man", "walks"], ["man"]],
        src_vocab,
        tgt_vocab,
    )
    assert isinstance(encoded, EncodedPairs)
    assert len(encoded) == 2
    assert encoded.src[0].tolist() == [0, src_vocab.stoi["ein"], src_vocab.stoi["mann"], 1]
    assert encoded.src[1].tolist() == [0, src_vocab.stoi["mann"], src_vocab.unk, 1]
    assert encoded.tgt[0].tolist() == [0, *tgt_vocab.encode(["a", "man", "walks"]), 1]
    assert encoded.tgt[1].tolist() == [0, tgt_vocab.stoi["man"], 1]
    assert encoded.src[0].dtype == torch.long
    src, tgt = encoded[1]
    assert src.tolist() == encoded.src[1].tolist() and tgt.tolist() == encoded.tgt[1].tolist()
    assert [len(s) for s, _ in encoded] == [4, 4]  # a sequence of (source, target) pairs
    # Empty token lists still get both symbols.
    assert encode_pairs([[]], [[]], src_vocab, tgt_vocab).src[0].tolist() == [0, 1]


def test_end_to_end_from_local_server(dataset_dir, hashes, serve, tokenizers):
    "Download -> tokenize -> vocabularies -> batches, the way a training script would."
    from annotated_transformer.data import make_loader

    base_url, _ = serve(dataset_dir)
    de_tok, en_tok = tokenizers
    train = load_multi30k("train", base_url=base_url)
    val = load_multi30k("val", base_url=base_url)
    src_train = de_tok.tokenize([de for de, _ in train])
    tgt_train = en_tok.tokenize([en for _, en in train])
    src_vocab, tgt_vocab = Vocab.build(src_train), Vocab.build(tgt_train)
    assert "Mann" in src_vocab.stoi and "man" in tgt_vocab.stoi
    src_val = de_tok.tokenize([de for de, _ in val])
    tgt_val = en_tok.tokenize([en for _, en in val])
    encoded = encode_pairs(src_val, tgt_val, src_vocab, tgt_vocab)
    batches = list(make_loader(encoded, pad=src_vocab.pad, max_tokens=100, shuffle=False))
    assert sum(b.src.size(0) for b in batches) == len(val)
    for b in batches:
        assert b.src.size(0) == 1 or b.src.numel() <= 100 and b.tgt_y.numel() <= 100
        assert b.ntokens == int((b.tgt_y != src_vocab.pad).sum())
    seen = sorted(tuple(row[row != src_vocab.pad].tolist()) for b in batches for row in b.src)
    assert seen == sorted(tuple(src.tolist()) for src in encoded.src)  # every sentence once


def test_sha256_of_file_hashes_the_bytes_and_remembers_nothing(tmp_path, multi30k_cache):
    path = tmp_path / "own.txt"
    path.write_bytes(b"eins\nzwei\n")
    assert sha256_of_file(path) == hashlib.sha256(b"eins\nzwei\n").hexdigest()
    assert not (multi30k_cache / STAMP_FILE).exists()  # your own files: hashed every time


# ============================================================================ 8. corpora
def test_multi30k_corpus_reads_its_splits_in_its_languages(dataset_dir, isolated):
    corpus = Multi30k(dataset_dir)
    assert isinstance(corpus, Corpus) and (corpus.name, corpus.subwords) == ("multi30k", False)
    assert corpus.test_splits == ("test2016",)  # evaluation's default split
    assert corpus.pairs("val") == load_multi30k("val", data_dir=dataset_dir) == split_pairs("val")
    reversed_pairs = Multi30k(dataset_dir, langs=("en", "de")).pairs("val")
    assert reversed_pairs == [(en, de) for de, en in split_pairs("val")]
    assert corpus.origin() == {"multi30k": ["de", "en"]}
    with pytest.raises(ValueError, match="unknown Multi30k split 'test'"):
        corpus.pairs("test")


@pytest.mark.parametrize("missing", range(4))
def test_parallel_files_are_all_checked_before_anything_is_read(tmp_path, missing):
    paths = [write_gz(tmp_path / f"{i}.gz", "Eins.\n") for i in range(4)]
    paths[missing].unlink()
    role = ["train source", "train target", "val source", "val target"][missing]
    with pytest.raises(ChoiceError, match=f"^{re.escape(str(paths[missing]))} \\({role}\\)"):
        ParallelFiles(train=(paths[0], paths[1]), val=(paths[2], paths[3]))
    if missing == 0:  # a folder given as a file: named too
        with pytest.raises(ChoiceError, match=r"\(test target\) is a folder, not a file$"):
            ParallelFiles(train=paths[2:], val=paths[2:], test=(paths[3], tmp_path))


def test_parallel_files_drop_and_count_empty_sides_and_are_known_by_their_bytes(tmp_path):
    src = write_gz(tmp_path / "train.src.gz", "Eins.\n\nDrei.\n")
    tgt = tmp_path / "train.tgt"
    tgt.write_text("One.\nTwo.\nThree.\n")
    corpus, said = ParallelFiles(train=(src, tgt), val=(src, tgt), test=(src, tgt)), []
    assert isinstance(corpus, Corpus) and (corpus.name, corpus.subwords) == ("files", True)
    assert corpus.pairs("test", said.append) == [("Eins.", "One."), ("Drei.", "Three.")]
    assert said == [f"test: skipped 1 pairs with an empty line on one side or both ({src}, {tgt})"]
    assert corpus.test_splits == ("test",)
    before = corpus.origin()
    assert before["val"] == {"files": [str(src), str(tgt)], "sha256": [sha256(src), sha256(tgt)]}
    assert list(before) == ["train", "val"]  # the data a run trains on
    tgt.write_text("One.\nTwo.\nThree!\n")
    assert corpus.origin()["train"]["sha256"][1] != before["train"]["sha256"][1]


def test_pairs_in_memory_are_known_by_their_contents():
    corpus = InMemory(train=[("a b", "x y")], val=[("b", "y")])
    assert isinstance(corpus, Corpus) and (corpus.name, corpus.test_splits) == ("pairs", ())
    assert corpus.pairs("train") == [("a b", "x y")]
    text = json.dumps({"train": [["a b", "x y"]], "val": [["b", "y"]]}, sort_keys=True)
    assert corpus.origin() == {"pairs": hashlib.sha256(text.encode()).hexdigest()}
    assert InMemory(train=[("a b", "x z")], val=[("b", "y")]).origin() != corpus.origin()
    assert InMemory(corpus.train, corpus.val, test=[("c", "z")]).test_splits == ("test",)


def test_open_corpus_finds_a_registered_corpus_by_name(dataset_dir, monkeypatch):
    assert open_corpus("multi30k", dataset_dir, ("en", "de")) == Multi30k(dataset_dir, ("en", "de"))
    known = "multi30k, treebank"
    with pytest.raises(ValueError, match=f"^unknown corpus 'wmt14': choose one of {known} "):
        open_corpus("wmt14")
    made_up = InMemory(train=[("a", "b")], val=[("a", "b")])
    monkeypatch.setitem(CORPORA, "made-up", lambda data_dir, langs: made_up)
    assert open_corpus("made-up") is made_up
