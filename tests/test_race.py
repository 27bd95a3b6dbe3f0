"""The race (/compare): the last prompt through plain decoding and every ready proposer, with the
same sampling and seed, side by side, exportable."""

from __future__ import annotations

import csv
import json
import threading
from argparse import Namespace

from engine import SamplingParams
from specchat.app import make_app
from specchat.race import export_race, run_race
from specchat.session import ChatSession
from specchat.settings import Settings, data_dir
from specchat.widgets.race_screen import RaceScreen
from tests.conftest import tiny_model
from tests.pilot import LetterTokenizer, ask, chat, pilot_test, recorded_notes, say, until
from tests.scripted import ScriptedSession


def tiny_session() -> ChatSession:
    model = tiny_model()
    model.tokenizer = LetterTokenizer()
    return ChatSession(Namespace(model="tiny", draft=None, dflash=None), model=model)


def test_every_deterministic_row_writes_the_same_text_as_plain():
    session = tiny_session()
    ids = session.model.tokenizer.encode("abcabcabcabcabc")
    names = [n for n in session.proposer_names() if n != "off" and not session.needs_loading(n)]
    assert names  # the n-gram proposer needs nothing
    entrants = [("off", 0), *((n, 3) for n in names)]
    for sampling in (SamplingParams(max_tokens=20), SamplingParams(temperature=0.8, seed=3, max_tokens=20)):
        race = run_race(session, ids, sampling, entrants, threading.Event())
        assert [r.name for r in race.rows] == ["off", *names]
        assert race.plain.metrics.drafted == 0 and len(race.plain.tokens) == 20
        for row in race.rows:
            assert race.same_as_plain(row) is True, row.name
            assert row.text == race.plain.text
        spec = race.rows[1]
        assert spec.metrics.drafted > 0 and race.speedup(spec) > 0


def test_a_stopped_race_ends_early_and_claims_nothing():
    session = tiny_session()
    stop = threading.Event()
    stop.set()
    race = run_race(session, [1, 2, 3], SamplingParams(max_tokens=20), [("off", 0), ("n-gram", 3)], stop)
    assert race.rows == []


def test_a_proposer_that_fails_is_a_row_with_its_error_and_the_race_goes_on():
    session = tiny_session()
    race = run_race(session, [1, 2, 3], SamplingParams(max_tokens=4), [("off", 0), ("nonesuch", 3)],
                    threading.Event())
    assert race.rows[1].error.startswith("no proposer 'nonesuch'")
    assert race.same_as_plain(race.rows[1]) is None and race.speedup(race.rows[1]) is None


def test_the_export_parses_and_carries_every_row(tmp_path):
    session = tiny_session()
    race = run_race(session, [1, 2, 3, 1, 2, 3], SamplingParams(max_tokens=8), [("off", 0), ("n-gram", 2)],
                    threading.Event())
    json_path, csv_path = export_race(tmp_path / "race", race)
    data = json.loads(json_path.read_text())
    assert [r["proposer"] for r in data["rows"]] == ["off", "n-gram"]
    assert data["sampling"]["max_tokens"] == 8 and data["rows"][1]["same_text_as_plain"] is True
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["proposer"] for r in rows] == ["off", "n-gram"] and "tokens_per_second" in rows[0]


@pilot_test
async def test_slash_compare_races_the_last_prompt_and_shows_every_entrant(home):
    app = make_app(ScriptedSession(accepts=[2, 4, 0]), Settings(proposer="n-gram", k=4), save=False)
    async with chat(app, (140, 45)) as pilot:
        await say(pilot, "/compare")  # nothing to race yet
        await ask(pilot, "tell me about a fox")
        await say(pilot, "/compare")
        await until(pilot, lambda: isinstance(app.screen, RaceScreen), "the race")
        race = app.screen.race
        assert [r.name for r in race.rows][0] == "off" and "n-gram" in [r.name for r in race.rows]
        assert all(race.same_as_plain(r) for r in race.rows)
        assert app.session.prompts[-1][-1]["content"] == "tell me about a fox"
        notes = recorded_notes(app)
        await pilot.press("e")
        await until(pilot, lambda: notes, "the export")
        data = json.loads((data_dir() / "exports" / f"{app.record.id}-race.json").read_text())
        assert [r["proposer"] for r in data["rows"]] == [r.name for r in race.rows]
        await pilot.press("escape")
        assert not isinstance(app.screen, RaceScreen)


@pilot_test
async def test_esc_stops_the_race_at_its_next_step(home):
    session = ScriptedSession(accepts=[2])
    app = make_app(session, Settings(proposer="n-gram", k=4), save=False)
    async with chat(app, (140, 45)) as pilot:
        await ask(pilot, "go")
        session.stepwise = True  # the race's steps wait for release()
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.racing is not None, "the race")
        await pilot.press("escape")
        session.release(1)
        await until(pilot, lambda: isinstance(app.screen, RaceScreen), "the stopped race")
        race = app.screen.race
        assert [r.name for r in race.rows] == ["off"] and race.rows[0].finished == "cancelled"
        assert race.same_as_plain(race.rows[0]) is None
        assert app.racing is None
