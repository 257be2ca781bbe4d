"""Write local_test/agent_docs/deployment.pdf, the demo's PDF document, from the text below.

    python3 local_test/make_agent_pdf.py      # the same text gives the same bytes

The committed PDF is this script's output; rerun it after editing the text.
"""

from pathlib import Path

from llm_byoc.agent.text_pdf import write_text_pdf

TITLE = "Deploying llm-byoc on Amazon SageMaker"
PARAGRAPHS = [
    TITLE,
    "The container contract. SageMaker starts the image with the argument serve. The serve script "
    "starts the engine process and gunicorn, supervises both, and exits with a non-zero code when "
    "one of them dies, so that SageMaker replaces the instance. The server listens on port 8080 "
    "unless SAGEMAKER_BIND_TO_PORT names another port. The model is not baked into the image: "
    "SageMaker unpacks model.tar.gz into /opt/ml/model.",
    "Stopping. On SIGTERM, gunicorn stops accepting connections and lets in-flight requests and "
    "streams finish within LLM_BYOC_GRACEFUL_TIMEOUT, which is 30 seconds by default; then the "
    "engine stops and the container exits with code 0. Give docker stop enough time, for example "
    "docker stop -t 60.",
    "Requests. The route /invocations takes JSON in the Hugging Face TGI style, with inputs and "
    "parameters, or in the OpenAI style, with messages or prompt. Anything that is not "
    "application/json is refused with HTTP 415. A body larger than SAGEMAKER_MAX_PAYLOAD_IN_MB, 6 "
    "megabytes by default, is refused with HTTP 413. A request that runs past "
    "SAGEMAKER_MODEL_SERVER_TIMEOUT, 60 seconds by default, ends with HTTP 504. Every error is a "
    "JSON object with the fields error and type.",
    "Streaming. With stream set to true the answer is a stream of server-sent events, one event per "
    "token, and SageMaker delivers them through invoke_endpoint_with_response_stream. An OpenAI "
    "style stream ends with the line data: [DONE]. A client that disconnects in the middle of a "
    "stream has its sequences aborted, and their KV cache blocks are freed at the next engine step.",
    "Health. GET /ping answers 200 once the model is loaded and its worker is alive, and 503 while "
    "the model loads or after the engine died. It always answers within 2 seconds.",
    "Images. The CPU image is built on python:3.11-slim and is 1.83 GB uncompressed. The GPU image "
    "is built with the build argument DEVICE=cuda and is 5.86 GB, of which the torch and CUDA "
    "libraries take 4.89 GB. It brings the CUDA 13.0 runtime and needs an NVIDIA driver of version "
    "580 or newer on the host. A GPU container that sees no GPU fails at load and serve exits with "
    "code 1.",
    "Deploying. The deploy tool pushes the image to Amazon ECR, packages the model as model.tar.gz "
    "in Amazon S3, and creates the SageMaker model, the endpoint configuration and the endpoint. "
    "A dedicated endpoint is the latency-optimized design; a multi-model endpoint is the "
    "cost-optimized design, where many models share one fleet of instances.",
    "Stateful sessions. A client opens a session by sending the body requestType NEW_SESSION; the "
    "container answers with the header X-Amzn-SageMaker-New-Session-Id, which holds the session id "
    "and its expiry time. Every request of the session carries the header "
    "X-Amzn-SageMaker-Session-Id, and SageMaker routes all of them to the same instance. The body "
    "requestType CLOSE ends the session.",
    "Adapters on SageMaker. Each LoRA adapter becomes an inference component of its own on top of "
    "a base component that holds the model. SageMaker names the adapter to the container in the "
    "header X-Amzn-SageMaker-Adapter-Identifier.",
]

if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "agent_docs" / "deployment.pdf"
    write_text_pdf(out, PARAGRAPHS)
    print(out)
