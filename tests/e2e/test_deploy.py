"""deploy/ is valid and consistent with braid: every Kubernetes manifest passes its schema
(the official ones bundled in kubernetes-validate, strict; deploy/schemas/ for the custom
resources), the pieces point at each other, the sizing and termination settings follow from
braid's flags, and every metric and flag the manifests name exists in the real binary."""

import json
import re
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import requests
import yaml

from conftest import BIN, ROOT

DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.30.0"  # the oldest version still widely run that has every field used
CUSTOM = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("gateway.networking.k8s.io/v1", "Gateway"): "gateway-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-v1alpha1.json",
}
# Resident memory of `braid serve` with the default model beside its KV cache, measured (MiB):
# 1,217 idle (the pool is resident from the start), 1,238 at most under load, with
# --kv-cache-mb 1024 (docs/DEPLOY.md).
BASE_RSS_MIB = 1238 - 1024


def schema(name: str) -> dict:
    return json.loads((DEPLOY / "schemas" / name).read_text())


def documents() -> list[tuple[Path, dict]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path, doc))
    return docs


DOCS = documents()


def find(kind: str, name: str) -> dict:
    matches = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def flag(args: list[str], name: str) -> str:
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    raise AssertionError(f"--{name} not in {args}")


def test_the_manifests_exist():
    kinds = {d["kind"] for _, d in DOCS}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "ScaledObject", "InferencePool", "HTTPRoute"} <= kinds


@pytest.mark.parametrize("path,doc", DOCS, ids=[f"{p.relative_to(DEPLOY)}:{d['kind']}/{d['metadata']['name']}" for p, d in DOCS])
def test_every_manifest_passes_its_schema(path, doc):
    custom = CUSTOM.get((doc["apiVersion"], doc["kind"]))
    if custom:
        jsonschema.Draft202012Validator(schema(custom)).validate(doc)
    else:
        # Raises SchemaNotFoundError for a kind it does not know: every kind must be checked.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validators_catch_mistakes():
    d = json.loads(json.dumps(find("Deployment", "braid")))
    d["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 45
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    pool = json.loads(json.dumps(find("InferencePool", "braid")))
    pool["spec"]["targetPorts"][0]["number"] = "8080"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(pool, schema("inferencepool-v1.json"))
    del pool["spec"]["endpointPickerRef"]["port"]
    pool["spec"]["targetPorts"][0]["number"] = 8080
    with pytest.raises(jsonschema.ValidationError, match="port"):
        jsonschema.validate(pool, schema("inferencepool-v1.json"))


def test_the_endpoint_picker_config_is_valid_and_maps_braids_metrics():
    cm = find("ConfigMap", "braid-epp")
    config = yaml.safe_load(cm["data"]["braid-epp.yaml"])
    jsonschema.validate(config, schema("endpointpickerconfig-v1alpha1.json"))
    declared = {p.get("name", p["type"]) for p in config["plugins"]}
    for profile in config["schedulingProfiles"]:
        for ref in profile["plugins"]:
            assert ref["pluginRef"] in declared, ref
    epp = find("Deployment", "braid-epp")["spec"]["template"]["spec"]
    args = epp["containers"][0]["args"]
    assert flag(args, "total-queued-requests-metric") == "braid_num_requests_waiting"
    assert flag(args, "total-running-requests-metric") == "braid_num_requests_running"
    assert flag(args, "kv-cache-usage-percentage-metric") == "braid_kv_cache_usage_perc"
    assert flag(args, "cache-info-metric") == "braid_cache_config_info"
    assert flag(args, "pool-name") == find("InferencePool", "braid")["metadata"]["name"]
    mount = epp["containers"][0]["volumeMounts"][0]["mountPath"]
    assert flag(args, "config-file") == f"{mount}/braid-epp.yaml"


def test_the_pieces_point_at_each_other():
    dep = find("Deployment", "braid")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    port = container["ports"][0]["containerPort"]
    assert port == 8080  # the Dockerfile's entrypoint listens there
    pool = find("InferencePool", "braid")
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    epp_service = find("Service", pool["spec"]["endpointPickerRef"]["name"])
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] in [p["port"] for p in epp_service["spec"]["ports"]]
    assert find("Service", "braid")["spec"]["selector"].items() <= pod_labels.items()
    assert find("PodDisruptionBudget", "braid")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert find("HorizontalPodAutoscaler", "braid")["spec"]["scaleTargetRef"]["name"] == "braid"
    assert find("ScaledObject", "braid")["spec"]["scaleTargetRef"]["name"] == "braid"
    backend = find("HTTPRoute", "braid")["spec"]["rules"][0]["backendRefs"][0]
    assert (backend["group"], backend["kind"], backend["name"]) == ("inference.networking.k8s.io", "InferencePool", "braid")
    gateway = find("Gateway", "inference-gateway")
    assert find("HTTPRoute", "braid")["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"]


