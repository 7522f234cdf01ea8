#!/usr/bin/env python3
"""The software bill of materials of the kubegate binary, as CycloneDX 1.5 JSON on stdout.

    deploy/sbom.py VERSION COMMIT TARGET

Every crate compiled into `kubegate` for TARGET (the resolved graph of `cargo metadata
--locked`, following normal dependencies from the kubegate binary's package, build
scripts' and tests' dependencies left out): its name, version, licence, package URL, and
for crates from crates.io the SHA-256 Cargo.lock pins. Crates of this workspace and the
vendored h2 (vendor/h2, kubegate's patch) are listed with their path. Deterministic: the
timestamp is SOURCE_DATE_EPOCH, the serial number a hash of the content, components sorted,
so two release builds of one commit give the same bytes.
"""
import datetime
import hashlib
import json
import os
import subprocess
import sys


def main():
    version, commit, target = sys.argv[1:4]
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", target],
        check=True, capture_output=True, text=True).stdout)
    root = meta["workspace_root"]
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    kubegate = next(p["id"] for p in meta["packages"] if p["name"] == "kubegate")
    # Normal dependencies only: what is compiled into the binary.
    seen, todo = set(), [kubegate]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    checksums = lock_checksums(os.path.join(root, "Cargo.lock"))
    components = []
    for pid in seen:
        if pid == kubegate:
            continue
        p = packages[pid]
        c = {
            "type": "library",
            "bom-ref": f"pkg:cargo/{p['name']}@{p['version']}",
            "name": p["name"],
            "version": p["version"],
            "purl": f"pkg:cargo/{p['name']}@{p['version']}",
        }
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        digest = checksums.get((p["name"], p["version"]))
        if digest:
            c["hashes"] = [{"alg": "SHA-256", "content": digest}]
        if p.get("source") is None:
            where = os.path.relpath(os.path.dirname(p["manifest_path"]), root)
            c["properties"] = [{"name": "kubegate:path", "value": where}]
        components.append(c)
    components.sort(key=lambda c: (c["name"], c["version"]))
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ"),
            "component": {
                "type": "application",
                "bom-ref": f"pkg:cargo/kubegate@{version}",
                "name": "kubegate",
                "version": version,
                "purl": f"pkg:cargo/kubegate@{version}",
                "licenses": [{"expression": "Apache-2.0"}],
                "properties": [{"name": "kubegate:commit", "value": commit},
                               {"name": "kubegate:target", "value": target}],
            },
        },
        "components": components,
    }
    body = json.dumps(bom, sort_keys=True, indent=1)
    serial = hashlib.sha256(body.encode()).hexdigest()
    bom["serialNumber"] = "urn:uuid:{}-{}-{}-{}-{}".format(
        serial[:8], serial[8:12], serial[12:16], serial[16:20], serial[20:32])
    print(json.dumps(bom, sort_keys=True, indent=1))


def lock_checksums(path):
    """(name, version) -> checksum of every registry package in Cargo.lock."""
    out, cur = {}, {}
    for line in open(path):
        line = line.strip()
        if line == "[[package]]":
            cur = {}
        elif "=" in line:
            k, v = line.split("=", 1)
            cur[k.strip()] = v.strip().strip('"')
            if "checksum" in cur and "name" in cur and "version" in cur:
                out[(cur["name"], cur["version"])] = cur["checksum"]
    return out


if __name__ == "__main__":
    main()
