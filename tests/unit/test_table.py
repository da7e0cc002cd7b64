from switchyard.table import render


def test_columns_align_and_trailing_space_is_trimmed() -> None:
    out = render(("A", "LONGER"), [("xx", 1), ("y", "")])
    assert out.splitlines() == ["A   LONGER", "xx  1", "y"]
