"""``grouped.pair_rows``: the first row of the right table holding each left pair (a left
join on two integer keys), as a dict of first rows gives it, for near and far-apart ids."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.graph.grouped import pair_rows


@pytest.mark.parametrize("seed", range(8))
def test_pair_rows_as_a_dict_of_first_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scale = 1 if seed % 2 else 10 ** 18  # far apart: the dict path
    ra, rb = rng.integers(0, 5, 30) * scale, rng.integers(-2, 4, 30)
    la, lb = rng.integers(0, 6, 25) * scale, rng.integers(-2, 5, 25)
    first: dict[tuple[int, int], int] = {}
    for j, k in enumerate(zip(ra.tolist(), rb.tolist(), strict=True)):
        first.setdefault(k, j)
    want = [first.get(k, -1) for k in zip(la.tolist(), lb.tolist(), strict=True)]
    rows, repeated = pair_rows((la, lb), (ra, rb))
    assert rows.tolist() == want
    assert repeated == (len(first) < ra.size)


def test_empty_and_unique() -> None:
    rows, repeated = pair_rows((np.array([1]), np.array([2])), (np.empty(0), np.empty(0)))
    assert rows.tolist() == [-1] and not repeated
    rows, repeated = pair_rows((np.array([3, 1]), np.array([0, 0])),
                               (np.array([1, 3]), np.array([0, 0])))
    assert rows.tolist() == [1, 0] and not repeated
