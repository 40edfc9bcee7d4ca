"""Ranks with equal ``device_properties`` hold one list
(:func:`traincast.trace.traceset.share_device_properties`), from a parse and from a cache."""

from __future__ import annotations

from pathlib import Path

import pytest

import traincast
from traincast.trace.traceset import RankInfo, share_device_properties


def test_equal_neighbours_share_and_others_keep_their_own() -> None:
    a100 = [{"name": "A100", "numSms": 108}]
    h100 = [{"name": "H100", "numSms": 132}]
    ranks = [RankInfo(0, None, device_properties=[dict(d) for d in a100]),
             RankInfo(1, None, device_properties=[dict(d) for d in a100]),
             RankInfo(2, None, device_properties=[dict(d) for d in h100]),
             RankInfo(3, None, device_properties=[dict(d) for d in a100]),
             RankInfo(4, None, device_properties=[])]
    share_device_properties(ranks)
    assert ranks[1].device_properties is ranks[0].device_properties
    assert ranks[2].device_properties == h100
    assert ranks[2].device_properties is not ranks[0].device_properties
    assert ranks[3].device_properties == a100 and ranks[4].device_properties == []
    assert [r.device_properties for r in ranks] == [a100, a100, h100, a100, []]


@pytest.mark.filterwarnings("ignore:execution traces linked")
def test_a_job_parsed_and_read_back_shares_its_equal_properties(
        traces: Path, tmp_path: Path) -> None:
    folder = traces / "dlrm_8xv100" / "kineto"
    cold = traincast.load(folder, cache=tmp_path, executor="serial")
    warm = traincast.load(folder, cache=tmp_path, executor="serial")
    for ts in (cold, warm):
        first, *rest = (ts.ranks[r] for r in ts.rank_ids)
        assert first.device_properties and rest
        assert all(i.device_properties is first.device_properties for i in rest)
    assert [i.device_properties for i in cold.ranks.values()] == \
        [i.device_properties for i in warm.ranks.values()]
