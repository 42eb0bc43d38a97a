from coda.scoring import Outcome, table1


def test_table1_average_and_pass_at_k():
    outs = [Outcome("A", "t1", s) for s in (True, False, False, False)]
    outs += [Outcome("A", "t2", False) for _ in range(4)]
    outs += [Outcome("B", "u1", True) for _ in range(4)]
    rows = {r.app: r for r in table1(outs)}
    assert rows["A"].average_at_k == 12.5 and rows["A"].pass_at_k == 50.0
    assert rows["B"].average_at_k == 100.0 and rows["B"].pass_at_k == 100.0
    # Overall is the mean of the apps, as in the paper's Table 1
    assert rows["Overall"].average_at_k == 56.25 and rows["Overall"].pass_at_k == 75.0
    assert table1([]) == []


def test_wilson_interval_stays_inside_0_1_and_narrows_with_n() -> None:
    from coda.scoring import wilson_interval

    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 24)
    assert low == 0.0 and 0.1 < high < 0.15
    low, high = wilson_interval(24, 24)
    assert 0.85 < low < 0.87 and high == 1.0
    # the textbook value: 9 of 10 -> (0.596, 0.982)
    low, high = wilson_interval(9, 10)
    assert round(low, 3) == 0.596 and round(high, 3) == 0.982
    wide, narrow = wilson_interval(5, 10), wilson_interval(50, 100)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    import pytest

    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)


def test_rates_by_key_in_order_of_first_appearance() -> None:
    from coda.scoring import rates_by

    rates = rates_by([("v2", True), ("base", False), ("v2", False), ("base", True),
                      ("base", True)])
    assert [(r.key, r.rollouts, r.succeeded) for r in rates] == [("v2", 2, 1), ("base", 3, 2)]
    assert rates[1].rate == 2 / 3 and rates[1].interval[0] < 2 / 3 < rates[1].interval[1]
