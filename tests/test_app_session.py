"""The chat's engine side: one message per step, the detokenizer, a session's proposers and records."""

from __future__ import annotations

import os

from engine import Detokenizer, NgramProposer, Step
from specchat.feed import StepFeed
from specchat.messages import ReplyDone
from specchat.settings import ChatRecord, Settings, config_dir
from specchat.widgets.panel import Stats
from tests.scripted import WORDS, ScriptedSession


def test_a_reply_runs_into_its_feed_step_by_step_then_posts_reply_done():
    session = ScriptedSession(accepts=[2])
    session.load(print)
    feed, posted = StepFeed(7, session.detokenizer()), []
    session.run_reply(session.stream([1], None, NgramProposer(k=3)), feed, posted.append)
    steps = feed.take()
    assert posted == [ReplyDone(7, "stop")]
    assert [s.step.kind for s in steps[1:3]] == ["correction", "correction"]
    assert "".join(t for s in steps for t, kind in s.pieces if kind != "refused") == "".join(WORDS)
    assert steps[1].pieces == [(WORDS[1], "accepted"), (WORDS[2], "accepted"), (WORDS[3], "correction")]
    # the draft refused at the correction waits for the end of its word: the next token's space
    assert steps[2].pieces[0] == (" cat", "refused") and steps[2].origins[0] is steps[1].step
    assert feed.take() == []  # taken once


CAFE = {1: b"caf", 2: b"\xc3", 3: b"\xa9", 4: b"!", 5: b" \xe2\x9c", 6: b"\x93"}  # "café! ✓", é and ✓ split


def cafe(ids):
    return b"".join(CAFE[i] for i in ids).decode("utf-8", errors="replace")


def test_detokenizer_holds_back_a_split_character_until_it_is_complete():
    detok = Detokenizer(cafe, skip={9})
    assert [detok.add([t]) for t in (1, 2, 3, 4, 9)] == [["caf"], [""], ["é"], ["!"], [""]]


def test_detokenizer_gives_a_whole_step_the_same_pieces_as_token_by_token():
    one_by_one = Detokenizer(cafe, skip={9})
    expected = [piece for t in (1, 2, 3, 4, 5, 6, 9) for piece in one_by_one.add([t])]
    batches = []
    detok = Detokenizer(cafe, skip={9}, decode_batch=lambda windows: batches.append(windows) or
                        [cafe(w) for w in windows])
    assert detok.add([1, 2]) + detok.add([3, 4, 5]) + detok.add([6, 9]) == expected
    assert len(batches) == 3  # one call into the tokenizer per step


def test_settings_round_trip_and_ignore_bad_values(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    Settings(temperature=0.7, k=6, system="be brief").save()
    assert Settings.load() == Settings(temperature=0.7, k=6, system="be brief")
    (config_dir() / "settings.json").write_text('{"temperature": "hot", "top_k": 5}')
    assert Settings.load() == Settings(top_k=5)


def test_transcript_is_saved_whole_and_exports_as_markdown(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    record = ChatRecord(model="m", messages=[{"role": "user", "content": "hi"}])
    path = record.save()
    assert path.parent == tmp_path / "data" / "transcripts"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    md = record.export(tmp_path / "chat.md").read_text()
    assert "## You\n\nhi" in md
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "chat.md").stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain write leaves it
    assert path.stat().st_mode & 0o777 == 0o600  # the transcript stays the user's alone


def test_speedup_waits_for_a_timed_plain_step():
    stats = Stats()
    stats.add(Step([5, 6, 7], [5, 6, 8], 2, "correction", 3, "n-gram", 0.0, 0.010, 10))
    assert stats.speedup(stats.session) is None
    stats.add(Step([9], [], 0, "plain", 0, "off", 0.0, 0.010, 13))
    # 4 tokens in 20 ms against 10 ms per plain step: twice as fast
    assert abs(stats.speedup(stats.session) - 2.0) < 1e-9


def test_command_line_options_override_saved_settings(tmp_path, monkeypatch):
    from specchat.__main__ import parser
    from specchat.app import settings_from

    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    Settings(temperature=0.7, proposer="off", k=3).save()
    kept, flags = settings_from(parser().parse_args(["chat"]))
    assert (kept.temperature, kept.proposer, kept.k) == (0.7, "off", 3) and flags == {}
    given, flags = settings_from(parser().parse_args(["chat", "--speculate", "6", "--temperature", "0"]))
    assert (given.temperature, given.proposer, given.k) == (0.0, "n-gram", 6)
    assert flags == {"temperature": 0.0, "proposer": "n-gram", "k": 6}


def test_the_k_control_goes_past_its_top_to_auto_and_back():
    from engine import AUTO, MAX_K
    from specchat.session import clamp_k, next_k

    assert next_k(MAX_K, 1) == AUTO and next_k(AUTO, 1) == AUTO
    assert next_k(AUTO, -1) == MAX_K and next_k(4, 1) == 5
    assert clamp_k(next_k(4, 95)) == MAX_K  # a k typed out of range is not auto
