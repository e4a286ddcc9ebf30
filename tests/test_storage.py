"""lib.storage's settings: where an object store's endpoint and credentials come from, what
delta-rs and Spark are told, and that secrets never print."""

from __future__ import annotations

from lib.spark.session import s3a_settings_from_env
from lib.storage import ObjectStoreSettings, is_remote, join, relpath

ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
}


def test_uris_and_paths():
    assert [is_remote(p) for p in ("s3a://b/k", "S3://b", "s3n://b/x", "/data/s3a", "file:///x", "b/k")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert join("s3a://lake/wh", "offsets_log", "part-1.parquet") == "s3a://lake/wh/offsets_log/part-1.parquet"
    assert relpath("s3a://lake/wh/offsets_log/a/part-1.parquet", "s3a://lake/wh/offsets_log") == "a/part-1.parquet"


def test_settings_from_the_environment():
    s = ObjectStoreSettings.from_env(ENV)
    assert (s.endpoint_url, s.host, s.scheme, s.region, s.path_style) == (
        "http://127.0.0.1:9000",
        "127.0.0.1:9000",
        "http",
        "eu-west-1",
        True,
    )
    assert s.delta_options() == {
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    }


def test_hadoop_settings_win_over_the_environment():
    hadoop = {
        "fs.s3a.endpoint": "minio.internal:9000",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.path.style.access": "false",
        "fs.s3a.access.key": "FROM-HADOOP",
    }
    s = ObjectStoreSettings.from_hadoop(hadoop.get, ENV)
    assert (s.endpoint_url, s.path_style, s.region, s.access_key, s.secret_key) == (
        "http://minio.internal:9000",
        False,
        "eu-west-1",
        "FROM-HADOOP",
        "wJalrXUtnFEMI/K7MDENG",
    )
    # AWS itself: no endpoint, https, the environment's region default
    aws = ObjectStoreSettings.from_hadoop({}.get, {})
    assert (aws.endpoint_url, aws.scheme, aws.delta_options()) == (
        None,
        "https",
        {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "AWS_REGION": "us-east-1"},
    )


def test_secrets_never_print():
    s = ObjectStoreSettings.from_env(ENV)
    for text in (repr(s), str(s), f"{s}", repr([s])):
        assert "wJalrXUtnFEMI" not in text and "AKIDEXAMPLE" not in text
    assert repr(s) == (
        "ObjectStoreSettings(endpoint='http://127.0.0.1:9000', region='eu-west-1', path_style=True, credentials set)"
    )


def test_spark_gets_the_environment_as_s3a_settings():
    assert s3a_settings_from_env(ENV) == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": "wJalrXUtnFEMI/K7MDENG",
    }
    assert s3a_settings_from_env({}) == {}


def test_local_bytes_read_at_once_below_the_mapping_size_and_mapped_above(tmp_path, monkeypatch):
    """lib.storage.read_bytes on local disk: the bytes from `start` to the end, whatever the way
    (a read below MAPPED_READ bytes, a memory map from it on); nothing past the end."""
    import mmap

    from lib import storage

    monkeypatch.setattr(storage, "MAPPED_READ", 1000)
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(bytes(range(200)))
    big.write_bytes(bytes(i % 251 for i in range(5000)))
    assert storage.read_bytes(str(small)) == bytes(range(200))
    assert storage.read_bytes(str(small), 150) == bytes(range(150, 200))
    assert storage.read_bytes(str(small), 200) == b"" and storage.read_bytes(str(small), 999) == b""
    whole = storage.read_bytes(str(big))
    assert isinstance(whole, mmap.mmap) and bytes(whole) == bytes(i % 251 for i in range(5000))
    tail = storage.read_bytes(str(big), 3000)  # 2,000 bytes left: mapped, from byte 3,000
    assert isinstance(tail, memoryview) and bytes(tail) == bytes(i % 251 for i in range(3000, 5000))
    assert bytes(storage.read_bytes(str(big), 4500)) == bytes(i % 251 for i in range(4500, 5000))  # (read)
    assert isinstance(storage.read_bytes(str(big), 4500), bytes)
