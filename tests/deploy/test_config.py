"""The deployment files checked without running them: compose files, .env.example, the seccomp profile and the
Kubernetes manifests (against the Kubernetes schema, offline, with kubernetes-validate)."""

from __future__ import annotations

import copy
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from reward_server.app import create_app
from reward_server.settings import Settings
from tests.conftest import IN_CI, REPO_ROOT
from tests.deploy.conftest import COMPOSE_FILE, SCALE_FILE, compose_config

# The dev extra has it (CI installs it); a bare checkout skips the Kubernetes checks with the fix.
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")

SECCOMP_SCRIPT = REPO_ROOT / "docker" / "server" / "seccomp.py"
SECCOMP_PROFILE = REPO_ROOT / "docker" / "server" / "seccomp.json"
SERVER_DOCKERFILE = REPO_ROOT / "docker" / "server" / "Dockerfile"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
# The oldest release whose API has everything the manifests use (hostUsers, procMount), and the newest known.
K8S_VERSIONS = ["1.33.0", kubernetes_validate.latest_version()]
# Variables that compose reads for itself (interpolation), not server settings.
COMPOSE_ONLY = {"RLVR_MEM_LIMIT", "RLVR_PIDS_LIMIT", "RLVR_SERVER_IMAGE", "RLVR_LB_IMAGE"}


def setting_names() -> set[str]:
    return {f"RLVR_{name.upper()}" for name in Settings.model_fields}


def seccomp_module() -> dict[str, Any]:
    # docker/ is a folder of build files, not a package (and its name is the docker SDK's): run it by path.
    return runpy.run_path(str(SECCOMP_SCRIPT))


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = {}
    for f in (COMPOSE_FILE, SCALE_FILE):
        for name, service in compose_config(f)["services"].items():
            services[f"{f.name}:{name}"] = service
    return services


# --- compose ---------------------------------------------------------------------------------------------


def test_every_service_uses_host_or_no_network(compose_services: dict[str, dict[str, Any]]) -> None:
    # The engine runs with --bridge=none: a compose default network would be a bridge, so none may be made.
    assert set(compose_services) == {
        "docker-compose.yml:server",
        "docker-compose.scale.yml:replica-1",
        "docker-compose.scale.yml:replica-2",
        "docker-compose.scale.yml:lb",
    }
    for name, service in compose_services.items():
        assert service.get("network_mode") in ("host", "none"), name
        assert not service.get("networks"), name


def test_every_service_is_confined(compose_services: dict[str, dict[str, Any]]) -> None:
    for name, service in compose_services.items():
        assert service.get("user", "").split(":")[0] not in ("", "0", "root"), name
        assert service.get("cap_drop") == ["ALL"] and not service.get("cap_add"), name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert service.get("read_only") is True, name
        assert not service.get("privileged"), name
        for volume in service.get("volumes", []):
            assert "docker.sock" not in str(volume.get("source", "")), name
        assert "mem_limit" in service and "pids_limit" in service, name


def test_servers_use_the_generated_seccomp_profile(compose_services: dict[str, dict[str, Any]]) -> None:
    servers = {k: v for k, v in compose_services.items() if not k.endswith(":lb")}
    for name, service in servers.items():
        options = service["security_opt"]
        assert "seccomp=unconfined" not in options, name
        [seccomp] = [o for o in options if o.startswith("seccomp=")]
        assert (REPO_ROOT / seccomp.removeprefix("seccomp=")).resolve() == SECCOMP_PROFILE, name
        assert service["environment"]["RLVR_SANDBOX_BACKEND"] == "local", name


def test_servers_run_under_an_init(compose_services: dict[str, dict[str, Any]]) -> None:
    # A replaced sandbox's runner is orphaned to PID 1; only an init reaps it (see test_compose.py).
    servers = {k: v for k, v in compose_services.items() if not k.endswith(":lb")}
    for name, service in servers.items():
        assert service.get("init") is True, name


