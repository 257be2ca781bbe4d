"""deploy/kubernetes/: the manifests parse, validate against the Kubernetes schemas
(kubernetes-validate, offline; the InferenceService's predictor as the pod it becomes) and
carry what the container needs: port 8080, /ping probes, settings the container accepts,
the model where LLM_BYOC_MODEL points, resources, a long enough grace period, the image's
unprivileged user, and an HPA on a metric the server exports, served by the adapter rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llm_byoc.api.serve import ENGINE_STOP_TIMEOUT_S
from llm_byoc.config import ENV_DEVICE, ENV_GRACEFUL_TIMEOUT, ENV_MODEL, ServerConfig
from llm_byoc.deploy.specs import validate_environment
from llm_byoc.metrics import ServingMetrics
from llm_byoc.process.privileges import SERVICE_UID
from prometheus_client.parser import text_string_to_metric_families

kubernetes_validate = pytest.importorskip("kubernetes_validate")

FOLDER = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"
PORT = 8080
# InferenceService predictor fields that are KServe's, not the pod's (ComponentExtensionSpec)
KSERVE_FIELDS = {"minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "containerConcurrency", "timeout",
                 "canaryTrafficPercent", "logger", "batcher", "labels", "annotations", "deploymentStrategy",
                 "autoScaling"}


def documents(name: str) -> dict[str, dict]:
    """{kind: object} of one manifest file."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all((FOLDER / name).read_text()) if doc}


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)  # raises ValidationError naming the field


def env_of(container: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def check_serving_container(container: dict, pod_spec: dict, model_path: str, port_ref) -> None:
    """What every manifest's llm-byoc container must get right."""
    env = env_of(container)
    assert container["args"] == ["serve"]
    assert [p["containerPort"] for p in container["ports"]] == [PORT]
    port_name = container["ports"][0].get("name")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        http = container[probe]["httpGet"]
        assert http["path"] == "/ping" and http["port"] in (PORT, port_name), probe
        assert container[probe]["timeoutSeconds"] >= 3  # /ping answers within 2 s
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # minutes to load a model
    assert env[ENV_MODEL] == model_path
    validate_environment({k: v for k, v in env.items() if k != "STORAGE_URI"}, multi_model=False)
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]
    if env[ENV_DEVICE] == "cuda":
        assert resources["limits"]["nvidia.com/gpu"] == "1" == resources["requests"]["nvidia.com/gpu"]
    graceful = ServerConfig.from_env(env).graceful_timeout_s
    assert env[ENV_GRACEFUL_TIMEOUT] and pod_spec["terminationGracePeriodSeconds"] >= graceful + 10 + ENGINE_STOP_TIMEOUT_S
    check_runs_as_the_images_user(container, pod_spec)


def check_runs_as_the_images_user(container: dict, pod_spec: dict) -> None:
    """The image starts as root (serve gives root up itself): runAsNonRoot without a numeric
    runAsUser would be refused by the kubelet, so wherever it is asked for, uid and gid 10001 go with it."""
    security = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
    assert security.get("runAsNonRoot") is True  # these manifests run unprivileged from the start
    assert security.get("runAsUser") == SERVICE_UID and security.get("runAsGroup") == SERVICE_UID, security


def test_deployment_service_and_hpa():
    objects = documents("deployment.yaml")
    assert set(objects) == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    for obj in objects.values():
        validate(obj)
    deployment, service, hpa = objects["Deployment"], objects["Service"], objects["HorizontalPodAutoscaler"]
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    [mount] = container["volumeMounts"]
    check_serving_container(container, pod["spec"], mount["mountPath"], "http")
    assert mount["readOnly"] is True
    assert mount["name"] in {v["name"] for v in pod["spec"]["volumes"]}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(PORT)

    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]

    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    by_type = {m["type"]: m for m in hpa["spec"]["metrics"]}
    queue = by_type["Pods"]["pods"]["metric"]["name"]
    exported = {family.name for family in text_string_to_metric_families(ServingMetrics().render()[0].decode())}
    assert queue in exported  # a gauge the server exports
    assert by_type["Resource"]["resource"]["name"] == "cpu"  # the fallback


def test_the_adapter_rule_serves_the_hpas_metric():
    rules = yaml.safe_load((FOLDER / "prometheus-adapter-rules.yaml").read_text())["rules"]["custom"]
    hpa = documents("deployment.yaml")["HorizontalPodAutoscaler"]
    wanted = next(m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods")
    [rule] = [r for r in rules if r["name"]["as"] == wanted]
    assert rule["seriesQuery"].startswith(f"{wanted}{{")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]


def test_podmonitor_scrapes_the_deployments_pods():
    monitor = documents("podmonitor.yaml")["PodMonitor"]
    pod = documents("deployment.yaml")["Deployment"]["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == pod["spec"]["containers"][0]["ports"][0]["name"]


def test_kserve_inference_service():
    isvc = documents("kserve-inferenceservice.yaml")["InferenceService"]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = isvc["spec"]["predictor"]
    [container] = predictor["containers"]
    assert container["name"] == "kserve-container"  # where KServe reads STORAGE_URI
    env = env_of(container)
    assert env["STORAGE_URI"].split("://")[0] in {"s3", "gs", "pvc", "hf", "https"}
    check_serving_container(container, predictor, "/mnt/models", PORT)  # where the storage initializer writes
    assert predictor["scaleMetric"] == "concurrency" and predictor["scaleTarget"] > 0
    assert 1 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    assert predictor["timeout"] >= ServerConfig.from_env(env).timeout_s
    assert isvc["metadata"]["annotations"]["prometheus.kserve.io/port"] == str(PORT)
    # No schema for the CRD offline: the predictor is validated as the pod KServe makes of it.
    pod_spec = {key: value for key, value in predictor.items() if key not in KSERVE_FIELDS}
    validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "predictor"}, "spec": pod_spec})


def test_validation_catches_a_misspelt_field():
    deployment = documents("deployment.yaml")["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/ping"}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_run_as_non_root_without_the_images_uid_is_caught():
    pod = documents("deployment.yaml")["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    del container["securityContext"]["runAsUser"]  # the kubelet would refuse it: the image's USER is root
    with pytest.raises(AssertionError):
        check_runs_as_the_images_user(container, pod)
