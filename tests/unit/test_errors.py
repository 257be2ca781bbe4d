import pytest

from llm_byoc import errors


@pytest.mark.parametrize(
    "cls, status",
    [
        (errors.InvalidRequest, 400),
        (errors.ModelNotFound, 404),
        (errors.ModelAlreadyLoaded, 409),
        (errors.PayloadTooLarge, 413),
        (errors.UnsupportedMediaType, 415),
        (errors.QueueFull, 429),
        (errors.EngineDead, 503),
        (errors.RequestTimeout, 504),
        (errors.InsufficientMemory, 507),
    ],
)
def test_each_error_carries_its_status_and_survives_the_wire(cls, status):
    exc = cls("boom")
    assert exc.status_code == status
    assert exc.to_dict() == {"error": "boom", "type": cls.error_type}
    rebuilt = errors.ServingError.from_wire(exc.error_type, exc.message)
    assert type(rebuilt) is cls and rebuilt.message == "boom"


def test_an_unknown_wire_type_becomes_a_generic_500():
    rebuilt = errors.ServingError.from_wire("SomethingElse", "odd")
    assert type(rebuilt) is errors.ServingError and rebuilt.status_code == 500
