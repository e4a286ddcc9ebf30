"""Where the files live: a local folder or an S3-compatible object store (s3a://bucket/key,
also s3://). One set of path functions for the driver and the Python workers: local paths go
through os (segments memory-mapped), object-store URIs through pyarrow's S3FileSystem (range
reads) and delta-rs's storage options.

Object-store settings come from the usual places, never from our own command line: Hadoop's
fs.s3a.* (spark-submit --conf spark.hadoop.fs.s3a.endpoint=..., core-site.xml), else the AWS
environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN). The driver resolves them once and hands them to its Spark tasks inside the
task (ObjectStoreSettings never prints its secrets); a process that was told nothing reads the
environment."""

from __future__ import annotations

import mmap
import os
import posixpath
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

REMOTE_SCHEMES = ("s3a", "s3", "s3n")


def is_remote(uri: str) -> bool:
    """An object-store URI (s3a://, s3://, s3n://), as opposed to a local path."""
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and scheme.lower() in REMOTE_SCHEMES


def bucket_of(uri: str) -> str:
    return urllib.parse.urlsplit(uri).netloc


def _key_path(uri: str) -> str:
    """bucket/key, as pyarrow's S3FileSystem names an object."""
    parts = urllib.parse.urlsplit(uri)
    return (parts.netloc + "/" + parts.path.lstrip("/")).rstrip("/")


@dataclass(frozen=True)
class ObjectStoreSettings:
    """Endpoint and credentials of an S3-compatible store. `path_style` addresses buckets as
    http://endpoint/bucket (what S3-compatible stores need); AWS itself takes either."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = True
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # secrets never reach a log
        creds = "set" if self.access_key else "default chain"
        return f"ObjectStoreSettings(endpoint={self.endpoint!r}, region={self.region!r}, path_style={self.path_style}, credentials {creds})"

    __str__ = __repr__

    @property
    def scheme(self) -> str:
        return "http" if (self.endpoint or "").startswith("http://") else "https"

    @property
    def host(self) -> str | None:
        """The endpoint without its scheme (pyarrow's endpoint_override)."""
        if not self.endpoint:
            return None
        return self.endpoint.split("://", 1)[-1].rstrip("/")

    @property
    def endpoint_url(self) -> str | None:
        if not self.endpoint:
            return None
        return self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ObjectStoreSettings:
        env = dict(os.environ) if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        path_style = env.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() not in ("true", "1")
        return cls(
            endpoint,
            region,
            path_style,
            env.get("AWS_ACCESS_KEY_ID"),
            env.get("AWS_SECRET_ACCESS_KEY"),
            env.get("AWS_SESSION_TOKEN"),
        )

    @classmethod
    def from_hadoop(cls, get: Callable[[str], str | None], env: dict[str, str] | None = None) -> ObjectStoreSettings:
        """Hadoop's fs.s3a.* settings where given (`get` reads Hadoop's Configuration), the
        environment for the rest."""
        base = cls.from_env(env)
        endpoint = get("fs.s3a.endpoint") or base.endpoint
        if endpoint and "://" not in endpoint:
            ssl = (get("fs.s3a.connection.ssl.enabled") or "true").lower() != "false"
            endpoint = ("https://" if ssl else "http://") + endpoint
        path_style = get("fs.s3a.path.style.access")
        return replace(
            base,
            endpoint=endpoint,
            region=get("fs.s3a.endpoint.region") or base.region,
            path_style=base.path_style if path_style is None else path_style.lower() == "true",
            access_key=get("fs.s3a.access.key") or base.access_key,
            secret_key=get("fs.s3a.secret.key") or base.secret_key,
            session_token=get("fs.s3a.session.token") or base.session_token,
        )

    def delta_options(self) -> dict[str, str]:
        """delta-rs's storage options (object_store's AWS keys)."""
        options = {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if self.path_style else "true"}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.scheme == "http":
                options["AWS_ALLOW_HTTP"] = "true"
        options["AWS_REGION"] = self.region or "us-east-1"
        for key, value in (
            ("AWS_ACCESS_KEY_ID", self.access_key),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key),
            ("AWS_SESSION_TOKEN", self.session_token),
        ):
            if value:
                options[key] = value
        return options

    def boto3_client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region or "us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token,
            config=Config(s3={"addressing_style": "path" if self.path_style else "virtual"}),
        )


_settings: ObjectStoreSettings | None = None
_filesystems: dict[ObjectStoreSettings, Any] = {}


