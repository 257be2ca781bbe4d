"""What the fork server (the zygote) imports once, for every model process it forks.

Imported by multiprocessing's fork server at its start (``launcher.py``), before
the modules the caller asks for (the multi-model handlers). The
rules that keep a fork safe: the OpenMP settings are applied before torch
loads (``threads.prepare_threads``); numpy's OpenBLAS pool is kept at one
thread, so that importing numpy starts no thread; nothing here runs a torch
op (libgomp starts its pool at the first parallel region) or opens an ONNX
Runtime session (its import alone starts a thread, so onnxruntime is left to
the worker: it costs ~30 ms there). A worker sets its thread counts after the
fork (``torch.set_num_threads``, ONNX Runtime session options).
"""

from __future__ import annotations

import importlib
import os
import sys

from .threads import ZYGOTE_DEFAULTS, native_thread_count, prepare_threads

# Encoders of the common sentence-embedding and classification checkpoints
# (MiniLM is a BERT): their modeling and tokenizer modules load lazily in
# transformers, so they are imported here by name. Others load in the worker.
PRELOADED_ARCHITECTURES = ("bert", "distilbert", "roberta", "xlm_roberta", "mpnet")


def _preload() -> None:
    prepare_threads()
    for name, value in ZYGOTE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    import numpy  # noqa: F401
    import PIL.Image  # noqa: F401
    import safetensors.torch  # noqa: F401
    import tokenizers  # noqa: F401
    import torch  # noqa: F401
    import transformers

    transformers.utils.logging.disable_progress_bar()
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer  # noqa: F401

    for arch in PRELOADED_ARCHITECTURES:
        for module in (f"transformers.models.{arch}.modeling_{arch}", f"transformers.models.{arch}.configuration_{arch}"):
            try:
                importlib.import_module(module)
            except ImportError:
                pass
    threads = native_thread_count()
    if threads > 1:  # a library started a thread at import: forks would not be clean
        sys.stderr.write(f"llm_byoc zygote: {threads} threads after preloading (expected 1)\n")


_preload()
