import numpy as np
import pytest

from costlearn.core.device import preset
from costlearn.collect.sampler import ShapeBounds, sample_shapes, select_pool, shape_class
from costlearn.collect.space import enumerate_space


def test_shapes_are_distinct_within_bounds_and_include_batch1_and_skinny():
    b = ShapeBounds(1, 1024, 2.0 ** 26)
    shapes = sample_shapes(400, b, np.random.default_rng(0))
    assert len(set(shapes)) == 400
    assert all(1 <= x <= 1024 for s in shapes for x in s)
    assert all(2 * m * n * k <= 2 ** 26 for m, n, k in shapes)
    assert sum(m == 1 for m, _, _ in shapes) > 40
    assert sum(min(m, n) <= 16 for m, n, _ in shapes) > 80


def test_same_seed_same_shapes():
    b = ShapeBounds()
    assert sample_shapes(20, b, np.random.default_rng(3)) == sample_shapes(20, b, np.random.default_rng(3))


def test_impossible_request_is_an_error_not_a_hang():
    with pytest.raises(ValueError, match="distinct"):
        sample_shapes(10, ShapeBounds(1, 1, 2.0), np.random.default_rng(0))


@pytest.mark.parametrize("kw", [dict(min_extent=0), dict(min_extent=8, max_extent=4), dict(max_flops=1),
                                dict(batch1_share=0.9, skinny_share=0.5)])
def test_bad_bounds_are_clear_errors(kw):
    with pytest.raises(ValueError):
        ShapeBounds(**kw)


def test_pool_is_stratified_by_block_height():
    space = enumerate_space(preset("h200")).configs
    pool = select_pool(space, 64, np.random.default_rng(0))
    heights = {c.block_m for c in pool}
    assert len(pool) == 64 and 1 in heights and len(heights) == len({c.block_m for c in space})


def test_shape_classes():
    assert shape_class(1, 4096, 4096) == "batch1"
    assert shape_class(8, 4096, 4096) == "skinny"
    assert shape_class(4096, 4096, 4096) == "square"
    assert shape_class(64, 64, 8192) == "large_k"
