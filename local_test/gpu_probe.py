"""What the GPU image's torch and CUDA libraries can do here; prints one JSON object.

Runs inside the image (it needs nothing but the image's own Python):

    docker run --rm -i --entrypoint python IMAGE - < local_test/gpu_probe.py               # no GPU
    docker run --rm -i --gpus all --entrypoint python IMAGE - < local_test/gpu_probe.py    # with one

Without a GPU it shows that torch is the CUDA build and that the CUDA runtime,
cuBLAS and cuDNN load (the runtime reports its version; asking it for devices
fails for want of a driver). With one it adds the device, the dtype the server
picks by default (LLM_BYOC_DTYPE=auto) and a matmul in that dtype on the GPU.
tests/e2e/test_gpu_image.py and local_test/check_gpu_image.sh read its output.
"""

import ctypes
import glob
import json
import os
import site

import torch

LIBRARIES = ("libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*", "libcudnn.so.*")


def library_paths():
    """{pattern: path} of the CUDA libraries the nvidia-* wheels installed."""
    found = {}
    for root in site.getsitepackages():
        for pattern in LIBRARIES:
            hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", pattern), recursive=True))
            if hits and pattern not in found:
                found[pattern] = hits[0]
    return found


def cuda_runtime(libcudart):
    """(runtime version, device count or the error code of cudaGetDeviceCount)."""
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    libcudart.cudaRuntimeGetVersion(ctypes.byref(version))
    error = libcudart.cudaGetDeviceCount(ctypes.byref(count))
    return version.value, (count.value if error == 0 else f"error {error}")


def main():
    report = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cuda_available": torch.cuda.is_available(),
        "libraries": {},
    }
    for pattern, path in library_paths().items():
        library = ctypes.CDLL(path)  # raises if it or a dependency cannot load
        report["libraries"][pattern.split(".so")[0]] = os.path.basename(path)
        if pattern.startswith("libcudart"):
            report["cudart_version"], report["cudart_devices"] = cuda_runtime(library)
    if torch.cuda.is_available():
        from llm_byoc.models.loader import resolve_dtype

        device = torch.device("cuda")
        dtype = resolve_dtype("auto", device)
        a = torch.randn(1024, 1024, device=device, dtype=dtype)
        torch.cuda.synchronize()
        report.update(
            device_name=torch.cuda.get_device_name(0),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
            default_dtype=str(dtype).removeprefix("torch."),
            matmul_ok=bool(torch.isfinite(a @ a).all().item()),
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
