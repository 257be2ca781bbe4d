import pytest

from llm_byoc.errors import InvalidRequest
from llm_byoc.protocol import (
    EngineMetrics,
    EngineOutputs,
    EngineState,
    FinishReason,
    HealthReport,
    KVCacheStats,
    MetricsRequest,
    ModelInfo,
    NewSequence,
    ProtocolError,
    RopeByLength,
    SamplingParams,
    ScheduledChunk,
    SequenceUpdate,
    StepBatch,
    decode,
    encode,
)


def test_messages_round_trip_with_nested_dataclasses_and_enums():
    batch = StepBatch(
        3,
        [NewSequence("a", SamplingParams(stop=["x"], seed=7))],
        [ScheduledChunk("a", [1, 2], 0, True, [4, 1]), ScheduledChunk("d", [3], 40, True, [5], rope_length=38)],
        ["b"],
        ["c"],
    )
    assert decode(encode(batch)) == batch
    info = ModelInfo(
        model_type="llama", model_path="/m", vocab_size=10, max_model_len=20, eos_token_ids=[2],
        device="cpu", dtype="float32", max_num_seqs=4, load_time_s=1.0,
        rope_by_length=RopeByLength("longrope", 4096, recompute_on_switch=True),
    )
    report = HealthReport(EngineState.READY, info=info, num_waiting=1, kv_cache=KVCacheStats(16, 10, 2, 1, 20))
    assert decode(encode(report)) == report
    outputs = EngineOutputs([SequenceUpdate("a", [1], None, FinishReason.STOP, 3)])
    assert decode(encode(outputs)).updates[0].finish_reason is FinishReason.STOP
    assert decode(encode(MetricsRequest())) == MetricsRequest()
    series = EngineMetrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2.0\n")
    assert decode(encode(series)) == series


def test_stop_strings_are_a_tuple_after_decoding():
    params = decode(encode(NewSequence("a", SamplingParams(stop=["x", "y"])))).params
    assert params.stop == ("x", "y")


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"no": "type"}',
        b'{"__t": "os.system", "command": "true"}',
        b'{"__t": "Shutdown", "unexpected": 1}',
        b'{"__t": "SequenceUpdate", "seq_id": "a", "token_ids": [], "finish_reason": {"__e": "Popen", "v": 1}}',
        b'{"__t": "SequenceUpdate", "seq_id": "a", "token_ids": [], "finish_reason": {"__e": "FinishReason", "v": "nope"}}',
    ],
)
def test_anything_but_a_known_message_is_a_protocol_error(data):
    with pytest.raises(ProtocolError):
        decode(data)


def test_only_protocol_messages_are_encoded():
    with pytest.raises(ProtocolError):
        encode({"__t": "Shutdown"})


@pytest.mark.parametrize(
    "params, field",
    [
        (SamplingParams(max_new_tokens=0), "max_new_tokens"),
        (SamplingParams(max_new_tokens=5000), "max_new_tokens"),
        (SamplingParams(max_new_tokens=True), "max_new_tokens"),
        (SamplingParams(temperature=-1.0), "temperature"),
        (SamplingParams(temperature=float("nan")), "temperature"),
        (SamplingParams(top_p=0.0), "top_p"),
        (SamplingParams(top_k=-1), "top_k"),
        (SamplingParams(repetition_penalty=0), "repetition_penalty"),
        (SamplingParams(stop=("",)), "stop"),
        (SamplingParams(seed=-3), "seed"),
    ],
)
def test_bad_sampling_params_name_the_field(params, field):
    with pytest.raises(InvalidRequest, match=field):
        params.validate(max_new_tokens_limit=2048)


def test_good_sampling_params_validate():
    params = SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, top_k=40, stop=("\n",), seed=1)
    assert params.validate(2048) is params
    assert SamplingParams().greedy and not params.greedy
