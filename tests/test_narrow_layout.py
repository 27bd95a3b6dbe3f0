"""On a narrow terminal the legend and the keys fold onto more lines instead of being cut, and the
proposer cycle says why a proposer is not in it."""

from __future__ import annotations

import pytest
from textual.content import Content

from specchat.app import make_app
from specchat.settings import Settings
from specchat.widgets.folded import fold
from tests.pilot import chat, pilot_test, recorded_notes, until
from tests.scripted import ScriptedSession


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))


def test_fold_breaks_between_entries_only_and_keeps_their_order():
    entries = [Content(word) for word in ("^p proposer", "^t teaching", "^b panel", "^s settings")]
    lines = fold(entries, 24)
    assert [line.plain for line in lines] == ["^p proposer  ^t teaching", "^b panel  ^s settings"]
    assert all(line.cell_length <= 24 for line in lines)


def test_an_entry_wider_than_the_line_gets_a_line_of_its_own():
    lines = fold([Content("ab"), Content("a very long entry"), Content("cd")], 6)
    assert [line.plain for line in lines] == ["ab", "a very long entry", "cd"]


def shown_keys(app) -> list[str]:
    bindings = app.screen.active_bindings.values()
    return [binding.description for _node, binding, _enabled, _tip in bindings if binding.show]


@pilot_test
async def test_at_60_columns_every_key_and_the_whole_legend_are_on_the_screen():
    app = make_app(ScriptedSession(), Settings(teaching=True), save=False)
    async with chat(app, (60, 20)) as pilot:
        await pilot.pause()
        keys, legend = app.query_one("#keys"), app.query_one("#legend")
        assert keys.size.height >= 2 and legend.size.height >= 2  # folded, not cut
        assert keys.region.bottom <= 20 and legend.region.bottom <= keys.region.y
        text = keys.render().plain
        assert all(description in text for description in shown_keys(app))
        assert all(len(line) <= keys.size.width for line in text.splitlines())
        assert "teaching on" in legend.render().plain


@pilot_test
async def test_at_full_width_the_keys_take_one_line():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app, (200, 40)) as pilot:
        await pilot.pause()
        assert app.query_one("#keys").size.height == 1
        assert app.query_one("#legend").size.height == 1


@pilot_test
async def test_the_proposer_cycle_says_why_dflash_is_not_in_it():
    app = make_app(ScriptedSession(), Settings(proposer="n-gram"), save=False)
    async with chat(app) as pilot:
        notes = recorded_notes(app)
        names = app.session.proposer_names()
        for _ in range(len(names) - names.index(app.proposer_name)):
            await pilot.press("ctrl+p")
            await until(pilot, lambda: not app.loading_proposer, "the proposer")
        assert app.proposer_name == "off"
        assert any("DFlash" in note and "--dflash" in note for note in notes)
        assert not any("draft:" in note for note in notes)  # the scripted chat has its draft model
