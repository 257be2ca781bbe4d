from benchmarks.against_commit import round_order, round_ratios


def test_each_round_starts_with_the_next_subject():
    names = ["this tree", "abc123", "variant"]
    orders = [round_order(names, i) for i in range(4)]
    assert orders[0] == ["this tree", "abc123", "variant"]
    assert orders[1] == ["abc123", "variant", "this tree"]
    assert orders[2] == ["variant", "this tree", "abc123"]
    assert orders[3] == orders[0]
    assert {order[0] for order in orders[:3]} == set(names)  # none always runs first


def test_ratios_are_taken_within_each_round():
    runs = {"this tree": [{"tokens_per_s": 150.0}, {"tokens_per_s": 100.0}],
            "rev": [{"tokens_per_s": 100.0}, {"tokens_per_s": 125.0}]}
    ratios = round_ratios(runs, "rev")
    assert ratios["rev"] == [1.0, 1.0]
    assert ratios["this tree"] == [1.5, 0.8]
