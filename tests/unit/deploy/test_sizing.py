"""deploy/sizing.py: a model's memory from its own files, against each GPU instance.

The checkpoints here have the real tensor layout of Llama-3-8B and Llama-3-70B in sparse files
(a header is all sizing reads, so the weights' bytes are never written or stored), and config.json
as their model cards ship it."""

from __future__ import annotations

import io
import json
import math
import struct

import pytest
from llm_byoc.deploy import sizing
from llm_byoc.deploy.cli import main
from llm_byoc.deploy.errors import DeployError


def llama(folder, layers, hidden, inter, heads, kv_heads, vocab=128256, dtype="BF16", quantized=False):
    head_dim = hidden // heads
    config = dict(model_type="llama", num_hidden_layers=layers, hidden_size=hidden, intermediate_size=inter,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=8192,
                  vocab_size=vocab)
    if quantized:
        config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden],
              "model.norm.weight": [hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
                       p + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
                       p + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
                       p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                       p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
                       p + "mlp.down_proj.weight": [hidden, inter],
                       p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden]})
    itemsize = {"BF16": 2, "I32": 4}[dtype]
    entries, offset = {}, 0
    for name, shape in shapes.items():
        nbytes = itemsize * math.prod(shape)
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = json.dumps(entries).encode()
    with (folder / "model.safetensors").open("wb") as f:  # sparse: the data's bytes are never written
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + offset)
    return folder


@pytest.fixture
def llama3_8b(tmp_path):
    return llama(tmp_path / "Meta-Llama-3-8B", 32, 4096, 14336, 32, 8)


@pytest.fixture
def llama3_70b(tmp_path):
    return llama(tmp_path / "Meta-Llama-3-70B", 80, 8192, 28672, 64, 8)


def test_llama3_8b_is_counted_from_its_headers(llama3_8b):
    model = sizing.read_model(llama3_8b)
    assert model.parameters == 8_030_261_248  # Llama-3-8B's published count
    assert model.weight_bytes == 2 * model.parameters  # bf16
    assert model.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    assert model.max_model_len == 4096  # the container's default cap of the model's 8192
    assert sizing.read_model(llama3_8b, "float32").weight_bytes == 4 * model.parameters


def test_an_8b_model_fits_one_a10g_with_room_for_a_few_sequences(llama3_8b):
    model = sizing.read_model(llama3_8b)
    fit = sizing.fit("ml.g5.xlarge", model)
    assert fit.tensor_parallel == 1 and fit.fits
    # 14.96 GiB of weights + 2 GiB runtime of 22 * 0.9 = 19.8 GiB: 2.84 GiB of KV, 0.5 GiB per sequence
    assert fit.sequences == 5
    assert not sizing.fit("ml.g5.xlarge", sizing.read_model(llama3_8b, "float32")).fits
    four = sizing.fit("ml.g5.12xlarge", model)
    assert four.tensor_parallel == 4 and four.sequences > 4 * fit.sequences


def test_a_70b_model_needs_several_gpus_and_the_smallest_that_fits_is_named(llama3_70b):
    model = sizing.read_model(llama3_70b)
    assert not sizing.fit("ml.g5.xlarge", model).fits
    assert not sizing.fit("ml.g5.12xlarge", model).fits  # 32.9 GiB of weights per A10G
    best = sizing.smallest_fit(model)
    assert best.instance_type == "ml.g6e.12xlarge" and best.tensor_parallel == 4  # 4 x L40S


def test_a_quantized_checkpoint_counts_its_weights_as_stored(tmp_path):
    folder = llama(tmp_path / "awq", 2, 256, 512, 4, 4, vocab=1000, dtype="I32", quantized=True)
    model = sizing.read_model(folder)
    assert model.quantized and model.weight_bytes == 4 * model.parameters


def test_tensor_parallel_divides_the_heads():
    model = sizing.ModelFacts(1, 1, 1, 1, attention_heads=9, kv_heads=3, quantized=False)  # SmolLM2-135M
    assert sizing.tensor_parallel_for(4, model) == 3
    assert sizing.tensor_parallel_for(8, sizing.ModelFacts(1, 1, 1, 1, 64, 8, False)) == 8
    assert sizing.tensor_parallel_for(4, sizing.ModelFacts(1, 1, 1, 1, 32, 2, False)) == 4  # KV heads replicated
    assert sizing.tensor_parallel_for(8, sizing.ModelFacts(1, 1, 1, 1, 12, 4, False)) == 4  # 6 splits 4 KV heads unevenly


def test_size_command_prints_every_gpu_instance_without_aws(llama3_8b, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    out = io.StringIO()
    assert main(["size", str(llama3_8b)], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("8.03B parameters, 15.0 GiB of weights")
    assert len(lines) == 1 + len(sizing.GPU_INSTANCES)
    [g5] = [line for line in lines if line.startswith("ml.g5.xlarge:")]
    assert g5.endswith("fits: KV for 5 full-context sequences")


def test_create_refuses_a_model_that_does_not_fit_before_any_aws_call(llama3_70b, capsys):
    out = io.StringIO()
    argv = ["create", "--name", "chat", "--image", "img:1", "--role", "arn:aws:iam::1:role/r",
            "--model-path", str(llama3_70b), "--instance-type", "ml.g5.2xlarge", "--dry-run"]
    assert main(argv, out=out) == 1
    assert out.getvalue() == ""  # not one AWS call, not even a dry one
    err = capsys.readouterr().err
    assert "Meta-Llama-3-70B does not fit ml.g5.2xlarge" in err and "ml.g6e.12xlarge" in err


def test_create_sets_the_instance_s_tensor_parallel(tmp_path):
    small = llama(tmp_path / "small", 2, 256, 512, heads=4, kv_heads=4, vocab=1000)  # it is packed: keep it small
    out = io.StringIO()
    argv = ["create", "--name", "chat", "--image", "img:1", "--role", "arn:aws:iam::1:role/r",
            "--model-path", str(small), "--instance-type", "ml.g5.12xlarge", "--dry-run"]
    assert main(argv, out=out) == 0
    [create_model] = [json.loads(line) for line in out.getvalue().splitlines()
                      if line.startswith("{") and json.loads(line)["operation"] == "create_model"]
    env = create_model["params"]["PrimaryContainer"]["Environment"]
    assert env["LLM_BYOC_TENSOR_PARALLEL_SIZE"] == "4"


def test_sizing_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(DeployError, match="read from config.json and safetensors weights"):
        sizing.read_model(tmp_path)
