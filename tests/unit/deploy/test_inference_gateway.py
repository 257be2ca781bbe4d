"""deploy/kubernetes/inference-gateway.yaml, offline: the core objects (EPP Deployment, Service, RBAC,
ConfigMap) against the Kubernetes schemas (kubernetes-validate, strict); the InferencePool against the
inference extension v1.0.2 CRD's own openAPIV3Schema (crds/, unknown fields refused as kubectl's strict
field validation does) plus the CRD's one CEL rule; the HTTPRoute against a small schema of the
Gateway API fields it uses. And that the pieces agree: the pool selects deployment.yaml's pods on their
port, its picker reference reaches the EPP's Service, the EPP watches this pool, its plugins are v1.0's,
and every metric the EPP reads is one our /metrics exports."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from llm_byoc.adapters.messages import LoRAStats
from llm_byoc.metrics import ServingMetrics, engine_refresher
from llm_byoc.protocol import EngineState, HealthReport, KVCacheStats, ModelInfo
from prometheus_client.parser import text_string_to_metric_families
from test_kubernetes_manifests import documents, env_of, validate

CRD = Path(__file__).parent / "crds" / "inference.networking.k8s.io_inferencepools.yaml"
MANIFEST = "inference-gateway.yaml"
# The plugin types the v1.0.2 EPP registers (cmd/epp/runner/runner.go, registerInTreePlugins).
EPP_PLUGIN_TYPES = {"prefix-cache-scorer", "max-score-picker", "random-picker", "weighted-random-picker",
                    "single-profile-handler", "kv-cache-utilization-scorer", "queue-scorer", "lora-affinity-scorer"}
# The HTTPRoute fields used here, as gateway.networking.k8s.io/v1 spells them (no CRD offline).
HTTP_ROUTE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "parentRefs": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                                   "name": {"type": "string"}, "namespace": {"type": "string"}}}},
                "rules": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "matches": {"type": "array", "items": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"path": {
                                "type": "object", "additionalProperties": False,
                                "properties": {"type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]},
                                               "value": {"type": "string"}}}}}},
                        "backendRefs": {"type": "array", "items": {
                            "type": "object", "required": ["name"], "additionalProperties": False,
                            "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                                           "name": {"type": "string"}, "weight": {"type": "integer"},
                                           "port": {"type": "integer"}}}},
                        "timeouts": {"type": "object", "additionalProperties": False, "properties": {
                            "request": {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"},
                            "backendRequest": {"type": "string"}}},
                    }}},
            },
        },
    },
}


def strict(schema: dict) -> dict:
    """The CRD schema with unknown fields refused wherever it lists an object's fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def pool_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return strict(v1["schema"]["openAPIV3Schema"])


def validate_pool(pool: dict) -> None:
    assert (pool["apiVersion"], pool["kind"]) == ("inference.networking.k8s.io/v1", "InferencePool")
    jsonschema.validate(pool, pool_schema())
    picker = pool["spec"]["endpointPickerRef"]
    # The CRD's CEL rule (x-kubernetes-validations, which jsonschema does not run):
    assert picker.get("kind", "Service") != "Service" or "port" in picker, "port is required when kind is Service"


def objects() -> dict[str, dict]:
    return documents(MANIFEST)


def epp_args() -> dict[str, str]:
    [container] = objects()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert all(arg.startswith("--") and "=" in arg for arg in container["args"])
    return dict(arg[2:].split("=", 1) for arg in container["args"])


def test_every_object_validates():
    found = objects()
    assert set(found) == {"InferencePool", "Service", "ServiceAccount", "Deployment", "ConfigMap", "Role",
                          "RoleBinding", "ClusterRole", "ClusterRoleBinding", "HTTPRoute"}
    for kind, obj in found.items():
        if kind == "InferencePool":
            validate_pool(obj)
        elif kind == "HTTPRoute":
            jsonschema.validate(obj, HTTP_ROUTE_SCHEMA)
        else:
            validate(obj)


