"""The Markdown view of finished replies: headings, lists, emphasis and highlighted code, each
character still in its token's origin style; f5 switches to raw text and back, and is remembered."""

from __future__ import annotations

from textual.content import Content

from specchat.app import make_app
from specchat.markdown_layout import layout
from specchat.markdown_view import markdown
from specchat.settings import Settings
from specchat.widgets.help import keys
from specchat.widgets.legend import ENTRIES, Legend
from specchat.widgets.origins import CURSOR, STYLES, TINTS
from specchat.widgets.reply import TokenPicked
from tests.pilot import ask, chat, pilot_test, ready, reply, stepped, until
from tests.scripted import ScriptedSession

# A reply of the script's 21 tokens: with accepts [2, 4, 0, 3, 1] at k 4 the first is plain, then
# 2 accepted + a correction, 4 accepted + a bonus, a correction (in the code), 3 accepted + ...
MARKDOWN_WORDS = (
    "# Fox",
    "\n\n",
    "- quick",
    "\n- brown",
    "\n\n```python",
    "\ndef",
    " jump",
    "(fox",
    "):",
    "\n    return",
    " fox",
    ".",
    "over",
    "(",
    '"dog"',
    ")",
    "\n```",
    "\n\nUse",
    " `jump`",
    " **now**",
    ".",
)
CODE_CORRECTION = 9  # "\n    return": the model's token where it refused a draft, inside the code


def style_at(content: Content, i: int) -> str:
    return " ".join(span.style for span in content.spans if span.start <= i < span.end)


def style_of(content: Content, text: str) -> str:
    """The style of the first character of `text` where the content shows it."""
    return style_at(content, content.plain.index(text))


def test_the_layout_shows_each_character_where_the_reply_has_it():
    text = (
        "".join(MARKDOWN_WORDS) + "\n1. one\n  * two\n> said\r\n\n---\n*em*, __strong__, snake_case, `open\n"
    )
    text += "~~~\nnot closed: a reply stopped in its code"
    for run in layout(text):
        if run.at is not None:
            assert text[run.at : run.at + len(run.text)] == run.text


def test_a_code_block_cut_short_runs_to_the_end():
    assert markdown([("```python\nx = 1\nsnake_case * 2 # **", "plain")], False).plain == (
        "▎ python\n▎ x = 1\n▎ snake_case * 2 # **"
    )


def test_a_heading_hides_its_marker_and_keeps_its_origin():
    shown = markdown([("# ", "plain"), ("Fox", "accepted"), ("\n", "plain")], teaching=False)
    assert shown.plain == "Fox\n"
    style = style_at(shown, 0)
    assert "bold" in style and TINTS["accepted"] in style and "underline" in style


def test_lists_show_bullets_and_keep_their_numbers():
    shown = markdown([("- quick\n- brown\n", "plain"), ("1. one\n", "bonus")], teaching=False)
    assert shown.plain == "• quick\n• brown\n1. one\n"
    assert TINTS["bonus"] in style_of(shown, "1.")


def test_inline_code_and_emphasis_hide_their_markers():
    shown = markdown([("Use `jump` ", "plain"), ("**now**", "correction"), (" or *later*", "plain")], False)
    assert shown.plain == "Use jump now or later"
    assert "$text-secondary" in style_of(shown, "jump")
    assert "bold" in style_of(shown, "now") and TINTS["correction"] in style_of(shown, "now")
    assert "italic" in style_of(shown, "later")


def test_a_fenced_block_is_highlighted_and_a_correction_inside_keeps_its_cue():
    pieces = [(text, "accepted") for text in MARKDOWN_WORDS]
    pieces[CODE_CORRECTION] = (MARKDOWN_WORDS[CODE_CORRECTION], "correction")
    shown = markdown(pieces, teaching=False)
    assert "```" not in shown.plain
    assert '▎ python\n▎ def jump(fox):\n▎     return fox.over("dog")\n' in shown.plain
    keyword = style_of(shown, "return")
    assert "$text-accent" in keyword  # the highlight's colour, after the origin's: it wins
    assert keyword.index("$text-accent") > keyword.index(STYLES["correction"])
    assert "italic" in keyword and TINTS["correction"] in keyword  # the correction's cue and tint
    assert TINTS["accepted"] in style_of(shown, "def") and "underline" in style_of(shown, "def")
    assert "$text-success" in style_of(shown, '"dog"')  # a string


