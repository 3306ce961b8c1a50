"""Every number a run reports stays the same when the engine's hot paths change (issue 24).

The digests below are of whole results (every per-record metric, the summary, every pool
picture, the per-request table, the rejections: see ``tests/tools/engine_digest.py``) as the engine
gave them before its loop, block pool fast paths and prefix-caching paths were rewritten for
speed. A change that moves any number of any case fails here; a change meant to move numbers
must say why and update the digest with it.

Changed on purpose (2026-12-01, the swap cases only): a sequence swapped back in was counted as
prefilling its whole context again, so the cost model charged swap both the PCIe copy and the
recompute's FLOPs; it now decodes (only shared blocks freed while it was out are computed again).

Changed on purpose (2026-12-03, every case): the summary gains ``peak_running_steps`` (how many engine
steps ran the peak batch, issue 40). Every other number is unchanged: with that one field left out of
the summary, all 23 cases gave exactly the digests they had before.

Added (2026-12-03, issue 39): seven more v1 cases (an Azure window roomy, tight and with pictures;
classroom-40 on a small pool, without chunked prefill, on the seconds clock, with a prefix cache),
their digests taken on the v1 loop as it was before it was made event-driven.
"""
import pytest

from tests.tools.engine_digest import case_names, digest, run_case

EXPECTED = {
    'classroom paged 16': '70036c0c25ff9364',
    'classroom paged 1': 'e518cd29e97da1b8',
    'classroom reserve-max': '08c22c5fb4c4d76f',
    'classroom reserve-pow2': '4b989829f13d8b3b',
    'classroom recompute small pool': '00f843d0e9859f80',
    'classroom swap small pool': '43d03a7102692e1c',
    'classroom swap tiny host': '8289932680634d99',
    'classroom shared prefix 40': 'b2c27a21ab06b5d2',
    'classroom shared prefix swap': '4d5d1f21cee8a197',
    'classroom seconds clock': 'a5fdebd88a68e1ad',
    'azure 2000 paged': '5f05738230b31441',
    'azure 2000 paged tight': '551bc0a078810531',
    'azure 2000 reserve-max': '72d969678a40a4a1',
    'azure 300 paged pictures': '1c8d45f2e15ade81',
    'mooncake caching': '447b88f395fedc03',
    'mooncake caching tight': '2e9a3e10bdffac57',
    'mooncake caching block 64': 'f0479dbc2aa15ed1',
    'mooncake caching seconds': 'c53d5c7fe1abd1ff',
    'mooncake no caching': '2c78f761c828d8db',
    'v1 caching': '40d706f5754c8876',
    'v1 caching tight': 'f29ca7694fdeb173',
    'v1 no caching': 'ab2d99e8d85c2e8a',
    'v1 replay shipped run': '601fa3da66eae100',
    # issue 39: more of the v1 loop's paths, recorded before it was made event-driven
    'v1 azure 2000': '7ea1bc8366ade95e',
    'v1 azure 2000 tight': 'b2c4af51d49c258b',
    'v1 azure 300 pictures': 'eff16b1c39b917d1',
    'v1 classroom small pool': '98472e3f680c9dbc',
    'v1 classroom no chunking': '4e134fafcf351bc3',
    'v1 classroom seconds clock': 'f67321c1449e3a22',
    'v1 classroom prefix caching': '22ecccd994ddc69a',
}


def test_every_case_has_a_reference_digest():
    assert set(EXPECTED) == set(case_names())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_result_is_unchanged(name):
    assert digest(run_case(name)) == EXPECTED[name]