def test_the_pool_holds_the_serving_pods_on_their_port():
    pool = objects()["InferencePool"]["spec"]
    deployment = documents("deployment.yaml")["Deployment"]
    pod = deployment["spec"]["template"]
    assert pool["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    assert [p["number"] for p in pool["targetPorts"]] == [p["containerPort"] for p in container["ports"]]


def test_the_picker_reference_reaches_the_epp():
    found = objects()
    picker, service, epp = found["InferencePool"]["spec"]["endpointPickerRef"], found["Service"], found["Deployment"]
    assert picker["name"] == service["metadata"]["name"] and picker.get("kind", "Service") == "Service"
    [port] = service["spec"]["ports"]
    assert port["port"] == picker["port"]["number"] and port["appProtocol"] == "http2"
    pod = epp["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    args = epp_args()
    assert int(args["grpc-port"]) == port["targetPort"]
    probe_port = int(args["grpc-health-port"])
    [container] = pod["spec"]["containers"]
    assert container["readinessProbe"]["grpc"]["port"] == probe_port == container["livenessProbe"]["grpc"]["port"]


def test_the_epp_watches_this_pool_with_the_rights_it_needs():
    found = objects()
    args = epp_args()
    pool = found["InferencePool"]
    assert args["pool-name"] == pool["metadata"]["name"]
    assert args["pool-group"] == pool["apiVersion"].split("/")[0]
    account = found["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == found["ServiceAccount"]["metadata"]["name"]
    for binding in (found["RoleBinding"], found["ClusterRoleBinding"]):
        [subject] = binding["subjects"]
        assert (subject["kind"], subject["name"], subject["namespace"]) == ("ServiceAccount", account,
                                                                             args["pool-namespace"])
    assert found["RoleBinding"]["roleRef"]["name"] == found["Role"]["metadata"]["name"]
    grants = {(group, resource): set(rule["verbs"]) for rule in found["Role"]["rules"]
              for group in rule["apiGroups"] for resource in rule["resources"]}
    for needed in (("inference.networking.k8s.io", "inferencepools"), ("", "pods")):
        assert {"get", "list", "watch"} <= grants[needed], needed


def test_the_plugins_are_v1_0_s_and_the_config_file_is_mounted():
    found = objects()
    args = epp_args()
    pod = found["Deployment"]["spec"]["template"]["spec"]
    [mount] = pod["containers"][0]["volumeMounts"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = found["ConfigMap"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    folder, _, key = args["config-file"].rpartition("/")
    assert folder == mount["mountPath"] and key in config_map["data"]
    config = yaml.safe_load(config_map["data"][key])
    assert (config["apiVersion"], config["kind"]) == ("inference.networking.x-k8s.io/v1alpha1", "EndpointPickerConfig")
    declared = {plugin.get("name", plugin["type"]): plugin["type"] for plugin in config["plugins"]}
    assert set(declared.values()) <= EPP_PLUGIN_TYPES
    [profile] = config["schedulingProfiles"]
    assert {ref["pluginRef"] for ref in profile["plugins"]} == set(declared)
    assert {"queue-scorer", "kv-cache-utilization-scorer"} <= set(declared.values())


def exported_families() -> set[str]:
    """The metric families our /metrics shows once a model is loaded and a LoRA adapter runs."""
    info = ModelInfo("llama", "/opt/ml/model", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16, load_time_s=1.0)
    lora = LoRAStats(max_loras=4, max_cpu_loras=8, registered=2, loaded=1, active=["support"], running=["support"],
                     waiting=[])

    class Engine:
        def health(self):
            return HealthReport(EngineState.READY, info=info, num_waiting=3, num_running=5,
                                kv_cache=KVCacheStats(16, 100, 40, 0, 600), lora=lora)

    m = ServingMetrics()
    engine_refresher(Engine(), m)()
    return {family.name for family in text_string_to_metric_families(m.render()[0].decode()) if family.samples}


def test_every_metric_the_epp_reads_is_exported():
    args = epp_args()
    read = [args[flag] for flag in ("total-queued-requests-metric", "kv-cache-usage-percentage-metric",
                                    "lora-info-metric")]
    assert read == ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info"]
    assert set(read) <= exported_families()
    pod = documents("deployment.yaml")["Deployment"]["spec"]["template"]
    assert args["model-server-metrics-path"] == pod["metadata"]["annotations"]["prometheus.io/path"]


def test_the_route_sends_a_gateways_traffic_to_the_pool_for_as_long_as_a_request_may_take():
    found = objects()
    [rule] = found["HTTPRoute"]["spec"]["rules"]
    [backend] = rule["backendRefs"]
    pool = found["InferencePool"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        pool["apiVersion"].split("/")[0], "InferencePool", pool["metadata"]["name"])
    [container] = documents("deployment.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert rule["timeouts"]["request"] == f"{env_of(container)['SAGEMAKER_MODEL_SERVER_TIMEOUT']}s"


@pytest.mark.parametrize("path, value", [(("spec", "targetPort"), 8080),  # v1alpha2's targetPortNumber, misspelt
                                         (("spec", "endpointPickerRef", "failureMode"), "FailOpenly"),
                                         (("spec", "targetPorts"), [{"number": 70000}])])
def test_the_pool_schema_catches_a_wrong_field(path, value):
    pool = objects()["InferencePool"]
    node = pool
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate_pool(pool)


def test_the_route_schema_catches_a_wrong_field():
    route = objects()["HTTPRoute"]
    route["spec"]["rules"][0]["backendRef"] = route["spec"]["rules"][0].pop("backendRefs")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(route, HTTP_ROUTE_SCHEMA)