def test_replicas_and_balancer_agree_on_ports() -> None:
    env = {"RLVR_PORT": "9000", "RLVR_REPLICA_1_PORT": "9101", "RLVR_REPLICA_2_PORT": "9102", "RLVR_HOST": "10.1.2.3"}
    services = compose_config(SCALE_FILE, env=env)["services"]
    lb = services["lb"]["environment"]
    assert lb["RLVR_LB_LISTEN"] == "10.1.2.3:9000"
    assert lb["RLVR_LB_UPSTREAMS"].split() == ["127.0.0.1:9101", "127.0.0.1:9102"]
    assert services["replica-1"]["environment"]["RLVR_PORT"] == "9101"
    assert services["replica-2"]["environment"]["RLVR_PORT"] == "9102"
    # Replicas bind loopback only: the balancer is the one way in.
    assert {services[r]["environment"]["RLVR_HOST"] for r in ("replica-1", "replica-2")} == {"127.0.0.1"}


# --- .env.example ----------------------------------------------------------------------------------------


def env_example() -> dict[str, str]:
    """Every ``RLVR_*`` assignment of .env.example, commented out or not."""
    pattern = re.compile(r"^#?(RLVR_[A-Z0-9_]+)=(.*)$")
    return {m.group(1): m.group(2) for line in ENV_EXAMPLE.read_text().splitlines() if (m := pattern.match(line))}


def test_env_example_names_only_real_settings() -> None:
    # Settings ignore unknown RLVR_* variables, so a misspelt name would silently do nothing.
    names = set(env_example())
    assert names - setting_names() - COMPOSE_ONLY == set()
    assert {"RLVR_HOST", "RLVR_PORT", "RLVR_HTTP_WORKERS", "RLVR_MATH_WORKERS", "RLVR_SANDBOX_POOL_SIZE"} <= names
    compose_text = COMPOSE_FILE.read_text()
    for name in names & COMPOSE_ONLY:
        assert "${" + name in compose_text, f"{name} is in .env.example but docker-compose.yml never reads it"


def test_env_example_values_are_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(setting_names()):
        monkeypatch.delenv(name, raising=False)
    values = {k: v for k, v in env_example().items() if k not in COMPOSE_ONLY}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.host == "127.0.0.1" and settings.port == 8000 and settings.math_workers == 8


# --- seccomp ---------------------------------------------------------------------------------------------


