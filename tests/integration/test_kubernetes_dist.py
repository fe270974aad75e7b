"""dist/kubernetes (issue 24, docs/kubernetes.md): the files that put cordon-runtime behind a
RuntimeClass. No cluster runs here; what ties the files together is checked, and containerd itself
reads the snippet. What these catch: a RuntimeClass handler containerd does not know, a BinaryName
where the installer does not put the runtime, a node label the RuntimeClass waits for and the
installer never sets, a snippet containerd cannot load (a typo in a plugin path is silently a new
table: `config dump` shows where it landed), an install script that does not parse."""

import os
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml

from testenv import need

DIST = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dist",
                    "kubernetes")


def load_all(name):
    with open(os.path.join(DIST, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def snippet():
    with open(os.path.join(DIST, "containerd-cordon.toml"), "rb") as f:
        return tomllib.load(f)


def install_script():
    (cm,) = [d for d in load_all("install-daemonset.yaml") if d["kind"] == "ConfigMap"]
    return cm["data"]["install.sh"]


def test_the_runtime_class_names_the_handler_containerd_gets():
    (rc,) = load_all("runtimeclass.yaml")
    assert rc["apiVersion"] == "node.k8s.io/v1" and rc["kind"] == "RuntimeClass", rc
    runtimes = snippet()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert list(runtimes) == [rc["handler"]], runtimes
    cordon = runtimes[rc["handler"]]
    assert cordon["runtime_type"] == "io.containerd.runc.v2" and cordon["options"]["SystemdCgroup"] is False
    # the installer sets the label the RuntimeClass schedules by
    (key, value), = rc["scheduling"]["nodeSelector"].items()
    assert f'"{key}":"{value}"' in install_script().replace(" ", ""), install_script()


def test_the_installer_puts_the_runtime_where_containerd_looks():
    binary = snippet()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["cordon"]["options"][
        "BinaryName"]
    script = install_script()
    assert re.search(r"install .*/opt/cordon/sbin/cordon-runtime /host" + re.escape(binary) + r"\b", script), script
    # cordon-runtime finds cordon-init and cordon-setup in the libexec directory of its prefix (/usr/local)
    assert "/host/usr/local/libexec/cordon/cordon-init" in script
    assert "/host/usr/local/libexec/cordon/cordon-setup" in script
    with open(os.path.join(DIST, "Containerfile")) as f:
        containerfile = f.read()
    for src in re.findall(r"/opt/cordon/[\w/.-]+", script):
        assert src in containerfile, (src, containerfile)
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    (ds,) = [d for d in load_all("install-daemonset.yaml") if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["containers"][0]["securityContext"]["privileged"] is True


def test_the_examples_use_the_runtime_class():
    docs = load_all("sandbox-example.yaml")
    pod = next(d for d in docs if d["kind"] == "Pod")
    sandbox = next(d for d in docs if d["kind"] == "Sandbox")
    assert pod["spec"]["runtimeClassName"] == "cordon"
    assert sandbox["apiVersion"] == "agents.x-k8s.io/v1alpha1"
    assert sandbox["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "cordon"


def test_containerd_loads_the_snippet(tmp_path):
    containerd = shutil.which("containerd")
    need(containerd, "containerd (tests/run-all installs Debian's)")
    with open(os.path.join(DIST, "containerd-cordon.toml")) as f:
        text = f"version = 2\nroot = \"{tmp_path}/root\"\nstate = \"{tmp_path}/state\"\n" + f.read()
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    r = subprocess.run([containerd, "--config", str(cfg), "config", "dump"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r
    dumped = tomllib.loads(r.stdout)
    cordon = dumped["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["cordon"]
    assert cordon["runtime_type"] == "io.containerd.runc.v2", cordon
    assert cordon["options"]["BinaryName"] == "/usr/local/sbin/cordon-runtime", cordon
    assert cordon["container_annotations"] == ["io.cordon.*"], cordon
