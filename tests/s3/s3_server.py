"""An S3-compatible server on loopback for the object-storage tests: S3Proxy (Maven jar
fetched by `make setup` into .jars/s3proxy*), backed by a folder, with one identity."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import time

from lib.ports import free_port
from lib.storage import ObjectStoreSettings
from tests.helpers import REPO

ACCESS_KEY = "offsets-lake-test"
SECRET_KEY = "offsets-lake-test-secret"
REGION = "us-east-1"


def s3proxy_jar(folder: str = "s3proxy") -> str:
    jars = glob.glob(os.path.join(REPO, ".jars", folder, "s3proxy-*-jar-with-dependencies.jar"))
    if not jars:
        raise RuntimeError(f"S3Proxy not found in .jars/{folder}: run `make setup`")
    return jars[0]


class S3Server:
    def __init__(self, root: str, jar_folder: str = "s3proxy", provider: str = "filesystem-nio2"):
        self.root = root
        self.jar = s3proxy_jar(jar_folder)
        self.provider = provider
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def settings(self) -> ObjectStoreSettings:
        return ObjectStoreSettings(self.endpoint, REGION, True, ACCESS_KEY, SECRET_KEY)

    @property
    def env(self) -> dict[str, str]:
        """What a job's process is given: the AWS environment."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop's fs.s3a.* for this server, as an operator gives them to Spark."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
        }

    def start(self) -> S3Server:
        data = os.path.join(self.root, "data")
        os.makedirs(data, exist_ok=True)
        props = os.path.join(self.root, "s3proxy.conf")
        with open(props, "w") as f:
            f.write(
                f"s3proxy.endpoint={self.endpoint}\n"
                "s3proxy.authorization=aws-v2-or-v4\n"
                f"s3proxy.identity={ACCESS_KEY}\n"
                f"s3proxy.credential={SECRET_KEY}\n"
                "s3proxy.ignore-unknown-headers=true\n"
                f"jclouds.provider={self.provider}\n"
                f"jclouds.filesystem.basedir={data}\n"
            )
        log = open(os.path.join(self.root, "s3proxy.log"), "w")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-jar", self.jar, "--properties", props],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"S3Proxy exited: see {self.root}/s3proxy.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"S3Proxy did not listen on {self.port}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self):
        return self.settings.boto3_client()

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return f"s3a://{name}"

    def upload_dir(self, local: str, uri: str) -> str:
        """Copy a local folder under an s3a:// prefix, key for relative path."""
        bucket, _, prefix = uri.split("://", 1)[1].partition("/")
        client = self.client()
        for root, _, files in os.walk(local):
            for name in files:
                path = os.path.join(root, name)
                key = "/".join(p for p in (prefix, os.path.relpath(path, local).replace(os.sep, "/")) if p)
                client.upload_file(path, bucket, key)
        return uri
