"""Multi-model mode on NVIDIA Triton Inference Server (LLM_BYOC_MULTI_MODEL_BACKEND=triton).

Triton hosts and runs the models; our layer keeps the store, the LRU cache
and memory budget, the model files and the SageMaker multi-model API.

    server.py        find tritonserver (NVIDIA's build, or nvidia-pytriton's), run it
    grpc_api.py      Triton's gRPC API through tritonclient; its errors as ours
    repository.py    the model folders we write: config.pbtxt + model.py / model.onnx
    kinds.py         each kind's tensors; our side of a call and the stub's side
    python_model.py  the class Triton's Python backend runs: our handlers, batched
    factory.py       the manager's worker factory and workers for this backend
"""
