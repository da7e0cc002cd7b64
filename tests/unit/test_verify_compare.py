"""Record-by-record comparison: each kind of divergence is reported as itself and nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from switchyard.mirror.offsets import OffsetMap
from switchyard.verify.compare import Digested, PartitionFindings, compare_partition, digest


def log(n: int, start: int = 0, tag: str = "v") -> list[Digested]:
    return [
        Digested(start + i, digest(f"k{i}".encode(), f"{tag}{i}".encode(), [("h", b"1")]), 1000 + i)
        for i in range(n)
    ]


def run(
    source: list[Digested], target: list[Digested], offset_map: OffsetMap | None = None
) -> PartitionFindings:
    findings = PartitionFindings("t", 0, 0, len(source), 0, len(target))
    return compare_partition(findings, source, target, offset_map or OffsetMap())


def counts(f: PartitionFindings) -> tuple[int, int, int, int, int]:
    return (f.present, f.missing, f.extra, f.mismatched, f.misaligned)


def test_a_clean_copy() -> None:
    assert counts(run(log(10), log(10))) == (10, 0, 0, 0, 0)
    assert run(log(10), log(10)).clean


def test_missing_extra_altered() -> None:
    assert counts(run(log(10), log(9))) == (9, 1, 0, 0, 0)
    assert counts(run(log(10), [*log(10), Digested(10, b"x", 0)])) == (10, 0, 1, 0, 0)
    altered = log(10)
    altered[4] = Digested(4, digest(b"k4", b"changed", [("h", b"1")]), 1004)
    found = run(log(10), altered)
    assert counts(found) == (9, 0, 0, 1, 0)
    assert found.examples == ["source 4 -> target 4: key, value or headers differ"]


def test_a_changed_timestamp_is_a_mismatch() -> None:
    target = log(3)
    target[1] = Digested(1, target[1].digest, 5)
    assert counts(run(log(3), target)) == (2, 0, 0, 1, 0)


def test_shifted_offsets_are_misaligned_not_missing() -> None:
    shifted = [Digested(r.offset + 1, r.digest, r.timestamp) for r in log(10)[5:]]
    found = run(log(10), log(10)[:5] + shifted)
    assert counts(found) == (5, 0, 0, 0, 5)


def test_the_map_says_where_records_belong() -> None:
    source = [Digested(o, d.digest, d.timestamp) for o, d in zip((0, 1, 2, 4, 5), log(5), strict=True)]
    assert counts(run(source, log(5), OffsetMap([(4, 3)]))) == (5, 0, 0, 0, 0)
    assert counts(run(source, log(5))) == (3, 0, 0, 0, 2)  # read as identical: two are misaligned


@given(st.integers(1, 40), st.data())
def test_every_record_is_counted_once(n: int, data: st.DataObject) -> None:
    source = log(n)
    target = data.draw(st.permutations(log(n)))
    target = [Digested(i, r.digest, r.timestamp) for i, r in enumerate(target)]
    found = run(source, target)
    assert found.present + found.missing + found.mismatched + found.misaligned == n
    assert found.missing == found.extra == 0