def test_every_shown_character_keeps_the_origin_of_its_token():
    origins = ("plain", "accepted", "bonus", "correction")
    pieces = [(text, origins[i % 4]) for i, text in enumerate(MARKDOWN_WORDS)]
    shown = markdown(pieces, teaching=False, inspecting=True)
    for span in shown.spans:
        if "@click=pick(" in span.style:
            index = int(span.style.split("@click=pick(")[1].rstrip(")"))
            kind = pieces[index][1]
            assert STYLES[kind] in span.style and TINTS[kind] in span.style
            assert shown.plain[span.start : span.end] in pieces[index][0]


def test_refused_drafts_show_after_the_correction_in_the_teaching_view_only():
    pieces = [("```python\nx = ", "plain"), ("1", "correction"), ("2", "refused"), ("\n```\n", "plain")]
    assert markdown(pieces, teaching=False).plain == "▎ python\n▎ x = 1\n"
    teaching = markdown(pieces, teaching=True)
    assert teaching.plain == "▎ python\n▎ x = 12\n"
    assert style_of(teaching, "2") == STYLES["refused"]


def test_the_inspector_cursor_is_marked_on_its_piece():
    shown = markdown([("# ", "plain"), ("Fox", "bonus")], teaching=False, inspecting=True, cursor=1)
    assert CURSOR in style_at(shown, 0) and "@click=pick(1)" in style_at(shown, 0)


def markdown_app(**settings) -> object:
    session = ScriptedSession(accepts=[2, 4, 0, 3, 1], words=MARKDOWN_WORDS)
    return make_app(session, Settings(proposer="n-gram", k=4, **settings), save=True)


@pilot_test
async def test_a_reply_streams_raw_then_shows_as_markdown_and_f5_switches():
    app = make_app(ScriptedSession(accepts=[2, 4, 0, 3, 1], stepwise=True, words=MARKDOWN_WORDS), Settings())
    async with chat(app) as pilot:
        await stepped(pilot, app.session, "a fox", 2)
        view = reply(app)
        assert not view.markdown_block.display and view.blocks[0].display  # raw while it streams
        app.session.release(20)
        await until(pilot, lambda: app.gen is None and view.status, "the reply")
        await pilot.pause()
        assert view.markdown_block.display and not view.blocks[0].display
        assert "• quick" in view.markdown_block.render().plain
        await pilot.press("f5")
        assert not view.markdown_block.display and view.blocks[0].display
        assert not app.settings.markdown and not Settings.load().markdown  # remembered
        await pilot.press("f5")
        assert view.markdown_block.display and Settings.load().markdown


@pilot_test
async def test_the_raw_view_setting_holds_at_the_next_start():
    Settings(markdown=False).save()
    app = make_app(ScriptedSession(accepts=[2, 4, 0, 3, 1], words=MARKDOWN_WORDS), Settings.load())
    async with chat(app) as pilot:
        await ask(pilot, "a fox")
        assert not reply(app).markdown_block.display and reply(app).blocks[0].display


@pilot_test
async def test_the_legend_and_the_keys_say_which_view_shows():
    app = markdown_app()
    async with chat(app) as pilot:
        legend = app.query_one(Legend)
        for (origin, name), entry in zip(ENTRIES, legend.entries):
            assert entry.plain == name
            assert all(span.style == f"{STYLES[origin]} {TINTS[origin]}".strip() for span in entry.spans)
        assert legend.entries[-1].plain == "markdown view"
        await pilot.press("f5")
        assert legend.entries[-1].plain == "raw view"
        assert all(span.style == STYLES["accepted"] for span in legend.entries[0].spans)
    assert "f5" in keys().plain


@pilot_test
async def test_the_inspector_picks_a_token_by_a_click_in_the_markdown_view():
    app = markdown_app()
    async with chat(app, (120, 50)) as pilot:
        await pilot.press("f4")
        await ask(pilot, "a fox")
        view = reply(app)
        await pilot.click(view.markdown_block, offset=(0, 0))  # "Fox", the heading: the first token
        await pilot.pause()
        assert view.cursor == 0
        correction = view.pieces.index((MARKDOWN_WORDS[CODE_CORRECTION], "correction"))
        app.post_message(TokenPicked(view, correction))
        await pilot.pause()
        assert view.cursor == correction
        assert CURSOR in style_of(view.markdown_block.render(), "return")


def test_a_finished_reply_as_markdown(snap_compare):
    app = markdown_app()
    app.save = False
    app.clock = lambda: 0.0  # the rate seen on the screen is the one figure that wall time sets

    async def run_before(pilot):
        await ready(pilot)
        await ask(pilot, "Tell me about the fox, with code.")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)
