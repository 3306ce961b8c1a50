"""A value refused in the explainer's sidebar is named at the top of the main area as well as
under its field: at 1920x1080 the last sidebar field's message was below the fold, so the field
seemed to jump back for no reason. The message is the same words in both places, shown once per
refusal (the next run, with nothing refused, shows neither).
"""
from __future__ import annotations

from tests.conftest import open_page, seen


def test_a_refused_sidebar_value_is_said_in_the_main_area_too():
    at = open_page("pages/explainer.py", timeout=300)
    key = next(w.key for w in at.sidebar.number_input if str(w.key).startswith("max_new_"))
    kept = at.number_input(key=key).value
    at.number_input(key=key).set_value(10 ** 9).run()
    assert not at.exception, at.exception
    assert at.number_input(key=key).value == kept                      # put back to the last value used
    side = [seen(e.value) for e in at.sidebar.error if "was not used" in seen(e.value)]
    main = [seen(e.value) for e in at.main.error if "was not used" in seen(e.value)]
    assert len(side) == 1 and side[0].startswith("max_new_tokens (generation cap) = 1,000,000,000 was not used")
    assert main == side
    at.run()                                                            # nothing refused this time
    assert not [e for e in at.error if "was not used" in seen(e.value)]
