"""Every number a run reports stays the same when the engine's hot paths change (issue 24).

The digests below are of whole results (every per-record metric, the summary, every pool
picture, the per-request table, the rejections: see ``tests/tools/engine_digest.py``) as the engine
gave them before its loop, block pool fast paths and prefix-caching paths were rewritten for
speed. A change that moves any number of any case fails here; a change meant to move numbers
must say why and update the digest with it.

Changed on purpose (2026-12-01, the swap cases only): a sequence swapped back in was counted as
prefilling its whole context again, so the cost model charged swap both the PCIe copy and the
recompute's FLOPs; it now decodes (only shared blocks freed while it was out are computed again).
"""
import pytest

from tests.tools.engine_digest import case_names, digest, run_case

EXPECTED = {
    'classroom paged 16': 'c58d9962f18609ce',
    'classroom paged 1': 'af57a0984d1d9dc2',
    'classroom reserve-max': 'f2cb8ac4a98679eb',
    'classroom reserve-pow2': 'bfa05ebeacd5e578',
    'classroom recompute small pool': '424679c4565b3454',
    'classroom swap small pool': '74aa2ad73efbebf4',
    'classroom swap tiny host': 'eb560578ef514005',
    'classroom shared prefix 40': 'cf60eeec57b29ccc',
    'classroom shared prefix swap': '322ee23efd0a867f',
    'classroom seconds clock': '5b19b87c7db6511c',
    'azure 2000 paged': 'd867ee9bb6a5e8cd',
    'azure 2000 paged tight': '66e67502e157fa7f',
    'azure 2000 reserve-max': '3378054b2c686263',
    'azure 300 paged pictures': '8fd0fa22c82ecc65',
    'mooncake caching': 'a6d10894c16b4242',
    'mooncake caching tight': '0de012331352454e',
    'mooncake caching block 64': '4db60641e190e922',
    'mooncake caching seconds': '618da65da0add6dc',
    'mooncake no caching': 'bb72507627c4cb35',
    'v1 caching': 'ff83433b55127a11',
    'v1 caching tight': 'e2201b01a1702e53',
    'v1 no caching': '7a128297b9e6b93b',
    'v1 replay shipped run': 'd4e4bec066133fde',
}


def test_every_case_has_a_reference_digest():
    assert set(EXPECTED) == set(case_names())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_result_is_unchanged(name):
    assert digest(run_case(name)) == EXPECTED[name]
