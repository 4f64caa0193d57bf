"""Download MovieLens releases from GroupLens into a cache directory, verified and resumable.

Checksums: GroupLens publishes an ``.md5`` file next to each zip; the MD5 digests in DATASETS
are those published values as recorded by other open-source MovieLens loaders. They could not
be re-checked from the machine this was written on (no network), so a mismatch reports both
digests instead of silently accepting the file. When no digest is known (``md5=None``), the
download is checked against the Content-Length the server announced and, once complete, its
MD5 is written to ``<zip>.md5`` so that later runs verify the cached zip against that record
(trust on first use).

Resuming: bytes go to ``<zip>.part``. A later attempt asks for the rest with an HTTP Range
request; a server that ignores Range makes the download start over. The zip is renamed into
place only after it is verified, and it is extracted into a temporary directory renamed into
place, so an interrupted run leaves at most a ``.part`` file behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from hamsi.errors import InputError

DEFAULT_BASE_URL = "https://files.grouplens.org/datasets/movielens"
BASE_URL_VARIABLE = "HAMSI_MOVIELENS_URL"
CACHE_VARIABLE = "HAMSI_DATA_DIR"
# name -> (zip file, folder inside the zip, published MD5)
DATASETS = {
    "movielens-100k": ("ml-100k.zip", "ml-100k", "0e33842e24a9c977be4e0107933c0723"),
    "movielens-1m": ("ml-1m.zip", "ml-1m", "c4d9eecfca2ab87c1945afe126590906"),
    "movielens-10m": ("ml-10m.zip", "ml-10M100K", "ce571fd55effeba0271552578f2648bd"),
    "movielens-20m": ("ml-20m.zip", "ml-20m", "cd245b17a1ae2cc31bb14903e1204af3"),
    "movielens-25m": ("ml-25m.zip", "ml-25m", "6b51fb2759a8657d3bfcbfc42b592ada"),
}
PUBLISHED = object()  # sentinel: use the MD5 listed in DATASETS
BLOCK_BYTES = 1 << 20


def default_cache_dir() -> Path:
    """Return $HAMSI_DATA_DIR, else ~/.cache/hamsi/movielens."""
    configured = os.environ.get(CACHE_VARIABLE)
    return (
        Path(configured).expanduser()
        if configured
        else Path.home() / ".cache" / "hamsi" / "movielens"
    )


def download_movielens(
    name: str,
    dest=None,
    *,
    base_url: str | None = None,
    md5=PUBLISHED,
    attempts: int = 3,
    timeout: float = 60.0,
    progress=None,
) -> Path:
    """Return the directory holding the unzipped MovieLens release `name`.

    Parameters
    ----------
    name : str
        A key of DATASETS, e.g. "movielens-1m" (or the short "1m", "ml-1m").
    dest : path-like, optional
        Cache directory; default default_cache_dir(). A release already there is reused.
    base_url : str, optional
        Where the zips are; default $HAMSI_MOVIELENS_URL, else the GroupLens site.
    md5 : str or None
        Expected MD5 of the zip; by default the published one, None to trust the first download.
    attempts : int
        How many times to resume after a dropped connection before giving up.
    progress : callable(done_bytes, total_bytes or None), optional
        Called after every block.

    Raises
    ------
    InputError
        Unknown name, or a checksum/size mismatch (the corrupt ``.part`` is deleted).
    OSError
        Network failure after all attempts; the ``.part`` file is kept for resuming.
    """
    key = _canonical_name(name)
    zip_name, folder, published_md5 = DATASETS[key]
    expected_md5 = published_md5 if md5 is PUBLISHED else md5
    dest = Path(dest).expanduser() if dest is not None else default_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / folder
    if target.is_dir():
        return target
    base_url = (base_url or os.environ.get(BASE_URL_VARIABLE) or DEFAULT_BASE_URL).rstrip("/")
    archive = dest / zip_name
    record = dest / (zip_name + ".md5")
    if expected_md5 is None and record.is_file():
        expected_md5 = record.read_text().split()[0]
    if not (archive.is_file() and _matches(archive, expected_md5)):
        fetch_file(
            f"{base_url}/{zip_name}",
            archive,
            md5=expected_md5,
            attempts=attempts,
            timeout=timeout,
            progress=progress,
        )
        if not record.is_file():
            record.write_text(f"{file_md5(archive)}  {zip_name}\n")
    _extract(archive, dest, folder)
    return target


def fetch_file(
    url: str,
    path: Path,
    *,
    md5: str | None,
    attempts: int = 3,
    timeout: float = 60.0,
    progress=None,
) -> Path:
    """Return `path` after downloading `url` to it via ``path.part``, resuming and verifying."""
    path = Path(path)
    partial = path.with_name(path.name + ".part")
    total = None
    last_error: Exception | None = None
    for _ in range(max(1, attempts)):
        try:
            total = _fetch_into(url, partial, timeout, progress)
            break
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, urllib.error.HTTPError):  # the server answered: retrying won't help
                raise OSError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            last_error = exc
    else:
        raise OSError(
            f"{url}: download interrupted ({last_error}); "
            f"{partial.stat().st_size if partial.exists() else 0} bytes kept in {partial}, "
            "run again to resume"
        )
    size = partial.stat().st_size
    if total is not None and size != total:
        partial.unlink()
        raise InputError(
            f"{url}: got {size} bytes, the server announced {total}; deleted {partial}"
        )
    if md5 is not None:
        actual = file_md5(partial)
        if actual != md5.lower():
            partial.unlink()
            raise InputError(
                f"{url}: checksum mismatch: MD5 {actual}, expected {md5}; deleted {partial}"
            )
    os.replace(partial, path)
    return path


def _fetch_into(url: str, partial: Path, timeout: float, progress) -> int | None:
    """Return the full size announced by the server after appending the missing bytes to `partial`."""
    have = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "hamsi-data-download"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to fetch: the .part is already whole
            return None
        raise
    with response:
        resumed = response.status == 206
        if not resumed:
            have = 0  # the server sent the whole file
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        with open(partial, "ab" if resumed else "wb") as out:
            done = have
            while True:
                block = response.read(BLOCK_BYTES)
                if not block:
                    break
                out.write(block)
                done += len(block)
                if progress:
                    progress(done, total)
        if total is not None and done < total:
            raise http.client.IncompleteRead(b"", total - done)
    return total


def file_md5(path) -> str:
    """Return the hexadecimal MD5 digest of a file, read in blocks."""
    digest = hashlib.md5()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def _matches(path: Path, md5: str | None) -> bool:
    return md5 is None or file_md5(path) == md5.lower()


def _canonical_name(name: str) -> str:
    short = name.lower().removeprefix("movielens-").removeprefix("ml-")
    key = f"movielens-{short}"
    if key not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    return key


def _extract(archive: Path, dest: Path, folder: str) -> None:
    """Unzip `archive` into dest/folder through a temporary directory, refusing unsafe paths."""
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=f".{folder}.", suffix=".unzip"))
    try:
        try:
            with zipfile.ZipFile(archive) as bundle:
                for member in bundle.namelist():
                    resolved = (staging / member).resolve()
                    if not resolved.is_relative_to(staging.resolve()):
                        raise InputError(
                            f"{archive}: refusing to extract {member!r} outside {dest}"
                        )
                bundle.extractall(staging)
        except zipfile.BadZipFile as exc:
            raise InputError(f"{archive}: not a valid zip file ({exc})") from None
        extracted = staging / folder
        if not extracted.is_dir():
            raise InputError(f"{archive}: expected a folder {folder!r} inside the zip")
        os.replace(extracted, dest / folder)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