def configure(settings: ObjectStoreSettings | None) -> None:
    """The settings this process uses for object-store URIs (None: the environment's)."""
    global _settings
    _settings = settings


def settings() -> ObjectStoreSettings:
    return _settings if _settings is not None else ObjectStoreSettings.from_env()


def delta_options(uri: str) -> dict[str, str] | None:
    """storage_options for delta-rs's DeltaTable and writers: None for a local path."""
    return settings().delta_options() if is_remote(uri) else None


def _s3() -> Any:
    from pyarrow import fs as pafs

    s = settings()
    cached = _filesystems.get(s)
    if cached is None:
        cached = pafs.S3FileSystem(
            access_key=s.access_key,
            secret_key=s.secret_key,
            session_token=s.session_token,
            region=s.region or "us-east-1",
            scheme=s.scheme,
            endpoint_override=s.host,
            force_virtual_addressing=not s.path_style,
            allow_bucket_creation=False,
            allow_bucket_deletion=False,
        )
        _filesystems[s] = cached
    return cached


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path within it) for a local path or an object-store URI."""
    if is_remote(uri):
        return _s3(), _key_path(uri)
    from pyarrow import fs as pafs

    return pafs.LocalFileSystem(), os.path.abspath(uri)


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def basename(uri: str) -> str:
    return posixpath.basename(uri.rstrip("/")) if is_remote(uri) else os.path.basename(uri)


def dirname(uri: str) -> str:
    return posixpath.dirname(uri.rstrip("/")) if is_remote(uri) else os.path.dirname(uri)


def relpath(uri: str, start: str) -> str:
    if is_remote(uri):
        return posixpath.relpath(_key_path(uri), _key_path(start))
    return os.path.relpath(uri, start)


def absolute(uri: str) -> str:
    return uri.rstrip("/") if is_remote(uri) else os.path.abspath(uri)


def _info(uri: str) -> Any:
    fs, path = filesystem(uri)
    return fs.get_file_info(path)


def exists(uri: str) -> bool:
    if not is_remote(uri):
        return os.path.exists(uri)
    from pyarrow import fs as pafs

    if _info(uri).type != pafs.FileType.NotFound:
        return True
    return isdir(uri)


def isdir(uri: str) -> bool:
    if not is_remote(uri):
        return os.path.isdir(uri)
    from pyarrow import fs as pafs

    fs, path = filesystem(uri)
    if "/" not in path:  # a bucket
        return fs.get_file_info(path).type == pafs.FileType.Directory
    # an object store has no folders, only keys below a prefix
    return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False)))


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    is_dir: bool
    size: int
    mtime_ns: int


def list_dir(uri: str, sized: Callable[[str], object] | None = None) -> list[Entry]:
    """The entries right below a folder (or key prefix), in name order. `sized`: on local disk,
    only the names it accepts are stat'ed, the others listed with size and time 0 (a broker's
    log dir holds thousands of partition folders, each a few files besides its segments: a
    stat of each was a third of listing them)."""
    if not is_remote(uri):
        out = []
        prefix = os.path.join(uri, "")
        with os.scandir(uri) as it:
            for e in it:
                if sized is not None and not sized(e.name):
                    try:
                        out.append(Entry(e.name, prefix + e.name, e.is_dir(), 0, 0))
                    except OSError:
                        pass
                    continue
                try:
                    st = e.stat()
                except OSError:  # a dangling link, or removed since listed
                    continue
                out.append(Entry(e.name, prefix + e.name, e.is_dir(), st.st_size, st.st_mtime_ns))
        return sorted(out, key=lambda e: e.name)
    from pyarrow import fs as pafs

    fs, path = filesystem(uri)
    base = uri.rstrip("/")
    out = []
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False)):
        is_dir = info.type == pafs.FileType.Directory
        mtime = info.mtime_ns if info.mtime_ns is not None else 0
        out.append(Entry(info.base_name, f"{base}/{info.base_name}", is_dir, 0 if is_dir else info.size, mtime))
    return sorted(out, key=lambda e: e.name)


def stat(uri: str) -> tuple[int, int]:
    """(size, modification time in ns)."""
    if not is_remote(uri):
        st = os.stat(uri)
        return st.st_size, st.st_mtime_ns
    from pyarrow import fs as pafs

    info = _info(uri)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(uri)
    return info.size, info.mtime_ns or 0


def getsize(uri: str) -> int:
    return os.path.getsize(uri) if not is_remote(uri) else stat(uri)[0]


# bytes from which a local read is memory-mapped (zero-copy) rather than read: below, a read is
# cheaper than a mapping's set-up and page faults (a lag task reads the new bytes of thousands of
# small segments: 1,300 in each of make bench's 1% incremental run's two)
MAPPED_READ = 1 << 20


def read_bytes(uri: str, start: int = 0) -> bytes | memoryview | mmap.mmap:
    """A file's bytes from `start` to its end: on local disk read at once if fewer than
    MAPPED_READ, else memory-mapped (zero-copy); one range read from an object store."""
    if not is_remote(uri):
        fd = os.open(uri, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size <= start:
                return b""
            if size - start < MAPPED_READ:
                return os.pread(fd, size - start, start)  # (fewer bytes if the file shrank since)
            whole = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return whole if start == 0 else memoryview(whole)[start:]
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        size = f.size()
        if size <= start:
            return b""
        return f.read_at(size - start, start)


def read_text(uri: str) -> str:
    if not is_remote(uri):
        # (the small files of a log dir, thousands a run: without a text wrapper's set-up)
        fd = os.open(uri, os.O_RDONLY)
        try:
            parts = []
            while chunk := os.read(fd, 1 << 16):
                parts.append(chunk)
        finally:
            os.close(fd)
        return b"".join(parts).decode("utf-8")
    return bytes(read_bytes(uri)).decode("utf-8")


def makedirs(uri: str) -> None:
    """A local folder; nothing on an object store, where keys need no folders."""
    if not is_remote(uri):
        os.makedirs(uri, exist_ok=True)


def parquet_target(uri: str) -> tuple[str, Any]:
    """(path, filesystem) for pyarrow.parquet's readers and writers (filesystem None locally,
    where pyarrow memory-maps and opens files itself)."""
    if not is_remote(uri):
        return uri, None
    return filesystem(uri)[1], _s3()


def delete_tree(uri: str) -> None:
    if not is_remote(uri):
        import shutil

        shutil.rmtree(uri, ignore_errors=True)
        return
    fs, path = filesystem(uri)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass


def delete_file(uri: str) -> None:
    """One file; nothing when it is gone already."""
    if not is_remote(uri):
        try:
            os.remove(uri)
        except FileNotFoundError:
            pass
        return
    fs, path = filesystem(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def open_parquet(uri: str, read_dictionary: list[str] | None = None) -> Any:
    """A pyarrow ParquetFile: the footer read once, row groups read as asked (range reads on
    an object store, coalesced). `read_dictionary`: string columns read as dictionary arrays."""
    import pyarrow.parquet as pq

    if not is_remote(uri):
        return pq.ParquetFile(uri, read_dictionary=read_dictionary)
    fs, path = filesystem(uri)
    return pq.ParquetFile(fs.open_input_file(path), pre_buffer=True, read_dictionary=read_dictionary)


def read_parquet_metadata(uri: str) -> Any:
    import pyarrow.parquet as pq

    if not is_remote(uri):
        return pq.read_metadata(uri)
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        return pq.read_metadata(f)


class OutputFile:
    """A file being written: a local path (pyarrow opens it) or an object-store upload.
    `size` after close."""

    def __init__(self, uri: str):
        self.uri = uri
        self.size = 0
        if is_remote(uri):
            fs, path = filesystem(uri)
            self.sink: Any = fs.open_output_stream(path)
        else:
            makedirs(os.path.dirname(uri))
            self.sink = uri

    def close(self) -> None:
        if isinstance(self.sink, str):
            self.size = os.path.getsize(self.sink)
        else:
            self.size = self.sink.tell()
            self.sink.close()


def write_bytes(uri: str, data: bytes | memoryview) -> None:
    """Whole-file write: a local file replaced atomically (written aside, then renamed); an
    object appears whole when its upload completes."""
    if not is_remote(uri):
        makedirs(os.path.dirname(uri) or ".")
        tmp = uri + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, uri)
        return
    fs, path = filesystem(uri)
    with fs.open_output_stream(path) as f:
        f.write(data)


def upload_tree(local_dir: str, uri: str) -> None:
    """Copy a local folder's files under `uri` (replacing what is there)."""
    delete_tree(uri)
    for root, _, files in os.walk(local_dir):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
            with open(path, "rb") as f:
                write_bytes(join(uri, rel), f.read())