def test_seccomp_profile_is_default_deny_and_allows_bubblewrap() -> None:
    module = seccomp_module()
    profile = json.loads(SECCOMP_PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allow, deny = profile["syscalls"]
    assert allow["action"] == "SCMP_ACT_ALLOW" and deny["action"] == "SCMP_ACT_ERRNO" and deny["errnoRet"] == 1
    allowed = set(allow["names"])
    assert set(module["NEEDED_BY_BWRAP"]) <= allowed
    assert set(deny["names"]) == set(module["DENIED"])
    assert not allowed & set(deny["names"])
    # A few that must never be let through, whatever the table holds.
    assert not allowed & {"ptrace", "bpf", "kexec_load", "init_module", "io_uring_setup", "keyctl", "setns"}
    assert {"read", "write", "execve", "clone", "wait4", "socket", "mmap"} <= allowed


def test_seccomp_profile_is_what_the_script_makes(tmp_path: Path) -> None:
    module = seccomp_module()
    header = Path(module["HEADER"])
    if not header.exists():
        pytest.fail(f"{header} is missing: apt-get install linux-libc-dev")
    table = set(module["syscall_names"](header))
    profile = json.loads(SECCOMP_PROFILE.read_text())
    named = {n for rule in profile["syscalls"] for n in rule["names"]}
    assert named <= table, f"not syscalls of this kernel's table: {sorted(named - table)}"
    if table - named:
        # Newer headers than the profile was made from: their new syscalls stay refused (ENOSYS) until
        # someone regenerates the profile on purpose; everything else was checked above.
        print(f"\nsyscalls newer than the profile, refused: {sorted(table - named)}")
        return
    done = subprocess.run([sys.executable, str(SECCOMP_SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # And --check notices a stale file.
    stale = tmp_path / "seccomp.json"
    stale.write_text(SECCOMP_PROFILE.read_text().replace('"ptrace",', ""))
    done = subprocess.run(
        [sys.executable, str(SECCOMP_SCRIPT), "--check", "--output", str(stale)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "stale" in done.stderr


# --- Kubernetes ------------------------------------------------------------------------------------------


def k8s_documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str) -> dict[str, Any]:
    [doc] = [d for d in k8s_documents() if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_match_the_kubernetes_schema(version: str) -> None:
    docs = k8s_documents()
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Deployment", "NetworkPolicy", "Service"]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "dorp"], ["ALL"]),  # typo
        (["spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"], "http"),  # wrong type
        (["spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "paht"], "/readyz"),  # typo
        (["spec", "replicas"], "two"),  # wrong type
    ],
)
def test_k8s_schema_check_rejects_broken_manifests(path: list[Any], value: Any) -> None:
    # The check above is only worth something if it can fail.
    doc = copy.deepcopy(by_kind("Deployment"))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_k8s_manifests_fit_the_image_and_the_app() -> None:
    deployment, service, config = by_kind("Deployment"), by_kind("Service"), by_kind("ConfigMap")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    # The Service and the Deployment select the pods the Deployment makes.
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in ports
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["RLVR_PORT"]) == ports["http"] and env["RLVR_HOST"] == "0.0.0.0"
    # Settings are real settings with valid values (the keys file exists only in a pod: checked below).
    assert set(config["data"]) <= setting_names()
    keys_file = env.pop("RLVR_API_KEYS_FILE")
    settings = Settings(**{k.removeprefix("RLVR_").lower(): v for k, v in {**config["data"], **env}.items()})
    # Listening on every interface, the pod reads its API keys from a mounted Secret, and lets only trainers in.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    [keys_volume] = [name for name, v in volumes.items() if "secret" in v]
    assert keys_file.startswith(mounts[keys_volume]["mountPath"] + "/") and mounts[keys_volume]["readOnly"]
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsGroup"]
    policy = by_kind("NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == pod["metadata"]["labels"]
    assert policy["spec"]["egress"] == [] and set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    # SIGTERM comes after preStop; the drain and the pools' shutdown must fit in the grace period.
    pre_stop_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop_s + settings.drain_s + 15
    assert container["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    # The probes ask routes the app has.
    routes = set(create_app().openapi()["paths"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] in routes
    # The uid is the image's user, and the pod keeps the compose file's confinement.
    uid = re.search(r"^USER (\d+):(\d+)$", SERVER_DOCKERFILE.read_text(), re.MULTILINE)
    assert uid is not None
    assert pod["spec"]["securityContext"]["runAsUser"] == int(uid.group(1))
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert pod["spec"]["hostUsers"] is False  # required for procMount: Unmasked
    assert pod["spec"]["shareProcessNamespace"] is True  # an init that reaps replaced sandboxes, as in compose
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True


def test_building_the_images_stops_at_once_without_an_engine(tmp_path: Path) -> None:
    # Issue 16: the base's debootstrap ran 1 min 48 s before `docker import` found no engine. With a docker CLI
    # that reaches no engine (a socket that is not there), the build stops before debootstrap, naming the fix.
    if shutil.which("docker") is None:
        (pytest.fail if IN_CI else pytest.skip)("no docker CLI here: apt-get install docker.io")
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}", "REBUILD": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [str(REPO_ROOT / "docker/build_images.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done
    assert "no Docker engine answers ('docker info' failed): start it" in done.stderr
    assert "debootstrap" not in done.stdout  # nothing was debootstrapped
    assert time.monotonic() - start < 60
