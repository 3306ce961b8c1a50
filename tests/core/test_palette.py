"""The palette keeps its meanings apart for normal vision and under colour-vision deficiencies.

Colour differences are measured as Euclidean distance in CAM02-UCS (colorspacious), where about 1
is a just-noticeable difference; simulations are full dichromacy (severity 100) of each kind.
"""
import itertools

import numpy as np
import pytest
from colorspacious import cspace_convert

from allocator.viz import theme

VIEWS = ("normal", "deuteranomaly", "protanomaly", "tritanomaly")


def _ucs(hex_colour: str, view: str) -> np.ndarray:
    rgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    if view != "normal":
        rgb = np.clip(cspace_convert(rgb, {"name": "sRGB1+CVD", "cvd_type": view, "severity": 100}, "sRGB1"), 0, 1)
    return cspace_convert(rgb, "sRGB1", "CAM02-UCS")


def difference(a: str, b: str, view: str) -> float:
    """Delta E in CAM02-UCS between two colours as someone with ``view`` sees them."""
    return float(np.linalg.norm(_ucs(a, view) - _ucs(b, view)))


@pytest.mark.parametrize("view", VIEWS)
def test_state_colours_stay_apart(view):
    for (na, a), (nb, b) in itertools.combinations(theme.STATE_COLOURS.items(), 2):
        assert difference(a, b, view) >= 15, f"{na} vs {nb} under {view}: {difference(a, b, view):.1f}"


@pytest.mark.parametrize("view", VIEWS)
def test_no_request_colour_looks_like_a_state(view):
    for name, state in theme.STATE_COLOURS.items():
        for request in theme.REQUEST_COLOURS:
            assert difference(state, request, view) >= 12, (
                f"request {request} vs {name} under {view}: {difference(state, request, view):.1f}")


def test_request_colours_are_not_near_duplicates():
    for a, b in itertools.combinations(theme.REQUEST_COLOURS, 2):
        assert difference(a, b, "normal") >= 15, f"{a} vs {b}: {difference(a, b, 'normal'):.1f}"


def test_one_meaning_per_colour():
    everything = [*theme.STATE_COLOURS.values(), *theme.REQUEST_COLOURS, *theme.SERIES_COLOURS.values(),
                  *theme.HIGHLIGHT_COLOURS.values()]
    assert len(set(c.upper() for c in everything)) == len(everything)


def test_the_old_palette_would_have_failed():
    """The check can fail: the previous shared pink turned into a request colour under deuteranopia."""
    assert difference("#CC79A7", "#44AA99", "deuteranomaly") < 12
    assert difference("#1F78B4", "#4477AA", "normal") < 15
