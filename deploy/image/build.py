#!/usr/bin/env python3
"""Builds kubegate's OCI image without a daemon or a registry, byte for byte reproducible.

    deploy/image/build.py BINARY VERSION COMMIT OUT.tar

BINARY is the static kubegate; the image is FROM scratch: the binary at /usr/local/bin/kubegate,
/etc/passwd and /etc/group naming user and group 65532 (kubegate), the empty directories the
manifests mount into, no shell. It runs as 65532:65532. OUT.tar is an OCI image layout in a tar
archive (skopeo's `oci-archive:` transport; `skopeo copy oci-archive:OUT.tar docker://...`
pushes it). Every timestamp is SOURCE_DATE_EPOCH (default: 0), every owner 0 or 65532, every
archive sorted, so that two builds of one binary give the same bytes.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

UID = 65532
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
DIRS = ["etc", "etc/kubegate", "etc/kubernetes", "etc/kubernetes/pki", "run", "run/kubegate",
        "tmp", "usr", "usr/local", "usr/local/bin", "var", "var/lib", "var/lib/kubegate"]
# Directories kubegate may write to (upgrade.socket, discovery.state_file) when nothing is
# mounted there: owned by its user.
OWNED = {"run/kubegate", "var/lib/kubegate"}


def entry(name, kind, mode, data=b"", uid=0):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = uid
    info.uname = info.gname = ""
    info.mtime = EPOCH
    info.size = len(data)
    return info, (io.BytesIO(data) if data else None)


def layer(binary):
    files = [entry(d + "/", tarfile.DIRTYPE, 0o755, uid=UID if d in OWNED else 0) for d in DIRS]
    files.append(entry("etc/passwd", tarfile.REGTYPE, 0o644,
                       b"kubegate:x:65532:65532:kubegate:/nonexistent:/sbin/nologin\n"))
    files.append(entry("etc/group", tarfile.REGTYPE, 0o644, b"kubegate:x:65532:\n"))
    with open(binary, "rb") as f:
        files.append(entry("usr/local/bin/kubegate", tarfile.REGTYPE, 0o755, f.read()))
    files.append(entry("tmp/", tarfile.DIRTYPE, 0o1777))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen = set()
        for info, data in sorted(files, key=lambda f: f[0].name):
            if info.name in seen:
                continue
            seen.add(info.name)
            tar.addfile(info, data)
    return raw.getvalue()


def gz(data):
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9) as g:
        g.write(data)
    return out.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    binary, version, commit, out = sys.argv[1:5]
    created = __import__("datetime").datetime.fromtimestamp(EPOCH, __import__("datetime").timezone.utc)
    created = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    tar = layer(binary)
    layer_gz = gz(tar)
    labels = {
        "org.opencontainers.image.title": "kubegate",
        "org.opencontainers.image.description":
            "A readiness-aware, highly available entry point for Kubernetes API servers",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": commit,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.source": "https://github.com/kubegate/kubegate",
        "org.opencontainers.image.documentation":
            "https://github.com/kubegate/kubegate/blob/main/docs/deploy.md",
    }
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": "65532:65532",
            # `crictl exec` / `kubectl exec ... -- kubegate status` find the CLI by PATH.
            "Env": ["PATH=/usr/local/bin"],
            "Entrypoint": ["/usr/local/bin/kubegate"],
            "Cmd": ["run", "--config", "/etc/kubegate/kubegate.yaml", "--log-format", "json"],
            "WorkingDir": "/",
            "Labels": labels,
            "StopSignal": "SIGTERM",
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(tar)]},
        "history": [{"created": created, "created_by": "deploy/image/build.py"}],
    }
    config_blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(layer_gz), "size": len(layer_gz)}],
        "annotations": labels,
    }
    manifest_blob = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": digest(manifest_blob), "size": len(manifest_blob),
                       "annotations": {"org.opencontainers.image.ref.name": version}}],
    }
    members = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
    }
    for blob in (layer_gz, config_blob, manifest_blob):
        members["blobs/sha256/" + digest(blob).split(":")[1]] = blob
    dirs = ["blobs/", "blobs/sha256/"]
    with open(out, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in dirs:
            info, _ = entry(d, tarfile.DIRTYPE, 0o755)
            t.addfile(info)
        for name in sorted(members):
            info, data = entry(name, tarfile.REGTYPE, 0o644, members[name])
            t.addfile(info, data)
    print(digest(manifest_blob))


if __name__ == "__main__":
    main()
