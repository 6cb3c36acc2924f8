import numpy as np
import pytest

from tapefit.distributed.world import World, launcher_rank, launcher_world_size, shard_bounds


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 10, 64, 65])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shards_cover_the_batch_in_order_and_differ_by_at_most_one(n, size):
    bounds = [shard_bounds(n, rank, size) for rank in range(size)]
    rows = np.concatenate([np.arange(n)[start:stop] for start, stop in bounds])
    np.testing.assert_array_equal(rows, np.arange(n))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == [len(part) for part in np.array_split(np.arange(n), size)]


def test_a_single_process_world_is_the_identity():
    world = World()
    assert (world.rank, world.size, world.is_chief) == (0, 1, True)
    assert world.shard(5) == slice(0, 5)
    values = np.array([1.5, 2.5], dtype=np.float32)
    np.testing.assert_array_equal(world.allreduce_sum(values, "x"), values)
    assert world.any(True, "x") and not world.any(False, "x")
    arrays = [np.ones(2)]
    assert world.broadcast(arrays, "x") is arrays


@pytest.mark.parametrize(
    ("environ", "size", "rank"),
    [
        ({}, 1, 0),
        ({"PMI_SIZE": "4", "PMI_RANK": "2"}, 4, 2),
        ({"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "1"}, 3, 1),
        ({"PMI_SIZE": "", "PMI_RANK": "x"}, 1, 0),
    ],
)
def test_the_launcher_is_read_from_its_environment(environ, size, rank):
    assert launcher_world_size(environ) == size
    assert launcher_rank(environ) == rank
