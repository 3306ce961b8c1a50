"""Every number a run reports stays the same when the engine's hot paths change (issue 24).

The digests below are of whole results (every per-record metric, the summary, every pool
picture, the per-request table, the rejections: see ``tests/engine_digest.py``) as the engine
gave them before its loop, block pool fast paths and prefix-caching paths were rewritten for
speed. A change that moves any number of any case fails here; a change meant to move numbers
must say why and update the digest with it.
"""
import pytest

from tests.engine_digest import case_names, digest, run_case

EXPECTED = {
    'classroom paged 16': 'd263a29526dbac8a',
    'classroom paged 1': '55cb2d8442fad3fd',
    'classroom reserve-max': '0e89a967f973fbbd',
    'classroom reserve-pow2': '9560502ac4ca2589',
    'classroom recompute small pool': 'a46d9184a4405a3a',
    'classroom swap small pool': 'a84c12c044b86afe',
    'classroom swap tiny host': '2b629c0667b978af',
    'classroom shared prefix 40': 'c6509de16d31027f',
    'classroom shared prefix swap': '372c70e79477352f',
    'classroom seconds clock': '22ca48e6261ddd02',
    'azure 2000 paged': '4396135d802f1d59',
    'azure 2000 paged tight': 'd2bc56fa5e0e293f',
    'azure 2000 reserve-max': '03e28e61adb15f02',
    'azure 300 paged pictures': '3d1f28523421dd45',
    'mooncake caching': 'b94c5fab3269bc83',
    'mooncake caching tight': '1cd5818283fda206',
    'mooncake caching block 64': 'd576a0fc63b3b982',
    'mooncake caching seconds': '3ad55d9fad1a28f8',
    'mooncake no caching': '5f262f161ec3274b',
    'v1 caching': '9a9d44333c23f734',
    'v1 caching tight': '0e5b3c7081b0e152',
    'v1 no caching': '6b42da013b6fa19d',
    'v1 replay shipped run': '2d3e799010df3580',
}


def test_every_case_has_a_reference_digest():
    assert set(EXPECTED) == set(case_names())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_result_is_unchanged(name):
    assert digest(run_case(name)) == EXPECTED[name]
