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
    'classroom paged 16': '2401c6c3e2add0d7',
    'classroom paged 1': 'ce6506e508a98a07',
    'classroom reserve-max': 'eb623259e79554cb',
    'classroom reserve-pow2': '72e24a346e85a26e',
    'classroom recompute small pool': '0e66d44b7e0d88e4',
    'classroom swap small pool': '1b4d316000216b2c',
    'classroom swap tiny host': 'ef7df9c93e718046',
    'classroom shared prefix 40': '606878fe616dedbe',
    'classroom shared prefix swap': '1e15c01d2fbe061d',
    'classroom seconds clock': '9679adac5d435f93',
    'azure 2000 paged': '4396135d802f1d59',
    'azure 2000 paged tight': 'd2bc56fa5e0e293f',
    'azure 2000 reserve-max': '03e28e61adb15f02',
    'azure 300 paged pictures': 'b19ccaae3f4117d9',
    'mooncake caching': 'e69fb10423d319c4',
    'mooncake caching tight': 'ce5a83659e1cfd8c',
    'mooncake caching block 64': '06c2f7edcf69fcf3',
    'mooncake caching seconds': '3ad55d9fad1a28f8',
    'mooncake no caching': '5f262f161ec3274b',
    'v1 caching': 'a3b63b7c1ee40f2d',
    'v1 caching tight': '8c7ca47489ffd024',
    'v1 no caching': 'c7869487f198e661',
    'v1 replay shipped run': '2d3e799010df3580',
}


def test_every_case_has_a_reference_digest():
    assert set(EXPECTED) == set(case_names())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_result_is_unchanged(name):
    assert digest(run_case(name)) == EXPECTED[name]
