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