def mebibytes(quantity: str) -> float:
    m = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert m, quantity
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def test_probes_termination_and_resources_follow_from_the_flags():
    spec = find("Deployment", "braid")["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = c["args"]
    drain = int(flag(args, "drain-timeout-secs"))
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    connection_grace = 5  # braid's CONNECTION_GRACE after the drain
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + drain + connection_grace
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > pre_stop + drain, "liveness must outlast a drain"
    ready = c["readinessProbe"]
    assert ready["periodSeconds"] * ready["failureThreshold"] <= pre_stop, "unready before SIGTERM's drain begins"
    kv = int(flag(args, "kv-cache-mb"))
    request = mebibytes(c["resources"]["requests"]["memory"])
    limit = mebibytes(c["resources"]["limits"]["memory"])
    assert request >= BASE_RSS_MIB + kv, f"{request} MiB < measured {BASE_RSS_MIB} + {kv}"
    assert limit >= request * 1.1


def test_flags_and_metrics_named_in_the_manifests_exist(server):
    help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for a in find("Deployment", "braid")["spec"]["template"]["spec"]["containers"][0]["args"]:
        name = a.split("=", 1)[0]
        assert re.search(rf"^\s+{re.escape(name)}\b", help_text, re.M), f"braid serve has no {name}"
    exposed = requests.get(server.url + "/metrics", timeout=10).text
    named = {find("HorizontalPodAutoscaler", "braid")["spec"]["metrics"][0]["pods"]["metric"]["name"]}
    named |= set(re.findall(r"braid_\w+", find("ScaledObject", "braid")["spec"]["triggers"][0]["metadata"]["query"]))
    epp_args = find("Deployment", "braid-epp")["spec"]["template"]["spec"]["containers"][0]["args"]
    named |= {a.split("=", 1)[1] for a in epp_args if "=braid_" in a}
    assert len(named) == 4, named
    for metric in named:
        assert re.search(rf"^{metric}[ {{]", exposed, re.M), f"/metrics has no {metric}"
    info = re.search(r"^braid_cache_config_info\{([^}]*)\} 1$", exposed, re.M)
    assert info and 'block_size="16"' in info.group(1) and "num_gpu_blocks=" in info.group(1)


def test_the_llm_d_variant_routes_on_braids_events_and_metrics(server):
    """deploy/llm-d/: llm-d's router recognises braid's pods, dials their KV-cache events where
    braid publishes them under the topic it parses, tokenizes through braid, and reads metrics
    braid exports."""
    dep = find("Deployment", "braid-llm-d")
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert labels["llm-d.ai/inference-serving"] == "true" and labels["llm-d.ai/role"] == "decode"
    container = pod["spec"]["containers"][0]
    args = container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    pool = find("InferencePool", "braid-llm-d")
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pool["spec"]["targetPorts"] == [{"number": ports["http"]}]
    router_service = find("Service", pool["spec"]["endpointPickerRef"]["name"])
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] in [p["port"] for p in router_service["spec"]["ports"]]

    config = yaml.safe_load(find("ConfigMap", "braid-llm-d-router")["data"]["router.yaml"])
    jsonschema.validate(config, schema("endpointpickerconfig-llm-d-v1alpha1.json"))
    plugins = {p.get("name", p["type"]): p.get("parameters", {}) for p in config["plugins"]}
    refs = [r["pluginRef"] for prof in config["schedulingProfiles"] for r in prof["plugins"]]
    for source in config["dataLayer"]["sources"]:
        refs += [source["pluginRef"]] + [e["pluginRef"] for e in source.get("extractors", [])]
    assert set(refs) <= plugins.keys(), set(refs) - plugins.keys()

    # Events: bound on the port the router dials, under kv@POD_IP:PORT@MODEL, MODEL the served name.
    served = requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    endpoint = flag(args, "kv-events")
    assert endpoint == f"tcp://0.0.0.0:{ports['kv-events']}"
    events = plugins["precise-prefix-cache-producer"]
    assert events["kvEventsConfig"]["podDiscoveryConfig"]["socketPort"] == ports["kv-events"]
    assert events["kvEventsConfig"]["discoverPods"] is True
    assert events["tokenProcessorConfig"]["blockSize"] == 16  # braid's --block-size default
    topic = flag(args, "kv-events-topic")
    assert topic == f"kv@$(POD_IP):{ports['http']}@{served}"
    assert topic.startswith(events["kvEventsConfig"]["topicFilter"])
    assert labels["llm-d.ai/model"] == served == plugins["token-producer"]["modelName"]
    assert "POD_IP" in [e["name"] for e in container["env"]]

    # Tokens: through braid's render endpoints, at the Service that fronts the pods.
    url = plugins["token-producer"]["vllm"]["url"]
    service = find("Service", "braid-llm-d")
    assert url == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert service["spec"]["selector"].items() <= labels.items()
    render = requests.post(server.url + "/v1/completions/render", json={"prompt": "Hello"}, timeout=30)
    assert render.status_code == 200 and render.json()[0]["token_ids"]

    # Metrics: the braid engine config, chosen by the pod's engine label, names what /metrics has.
    metrics = plugins["core-metrics-extractor"]
    engines = {e["name"]: e for e in metrics["engineConfigs"]}
    assert labels[metrics["engineLabelKey"]] in engines
    exposed = requests.get(server.url + "/metrics", timeout=10).text
    for key, metric in engines["braid"].items():
        if key != "name":
            assert re.search(rf"^{metric}[ {{]", exposed, re.M), f"/metrics has no {metric}"

    help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for a in args:
        name = a.split("=", 1)[0]
        assert re.search(rf"^\s+{re.escape(name)}\b", help_text, re.M), f"braid serve has no {name}"
