"""SAGEMAKER_MULTI_MODEL=true: the app built from the multi-model routes."""

from __future__ import annotations

from llm_byoc.api.app import create_multi_model_app
from llm_byoc.config import MultiModelConfig, ServerConfig


def test_multi_model_app_serves_the_mme_routes_with_our_error_handling(tmp_path):
    config = ServerConfig(multi_model=True, max_payload_bytes=1024)
    app = create_multi_model_app(config, MultiModelConfig(model_root=str(tmp_path)))
    client = app.test_client()
    assert client.get("/ping").status_code == 200
    response = client.post("/invocations", json={"inputs": "x"}, headers={"X-Request-Id": "mm-1"})
    assert response.status_code == 400
    assert "X-Amzn-SageMaker-Target-Model" in response.get_json()["error"]
    assert response.headers["X-Request-Id"] == "mm-1"
    too_big = client.post("/models", data=b"x" * 2048, content_type="application/json")
    assert too_big.status_code == 413 and too_big.get_json()["type"] == "payload_too_large"
